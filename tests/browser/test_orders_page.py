"""The Orders page in headless Chromium: the pairwise heatmap with its hover, the ranking, the switches."""

import pytest
from browser_helpers import wait_for_dash
from orders_helpers import synthetic_study, write_study

pytestmark = pytest.mark.browser


def test_orders_page(fixture_run, serve, page, console_errors):
    write_study(fixture_run, synthetic_study("latin"))
    url = serve(fixture_run)
    page.goto(url + "/orders")
    wait_for_dash(page)
    page.wait_for_selector("#orders-matrix .main-svg")
    assert "Pairwise interference" in page.text_content("#orders-matrix .gtitle")
    assert "most harmful stage (positions 2, 3, each weighed the same): ecom" in page.inner_text("#orders-findings")
    # hovering a cell shows its value (the findings list above may push the graph below the fold)
    page.locator("#orders-matrix").scroll_into_view_if_needed()
    box = page.locator("#orders-matrix .nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.83, box["y"] + box["height"] * 0.17)  # math first, then ecom
    page.wait_for_selector("#orders-matrix .hoverlayer .hovertext")
    assert "math first, then ecom: +0.190" in page.text_content("#orders-matrix .hoverlayer")
    assert "ranked by BWT" in page.text_content("#orders-ranking .gtitle")
    page.locator("#orders-rank-by").get_by_text("final average accuracy").click()
    page.wait_for_function("() => document.querySelector('#orders-ranking .gtitle').textContent"
                           ".includes('final average accuracy')", timeout=20_000)
    page.locator("#orders-matrix-kind").get_by_text("transfer").click()
    page.wait_for_function("() => document.querySelector('#orders-matrix .gtitle').textContent"
                           ".includes('Pairwise transfer')", timeout=20_000)
    assert "rank=final_avg" in page.url and "matrix=transfer" in page.url
    assert console_errors == []


def test_orders_page_without_a_study(fixture_run, serve, page, console_errors):
    page.goto(serve(fixture_run) + "/orders")
    wait_for_dash(page)
    assert "study --orders pairs" in page.inner_text("#orders-empty")
    assert "no-data" in (page.get_attribute("#nav-orders", "class") or "")
    assert console_errors == []
