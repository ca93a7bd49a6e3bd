import json
import struct

from aclarena.figures import FIGURES, load_all


def test_export_lineage_formats(fixture_run, cli, tmp_path):
    out = tmp_path / "figs"
    code, stdout, err = cli("export", "--run", str(fixture_run), "--figures", "run/*", "--out", str(out), "--json")
    assert code == 0, err
    files = {r["file"].rsplit("/", 1)[-1] for r in json.loads(stdout)["files"]}
    assert files == {"run-lineage.png", "run-lineage.svg", "run-lineage.pdf", "report.html"}
    png = (out / "run-lineage.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (900, 420)
    svg = (out / "run-lineage.svg").read_text()
    assert svg.lstrip().startswith("<svg") and 'width="900"' in svg and 'height="420"' in svg
    assert (out / "run-lineage.pdf").read_bytes()[:5] == b"%PDF-"
    html = (out / "report.html").read_text()
    assert "Checkpoint lineage" in html and "plotly" in html.lower()


def test_export_bad_format_and_pattern(fixture_run, cli):
    code, _, err = cli("export", "--run", str(fixture_run), "--format", "pgn")
    assert code == 1 and "did you mean 'png'" in err
    code, _, err = cli("export", "--run", str(fixture_run), "--figures", "nothing/*")
    assert code == 1 and "no figure matches" in err


def test_registry_ids():
    load_all()
    assert "run/lineage" in FIGURES
    assert all("/" in k for k in FIGURES)
