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


def test_hung_export_is_killed_retried_and_reported(tmp_path, monkeypatch):
    """kaleido's browser sometimes never answers: the child is killed, retried, then a one-line error."""
    import time

    import plotly.graph_objects as go
    import pytest

    import aclarena.figures as figures
    from aclarena.errors import AclarenaError

    spec = next(iter(load_all().values()))
    bf = figures.BuiltFigure(spec, "hang", go.Figure())
    monkeypatch.setattr(figures, "EXPORT_TIMEOUT_S", 1.0)
    monkeypatch.setattr(figures, "EXPORT_TIMEOUT_PER_IMAGE_S", 0.0)
    monkeypatch.setattr(figures, "_EXPORT_CHILD", "import time; time.sleep(60)")
    t = time.monotonic()
    with pytest.raises(AclarenaError, match=r"did not answer within 1 s \(2 tries\)"):
        figures.write_static([bf], tmp_path, ["png"])
    assert time.monotonic() - t < 20
    monkeypatch.setattr(figures, "_EXPORT_CHILD", "raise SystemExit('no chromium here')")
    with pytest.raises(AclarenaError, match="no chromium here"):
        figures.write_static([bf], tmp_path, ["png"])
