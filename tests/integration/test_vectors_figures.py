"""Figures and dashboard callbacks of the Vectors and Displacement pages, called directly; export."""

import json

import numpy as np
import pytest

from aclarena.figures import build_figures
from aclarena.store import ResultsStore
from aclarena.store.manifest import load_manifest


@pytest.fixture()
def analysed_run(fixture_run, cli):
    for verb in ("vectors", "displacement"):
        code, _, err = cli(verb, "--run", str(fixture_run))
        assert code == 0, err
    return fixture_run


def test_figures_show_the_stored_numbers(analysed_run):
    store = ResultsStore(analysed_run)
    with store.reader() as r:
        figs = {f.name: f.figure for f in build_figures(r, load_manifest(analysed_run), "vectors/*,displacement/*")}
        s = r.read("vectors/summary/all")
        d = r.read("displacement/summary/no-embeddings")
    assert set(figs) == {"vectors-cosines", "vectors-cosines-no-embeddings", "vectors-layer-cosines-oracle-math",
                         "vectors-distances", "displacement-sft-rl", "displacement-layers", "displacement-sparsity"}
    heat = figs["vectors-cosines"].data[0]
    assert list(heat.x) == s["labels"]
    np.testing.assert_allclose(np.array(heat.z, dtype=float), s["cos"], rtol=0, atol=5e-5)  # sent to 4 decimals
    dist = figs["vectors-distances"].data[0]
    assert list(dist.x) == ["base", "seq-math", "seq-search"]
    np.testing.assert_allclose(dist.y, s["distance"][:3, 0])
    layer = figs["vectors-layer-cosines-oracle-math"].data[0]
    assert list(layer.x) == s["group_labels"] == ["embed", "layer.0", "layer.1", "final"]
    bars = figs["displacement-sft-rl"]
    assert {t.name for t in bars.data} == {"SFT", "RL", "NO PHASE"}
    # the fixture's stages each have one phase: the pooled SFT/RL ratio is undefined, and the figure says so
    assert np.isnan(d["overall_ratio"])
    assert "no stage has both an SFT and a non-zero RL update" in bars.layout.annotations[0].text
    sp = figs["displacement-sparsity"].data[0]
    assert list(sp.x)[:2] == ["0", "1e-08"]
    assert d["group_labels"] == ["layer.0", "layer.1", "final"]


def test_page_callbacks(analysed_run):
    from aclarena.dashboard.pages import displacement, vectors

    heat, dist, gmax, marks = vectors.view_figures(analysed_run, "no-embeddings")
    assert gmax == 2 and marks == {0: "L0", 1: "L1", 2: "final"}
    assert "without embeddings" in heat.layout.title.text
    assert "in layer.1" in vectors.layer_figure(analysed_run, "no-embeddings", 1).layout.title.text
    assert "in embed" in vectors.layer_figure(analysed_run, "all", 0).layout.title.text
    assert "in final" in vectors.layer_figure(analysed_run, "all", 99).layout.title.text  # clamped
    bars, profile, sparsity = displacement.figures(analysed_run, "all")
    assert [t.x for t in profile.data][0] == ("embed", "layer.0", "layer.1", "final")
    assert vectors.slider_marks([f"layer.{i}" for i in range(36)]) == {i: f"L{i}" for i in range(0, 36, 3)} | {35: "L35"}


def test_callbacks_without_results(fixture_run):
    from aclarena.dashboard.pages import displacement, vectors

    assert vectors.view_figures(fixture_run, "all") == ({}, {}, 0, {})
    assert displacement.figures(fixture_run, "all") == ({}, {}, {})


def test_export_writes_the_figures(analysed_run, cli, tmp_path):
    out = tmp_path / "figs"
    code, stdout, err = cli("export", "--run", str(analysed_run), "--figures", "vectors/*,displacement/*",
                            "--format", "svg", "--out", str(out), "--json")
    assert code == 0, err
    files = {r["file"].rsplit("/", 1)[-1] for r in json.loads(stdout)["files"]}
    assert {"vectors-cosines.svg", "vectors-distances.svg", "displacement-sft-rl.svg",
            "displacement-sparsity.svg", "displacement-layers.svg"} <= files
    svg = (out / "vectors-cosines.svg").read_text()
    assert svg.lstrip().startswith("<svg") and "seq-math - base" in svg
