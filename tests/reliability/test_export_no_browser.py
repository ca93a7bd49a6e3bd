"""`export --format png,html` without a Chrome (issue 32): one line naming the missing browser and the
command that installs it, exit 1, and the HTML report still written."""

from __future__ import annotations

import json

NO_BROWSER = "/nonexistent/chromium"


def test_export_without_chrome_writes_the_html_and_names_the_browser(fixture_run, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", NO_BROWSER)  # kaleido's override: a path that is not there
    out = tmp_path / "figs"
    code, stdout, err = cli("export", "--run", str(fixture_run), "--figures", "run/*", "--format", "png,html",
                            "--out", str(out), "--json")
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and lines[0].startswith("aclarena-diag export: error: png not written"), err
    assert "Chrome or Chromium" in lines[0] and "apt-get install chromium" in lines[0] and NO_BROWSER in lines[0]
    assert "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]  # what could be written, and nothing else
    assert "Checkpoint lineage" in (out / "report.html").read_text()
    data = json.loads(stdout)
    assert data["not_written"] == ["png"] and [f["file"].rsplit("/", 1)[-1] for f in data["files"]] == ["report.html"]


def test_image_only_export_without_chrome_is_refused_before_any_work(fixture_run, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", NO_BROWSER)
    out = tmp_path / "figs"
    code, _, err = cli("export", "--run", str(fixture_run), "--figures", "run/*", "--format", "svg", "--out", str(out))
    assert code == 1 and "svg export needs Chrome or Chromium" in err and "apt-get install chromium" in err, err
    assert list(out.iterdir()) == []  # no staging folder left
