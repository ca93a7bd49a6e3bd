import pytest
from browser_helpers import wait_for_dash

from aclarena.store import ResultsStore

pytestmark = pytest.mark.browser


def test_home_page_loads(fixture_run, serve, page, console_errors):
    import numpy as np

    ResultsStore(fixture_run).write("examples/x", {"v": np.arange(3)}, result_type="example")
    url = serve(fixture_run)
    page.goto(url + "/")
    wait_for_dash(page)
    page.wait_for_selector("#home-checkpoints")
    text = page.inner_text("#home-checkpoints")
    for name in ("base", "seq-math", "seq-search", "oracle-math", "lora-ecom"):
        assert name in text
    assert "examples\texample\t1\texamples/x" in page.inner_text("#home-results")  # a group row, not the keys
    assert "examples/x (example" in page.text_content("#home-results-keys")  # every key, folded
    page.wait_for_selector("#home-lineage .main-svg")
    assert console_errors == []


def test_dashboard_serves_no_run_files(fixture_run, serve, page):
    """Path traversal and direct file requests do not reach the run folder."""
    import urllib.error
    import urllib.request

    url = serve(fixture_run)
    for path in ("/aclarena.toml", "/assets/../aclarena.toml", "/assets/..%2faclarena.toml",
                 "/assets/..%2F..%2Faclarena.toml", "/_dash-component-suites/../../aclarena.toml",
                 "/checkpoints/base/config.json", "/results.h5"):
        try:
            with urllib.request.urlopen(url + path, timeout=10) as r:
                body = r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            assert e.code in (400, 403, 404), (path, e.code)
            continue
        # Dash answers unknown paths with its app shell (client-side routing); never with the file
        assert "[run]" not in body and "checkpoints.base" not in body, path


def test_home_status_nav_and_downloads(fixture_run, serve, page, console_errors, tmp_path):
    """Home says which analyses exist (with links) and how to make the others; the navigation greys
    pages without data; every figure and table can be saved as data (CSV/JSON, CSV/LaTeX)."""
    import csv
    import json

    from capability_helpers import write_fixture_matrix

    write_fixture_matrix(fixture_run)
    url = serve(fixture_run)
    page.goto(url + "/")
    wait_for_dash(page)
    page.wait_for_selector("#home-status")
    rows = {r.split("\t")[0]: r for r in page.inner_text("#home-status").split("\n")[1:]}
    assert "aclarena-diag tokens --ref NAME" in rows["Tokens"] and "none" in rows["Tokens"]
    assert rows["Overview"].split("\t")[2] == "17"  # 16 scored cells and 1 error cell
    page.wait_for_function("() => document.querySelector('#nav-tokens').classList.contains('no-data')")
    assert "no-data" not in (page.get_attribute("#nav-overview", "class") or "")
    assert "no-data" in page.get_attribute("#nav-vectors", "class")
    page.click("#home-link-overview")
    wait_for_dash(page)
    page.wait_for_selector("#overview-matrix .main-svg")
    assert "/overview" in page.url

    # the matrix's data as CSV: one row per cell, as drawn
    page.wait_for_selector(".data-download[data-target=overview-matrix] button")
    with page.expect_download() as got:
        page.click(".data-download[data-target=overview-matrix] button[data-what=CSV]")
    path = tmp_path / "matrix.csv"
    got.value.save_as(path)
    cells = {(r["y"], r["x"]): r for r in csv.DictReader(path.open())}
    assert float(cells[("seq-math", "math/id")]["z"]) == 0.75 and cells[("lora-ecom (consolidated)", "math/ood")]["text"] == "error"
    with page.expect_download() as got:
        page.click(".data-download[data-target=overview-chain-scores] button[data-what=JSON]")
    got.value.save_as(tmp_path / "chain.json")
    chain = json.loads((tmp_path / "chain.json").read_text())
    math_line = next(t for t in chain["data"] if t["name"] == "math/id")
    assert math_line["y"] == [0.0, 0.75, 0.25]
    # the metrics table as LaTeX
    with page.expect_download() as got:
        page.click(".data-download[data-target=overview-metrics-table] button[data-what=LaTeX]")
    got.value.save_as(tmp_path / "metrics.tex")
    tex = (tmp_path / "metrics.tex").read_text()
    assert tex.startswith("\\begin{tabular}{ll}\n\\toprule\nmetric & value \\\\\n\\midrule")
    assert "Backward transfer (GEM BWT) & -0.500 \\\\" in tex and tex.rstrip().endswith("\\end{tabular}")
    tip = page.get_attribute("#overview-metric-backward_transfer td", "title")
    assert "Negative = forgetting" in tip
    assert console_errors == []


def test_lineage_nodes_link_to_the_pages_of_their_checkpoint(fixture_run, serve, page, console_errors):
    from capability_helpers import write_fixture_matrix

    write_fixture_matrix(fixture_run)
    url = serve(fixture_run)
    page.goto(url + "/")
    wait_for_dash(page)
    page.wait_for_selector("#home-lineage .main-svg")
    assert "Click a checkpoint" in page.inner_text("#home-lineage-links")
    page.locator("#home-lineage").scroll_into_view_if_needed()  # below the fold once the page lists more rows
    # the marker of seq-math: the point drawn at the same index as its label in its trace
    box = page.evaluate("""() => {
        for (const t of document.querySelectorAll('#home-lineage .scatterlayer .trace')) {
            const labels = [...t.querySelectorAll('.textpoint text')].map(e => e.textContent);
            const i = labels.indexOf('seq-math');
            if (i < 0) continue;
            const r = t.querySelectorAll('path.point')[i].getBoundingClientRect();
            return {x: r.left + r.width / 2, y: r.top + r.height / 2};
        }
        return null;
    }""")
    assert box is not None
    page.mouse.click(box["x"], box["y"])
    page.wait_for_function("() => document.querySelector('#home-lineage-links').textContent.includes('seq-math')",
                           timeout=20_000)
    links = page.eval_on_selector_all("#home-lineage-links a", "els => els.map(e => [e.textContent, e.pathname])")
    assert links == [["overview", "/overview"]]  # the fixture has a capability matrix only
    page.click("#home-lineage-link-0")
    wait_for_dash(page)
    page.wait_for_selector("#overview-matrix .main-svg")
    assert "/overview" in page.url
    assert console_errors == []
