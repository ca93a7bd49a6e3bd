import pytest
from browser_helpers import wait_for_dash
from capability_helpers import write_fixture_matrix

pytestmark = pytest.mark.browser


def test_overview_page(fixture_run, serve, page, console_errors):
    write_fixture_matrix(fixture_run)
    url = serve(fixture_run)
    page.goto(url + "/")
    wait_for_dash(page)
    page.click("#nav-overview")
    wait_for_dash(page)
    page.wait_for_selector("#overview-matrix .main-svg")
    matrix_text = page.inner_text("#overview-matrix")
    for label in ("seq-math", "seq-search", "oracle-math (oracle)", "lora-ecom (consolidated)", "math/id", "error"):
        assert label in matrix_text
    page.wait_for_selector("#overview-chain-scores .main-svg")
    assert "math/id" in page.inner_text("#overview-chain-scores")
    assert "-0.500" in page.inner_text("#overview-metric-backward_transfer")
    assert "Chaudhry" in page.inner_text("#overview-metrics")
    assert "0.375" in page.inner_text("#overview-metric-average_accuracy")
    assert "not scored" in matrix_text and "bootstrap interval" in page.inner_text("#overview-chain-scores")
    # a click on a matrix cell lists its items against the parent's: seq-search lost 2 math items
    page.locator("#overview-matrix").scroll_into_view_if_needed()
    box = page.locator("#overview-matrix .nsewdrag").first.bounding_box()
    rows, cols = 5, 4
    page.mouse.click(box["x"] + box["width"] * 0.5 / cols, box["y"] + box["height"] * 2.5 / rows)
    page.wait_for_selector("#overview-items-title")
    assert page.inner_text("#overview-items-title").startswith("seq-search on math/id: 0.250 (95% CI")
    assert page.inner_text("#overview-items-note") == "against its parent seq-math on the same items: 2 lost, 0 gained"
    # the table is drawn after the title (its own React render): wait for it, then count exactly
    page.wait_for_selector("#overview-items-table tbody tr:nth-child(3)")
    assert page.locator("#overview-items-table tbody tr").count() == 2 + 4  # header, filter row, 4 items
    # switch to the sampled scores: the metrics follow
    page.click("text=avg@k")
    page.wait_for_function(
        "() => document.querySelector('#overview-metric-average_accuracy').innerText.includes('0.188')")
    assert console_errors == []


def test_overview_page_without_matrix(fixture_run, serve, page, console_errors):
    url = serve(fixture_run)
    page.goto(url + "/overview")
    wait_for_dash(page)
    page.wait_for_selector("#overview-empty")
    assert "aclarena-diag eval" in page.inner_text("#overview-empty")
    assert console_errors == []
