"""The Consolidation and Router pages in headless Chromium."""

import pytest
from browser_helpers import wait_for_dash
from consolidation_helpers import consolidated_run

pytestmark = pytest.mark.browser


@pytest.fixture()
def run(fixture_run):
    return consolidated_run(fixture_run)


def test_consolidation_page_table_and_views(run, serve, page, console_errors):
    url = serve(run)
    page.goto(url + "/consolidation")
    wait_for_dash(page)
    page.wait_for_selector("#consolidation-table table")
    table = page.inner_text("#consolidation-table")
    assert "oracle-math" in table and "merge-ties" in table and "0.750" in table
    assert "math/id (id)" in table
    page.wait_for_selector("#consolidation-figure .main-svg")
    assert "Scores per suite" in page.text_content("#consolidation-figure .gtitle")
    page.get_by_text("radar").click()
    page.wait_for_function(
        "() => document.querySelector('#consolidation-figure .gtitle').textContent.includes('In-domain profile')",
        timeout=20_000)
    page.wait_for_selector("#consolidation-figure .scatterlayer, #consolidation-figure .polarlayer")
    # the export's consolidation/table heatmap is a view of the page too: mean ± std in each cell
    page.get_by_text("heatmap").click()
    page.wait_for_function(
        "() => document.querySelector('#consolidation-figure .gtitle').textContent.includes('Consolidation methods')",
        timeout=20_000)
    page.wait_for_selector("#consolidation-figure .heatmaplayer")
    cells = page.evaluate("() => document.querySelector('#consolidation-figure .js-plotly-plot').data[0].text.flat()")
    assert "0.75" in " ".join(map(str, cells))
    assert page.locator("#nav-consolidation").count() == 1 and page.locator("#nav-router").count() == 1
    assert console_errors == []


def test_router_page_accuracy_and_confusion(run, serve, page, console_errors):
    url = serve(run)
    page.goto(url + "/router")
    wait_for_dash(page)
    page.wait_for_selector("#router-accuracy .main-svg")
    assert "Routing accuracy per context type" in page.text_content("#router-accuracy .gtitle")
    assert "held-out" in page.text_content("#router-accuracy")
    page.wait_for_selector("#router-confusion .main-svg")
    assert "rule router" in page.text_content("#router-confusion .gtitle")
    assert "foreign" in page.inner_text("#router-table")
    # choosing another router redraws its confusion matrix
    page.click("#router-choice")
    page.get_by_role("option", name="bandit").click()
    page.wait_for_function(
        "() => document.querySelector('#router-confusion .gtitle').textContent.includes('bandit router')",
        timeout=20_000)
    assert console_errors == []


def test_empty_states(fixture_run, serve, page, console_errors):
    url = serve(fixture_run)
    for path, el in (("/consolidation", "#consolidation-empty"), ("/router", "#router-empty")):
        page.goto(url + path)
        wait_for_dash(page)
        page.wait_for_selector(el)
    assert "aclarena-diag consolidate" in page.inner_text("#router-empty")
    assert console_errors == []
