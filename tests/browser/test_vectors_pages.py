"""The Vectors and Displacement pages in headless Chromium."""

import pytest
from browser_helpers import wait_for_dash

pytestmark = pytest.mark.browser


@pytest.fixture()
def analysed_run(fixture_run, cli):
    for verb in ("vectors", "displacement"):
        code, _, err = cli(verb, "--run", str(fixture_run))
        assert code == 0, err
    return fixture_run


def _title(page, graph_id):
    return page.text_content(f"#{graph_id} .gtitle")  # SVG text: no innerText


def test_vectors_page_heatmap_hover_and_layer_slider(analysed_run, serve, page, console_errors):
    url = serve(analysed_run)
    page.goto(url + "/vectors")
    wait_for_dash(page)
    page.wait_for_selector("#vectors-heatmap .main-svg")
    assert "Task-vector cosines" in _title(page, "vectors-heatmap")
    # hovering a cell shows its value
    box = page.locator("#vectors-heatmap .nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.08, box["y"] + box["height"] * 0.08)
    page.wait_for_selector("#vectors-heatmap .hoverlayer .hovertext")
    hover = page.text_content("#vectors-heatmap .hoverlayer")
    assert "cos 1.0000" in hover and "seq-math - base" in hover
    # the layer slider moves the per-layer heatmap from one block to the next
    page.wait_for_selector("#vectors-layer-heatmap .main-svg")
    assert "in embed" in _title(page, "vectors-layer-heatmap")
    page.focus("#vectors-layer-slider [role=slider]")
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "() => document.querySelector('#vectors-layer-heatmap .gtitle').textContent.includes('layer.0')", timeout=20_000)
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "() => document.querySelector('#vectors-layer-heatmap .gtitle').textContent.includes('layer.1')", timeout=20_000)
    page.wait_for_selector("#vectors-distances .main-svg")
    assert "oracle-math" in page.text_content("#vectors-distances")
    assert "no oracle for domain 'search'" in page.inner_text("#vectors-notes")
    # the export's vectors/layer-cosines: every vector's cosine with the oracle's direction, per layer block
    page.wait_for_selector("#vectors-layer-oracle .main-svg")
    assert "Cosine with the oracle-math direction, per layer" in _title(page, "vectors-layer-oracle")
    rows = page.evaluate("() => document.querySelector('#vectors-layer-oracle .js-plotly-plot').data[0].y")
    z = page.evaluate("() => document.querySelector('#vectors-layer-oracle .js-plotly-plot').data[0].z")
    own = rows.index("oracle-math - base")
    assert all(abs(v - 1) < 1e-4 for v in z[own] if v is not None)  # the direction with itself, in every block
    # excluding the embeddings changes the view
    page.get_by_text("without embeddings and head").click()
    page.wait_for_function(
        "() => document.querySelector('#vectors-heatmap .gtitle').textContent.includes('without embeddings')",
        timeout=20_000)
    assert console_errors == []


def test_displacement_page(analysed_run, serve, page, console_errors):
    url = serve(analysed_run)
    page.goto(url + "/displacement")
    wait_for_dash(page)
    for gid in ("displacement-sft-rl", "displacement-layers", "displacement-sparsity"):
        page.wait_for_selector(f"#{gid} .main-svg")
    assert "SFT vs RL" in _title(page, "displacement-sft-rl")
    # no stage of the fixture has both phases: the pooled ratio (docs/task-vectors.md) is undefined, and says so
    assert "no stage has both an SFT and a non-zero RL update" in page.text_content("#displacement-sft-rl")
    assert "layer.1" in page.text_content("#displacement-layers")
    assert "1e-08" in page.text_content("#displacement-sparsity")
    assert console_errors == []


def test_pages_without_results(fixture_run, serve, page, console_errors):
    url = serve(fixture_run)
    page.goto(url + "/vectors")
    wait_for_dash(page)
    assert "aclarena-diag vectors" in page.inner_text("#vectors-empty")
    page.goto(url + "/displacement")
    wait_for_dash(page)
    assert "aclarena-diag displacement" in page.inner_text("#displacement-empty")
    assert console_errors == []


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    from vectors_helpers import make_long_chain_run

    return make_long_chain_run(tmp_path_factory.mktemp("long-pages") / "run", 40)


def _yticks(page, graph_id):
    return page.eval_on_selector_all(f"#{graph_id} .yaxislayer-above .ytick text", "els => els.map(e => e.textContent)")


def test_pages_at_40_checkpoints(long_run, serve, page, console_errors):
    """48 vectors: every row labelled and at least 14 px high, the zero update shown as such; the
    filter adds the cumulative updates; Displacement pairs SFT and RL and filters by phase."""
    url = serve(long_run)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(url + "/vectors")
    wait_for_dash(page)
    page.wait_for_selector("#vectors-heatmap .main-svg")
    ticks = _yticks(page, "vectors-heatmap")
    assert len(ticks) == 48 and "s07-if-rl - s06-if-sft [zero]" in ticks
    height = page.locator("#vectors-heatmap .nsewdrag").first.bounding_box()["height"]
    assert height >= 14 * 48
    page.get_by_label("cumulative").check()
    page.wait_for_function("() => document.querySelectorAll('#vectors-heatmap .yaxislayer-above .ytick').length > 48",
                           timeout=30_000)
    wait_for_dash(page)
    assert any(t.endswith("- base") and t.startswith("s39") for t in _yticks(page, "vectors-heatmap"))
    assert page.locator("#vectors-heatmap .nsewdrag").first.bounding_box()["height"] > height
    # the filter is in the URL: a reload keeps it
    page.wait_for_function("() => window.location.search.includes('cumulative')")
    page.reload()
    wait_for_dash(page)
    page.wait_for_selector("#vectors-heatmap .main-svg")
    assert page.is_checked("input[value=cumulative]") and len(_yticks(page, "vectors-heatmap")) > 48

    page.goto(url + "/displacement")
    wait_for_dash(page)
    page.wait_for_selector("#displacement-sft-rl .main-svg")
    legend = page.text_content("#displacement-sft-rl .legend")
    assert "SFT" in legend and "RL" in legend
    xt = page.eval_on_selector_all("#displacement-sft-rl .xtick text", "els => els.map(e => e.textContent)")
    assert "math #2" in xt and "oracle math" in xt and len(xt) == 24
    assert page.locator("#displacement-sft-rl .barlayer .trace").count() == 2
    page.get_by_label("SFT", exact=True).uncheck()
    page.wait_for_function("() => document.querySelectorAll('#displacement-sft-rl .barlayer .trace').length == 1",
                           timeout=30_000)
    wait_for_dash(page)
    legend = page.locator("#displacement-sft-rl .legend")
    assert legend.count() == 0 or "SFT" not in legend.text_content()
    assert console_errors == []


def _legend_layout(svg: str) -> dict:
    """From an exported SVG: the image height, the legend's top, its visible (background) height and
    the offsets of its entries (an entry below the visible height is cut off)."""
    import re

    height = float(re.search(r'<svg[^>]*height="([\d.]+)"', svg).group(1))
    start = svg.index('<g class="legend"')
    top = float(re.search(r'translate\(([\d.]+), ?([\d.]+)\)', svg[start:start + 300]).group(2))
    legend = svg[start:]
    bg = float(re.search(r'<rect class="bg"[^>]*height="([\d.]+)"', legend).group(1))
    entries = [float(y) for y in re.findall(r'<g class="traces" transform="translate\([\d.]+, ?([\d.]+)\)"', legend)]
    return {"height": height, "top": top, "bg": bg, "entries": entries}


def test_export_keeps_a_long_legend_inside_the_image(long_run, tmp_path):
    """The displacement figures of a 40-stage run draw 48 updates (96 sparsity curves), one highlighted:
    their legends name the highlighted update and the faded others per phase (3 and 4 entries, not 48
    and 96), inside the image."""
    from aclarena.cli import main

    out = tmp_path / "figs"
    code = main(["export", "--run", str(long_run), "--figures", "displacement/layers,displacement/sparsity",
                 "--format", "svg", "--out", str(out)])
    assert code == 0
    for name, n in (("displacement-layers", 3), ("displacement-sparsity", 4)):
        lay = _legend_layout((out / f"{name}.svg").read_text())
        assert len(lay["entries"]) == n, name
        assert max(lay["entries"]) + 10 <= lay["bg"], (name, lay["bg"], max(lay["entries"]))  # last entry visible
        assert lay["top"] + lay["bg"] <= lay["height"], name  # the legend inside the image
