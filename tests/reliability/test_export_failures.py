"""`export` failures (issue 15): a full disk or a folder where a file goes is one line, exit 1, and
no partial file; `--format ,` names no format and is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from capability_helpers import write_fixture_matrix

ROOT = Path(__file__).resolve().parents[2]


def _one_line(code: int, err: str, needle: str) -> None:
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and lines[0].startswith("aclarena-diag export: error: "), err
    assert needle in lines[0], lines[0]


@pytest.mark.parametrize("fmt", [",", " , ,", ""])
def test_format_naming_nothing_is_refused(fixture_run, tmp_path, cli, fmt):
    out = tmp_path / "figs"
    code, _, err = cli("export", "--run", str(fixture_run), "--format", fmt, "--out", str(out))
    _one_line(code, err, "names no format")
    assert not out.exists()


def test_a_folder_where_the_report_goes(fixture_run, tmp_path, cli):
    write_fixture_matrix(fixture_run)
    out = tmp_path / "figs"
    (out / "report.html").mkdir(parents=True)
    code, _, err = cli("export", "--run", str(fixture_run), "--format", "html", "--out", str(out))
    _one_line(code, err, "report.html exists and is a folder")
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]  # nothing else written
    assert (out / "report.html").is_dir()


def test_a_folder_where_an_image_goes_is_refused_before_any_work(fixture_run, tmp_path, cli):
    import json

    write_fixture_matrix(fixture_run)
    out = tmp_path / "figs"
    ids = [r["id"] for r in json.loads(cli("export", "--run", str(fixture_run), "--list", "--json")[1])]
    assert "overview/capability-matrix" in ids  # a figure the fixture's capability matrix draws
    argv = ("export", "--run", str(fixture_run), "--format", "svg", "--out", str(out), "--figures",
            "overview/capability-matrix")
    code, _, err = cli(*argv)  # learn the file name the figure gets, then put a folder there
    assert code == 0, err
    (target,) = [p for p in out.iterdir() if p.suffix == ".svg"]
    target.unlink()
    target.mkdir()
    code, _, err = cli(*argv)
    _one_line(code, err, "exists and is a folder")
    assert [p.name for p in out.iterdir()] == [target.name]  # no staging folder left


def test_full_disk_while_writing_the_report_leaves_no_partial_file(fixture_run, tmp_path):
    write_fixture_matrix(fixture_run)
    out = tmp_path / "figs"
    out.mkdir()
    limit = 64 * 1024  # the report inlines plotly.js (several MB): it cannot fit
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from aclarena.cli import main\n"
        f"sys.exit(main(['export', '--run', {str(fixture_run)!r}, '--format', 'html', '--out', {str(out)!r}]))\n"
    )
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    _one_line(res.returncode, res.stderr, "no space left")
    assert list(out.iterdir()) == []  # neither report.html nor a temporary file
