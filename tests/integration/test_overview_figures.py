"""Overview figures and page callbacks on a hand-made matrix, and their export."""

from __future__ import annotations

import json

import pytest
from capability_helpers import EXPECTED, write_fixture_matrix

from aclarena.figures import FIGURES, build_figures, load_all
from aclarena.figures.overview import capability_heatmap, chain_lines, metric_rows, row_groups
from aclarena.store import ResultsStore, load_manifest
from aclarena.store.capability import load_matrix


def test_overview_figures(fixture_run):
    write_fixture_matrix(fixture_run)
    m = load_manifest(fixture_run)
    with ResultsStore(fixture_run).reader() as r:
        matrix = load_matrix(r, m)
        assert row_groups(matrix, m) == [("base", "base"), ("seq-math", "stage"), ("seq-search", "stage"),
                                         ("oracle-math", "oracle"), ("lora-ecom", "consolidated")]
        fig = capability_heatmap(matrix, m)
        heat = fig.data[0]
        assert list(heat.y) == ["base", "seq-math", "seq-search", "oracle-math (oracle)", "lora-ecom (consolidated)"]
        assert list(heat.x) == ["math/id", "search/id", "math/ood", "general"]
        assert heat.z[1][0] == pytest.approx(0.75) and heat.text[4][2] == "error" and heat.text[3][1] == ""
        lines = chain_lines(matrix, m)
        math_line = next(t for t in lines.data if t.name == "math/id")
        assert list(math_line.x) == ["base", "seq-math", "seq-search"]
        assert list(math_line.y) == pytest.approx([0.0, 0.75, 0.25])
        star = lines.data[[t.name for t in lines.data].index("math/id") + 1]
        assert list(star.x) == ["seq-math"]  # the math peak, lost at seq-search
        rows, notes = metric_rows(matrix, m, r)
        got = {row["key"]: row["value"] for row in rows}
        for k, v in EXPECTED.items():
            assert got[k] == pytest.approx(v), k
        sampled, _ = metric_rows(matrix, m, r, what="avg_k_mean")
        assert {row["key"]: row["value"] for row in sampled}["average_accuracy"] == pytest.approx(0.375 / 2)
        assert "stages: seq-math -> seq-search" in notes[0]


def test_overview_registered_and_empty_without_matrix(fixture_run):
    load_all()
    assert {"overview/capability-matrix", "overview/chain-scores", "overview/cl-metrics"} <= set(FIGURES)
    m = load_manifest(fixture_run)
    assert build_figures(None, m, "overview/*") == []
    write_fixture_matrix(fixture_run)
    with ResultsStore(fixture_run).reader() as r:
        names = [b.name for b in build_figures(r, m, "overview/*")]
    assert names == ["overview-capability-matrix", "overview-chain-scores", "overview-cl-metrics"]


def test_overview_callback_content(fixture_run):
    from aclarena.dashboard.pages.overview import overview_content

    assert overview_content(fixture_run)["empty"] is True
    write_fixture_matrix(fixture_run)
    out = overview_content(fixture_run, "avg_k_mean", "seq-search")
    assert out["matrix"].data[0].z[1][0] == pytest.approx(0.375)
    assert {r["key"]: r["value"] for r in out["rows"]}["backward_transfer"] == pytest.approx(-0.25)


def test_export_overview(fixture_run, cli, tmp_path):
    write_fixture_matrix(fixture_run)
    out = tmp_path / "figs"
    code, stdout, err = cli("export", "--run", str(fixture_run), "--figures", "overview/*", "--format", "svg,html",
                            "--out", str(out), "--json")
    assert code == 0, err
    files = {f["file"].rsplit("/", 1)[-1] for f in json.loads(stdout)["files"]}
    assert {"overview-capability-matrix.svg", "overview-chain-scores.svg", "overview-cl-metrics.svg"} <= files
    svg = (out / "overview-capability-matrix.svg").read_text()
    assert "seq-search" in svg and "oracle-math (oracle)" in svg
    html = (out / "report.html").read_text()
    assert "Capability matrix" in html and "Continual-learning metrics" in html
