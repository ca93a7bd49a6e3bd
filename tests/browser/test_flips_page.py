"""The Flips page in headless Chromium (a hand-made stored result), its callbacks, and its figures in export."""

import pytest
from browser_helpers import wait_for_dash
from flips_helpers import hand_made_result, write_result

pytestmark = pytest.mark.browser


@pytest.fixture()
def flips_run(fixture_run):
    write_result(fixture_run, hand_made_result())
    return fixture_run


def choose(page, dropdown_id, option):
    page.click(f"#{dropdown_id}")
    page.get_by_role("option", name=option, exact=True).click()


def test_flips_page_shows_the_divergence_and_the_swap_test(flips_run, serve, page, console_errors):
    url = serve(flips_run)
    page.set_viewport_size({"width": 1400, "height": 1200})
    page.goto(url + "/flips")
    wait_for_dash(page)
    page.wait_for_selector("#flips-e-row span.flip-point")
    assert "seq-math → seq-search on math/id: 2 forgotten (1 → 0), 1 gained (0 → 1) of 10 items" in page.inner_text("#flips-summary")
    assert "forgot: 1/2 divergences" in page.inner_text("#flips-summary")
    # first item: diverges at position 3, where E wrote ' 42' and L ' 41'
    assert page.inner_text("#flips-e-row span.flip-point") == " 42"
    assert page.inner_text("#flips-l-row span.flip-point") == " 41"
    assert "percentile 100, in the top set" in page.inner_text("#flips-aligned")
    page.wait_for_selector("#flips-distributions .main-svg")
    assert "E (seq-math) chose ' 42'" in page.text_content("#flips-distributions .gtitle")
    assert page.locator("#flips-distributions .bars").count() == 2  # E's and L's top-k
    page.wait_for_selector("#flips-recovery .scatterlayer .trace")
    assert page.locator("#flips-recovery .scatterlayer .trace").count() == 4  # both directions, both arms
    assert "2 forgotten items reproduced" in page.text_content("#flips-recovery .gtitle")

    choose(page, "flips-item", "forgot · math/id/bbb · diverges at 1/5")
    page.wait_for_function("() => document.querySelector('#flips-e-row span.flip-point')?.innerText === 'Answer'")
    assert page.inner_text("#flips-l-row span.flip-point") == "So"
    assert "no-data" not in (page.get_attribute("#nav-flips", "class") or "")
    assert console_errors == []


def test_flips_page_without_results(fixture_run, serve, page):
    page.goto(serve(fixture_run) + "/flips")
    wait_for_dash(page)
    assert "aclarena-diag flips" in page.inner_text("#flips-empty")
    page.wait_for_function("() => document.querySelector('#nav-flips').classList.contains('no-data')")


def test_callbacks_directly(flips_run):
    from aclarena.dashboard.pages.flips import on_item, on_result

    options, value, lines, rec, div = on_result(flips_run, "flips/seq-math/seq-search/math-id")
    assert [o["label"] for o in options][2] == "gained · math/id/ccc · diverges at 0/4"
    assert value == 0 and len(rec.data) == 4 and len(div.data) == 2
    rows, fig = on_item(flips_run, "flips/seq-math/seq-search/math-id", 2)
    assert [s["props"]["children"] for s in rows[1]["props"]["children"]][1] == "Answer"  # L's row, marked at 0
    assert on_result(flips_run, "flips/nope") == ([], None, [], {"data": [], "layout": {}}, {"data": [], "layout": {}})


def test_export_html_has_the_flips_figures(flips_run, tmp_path, cli):
    code, _, err = cli("export", "--run", str(flips_run), "--format", "html", "--out", str(tmp_path / "figs"),
                       "--figures", "flips/*")
    assert code == 0, err
    html = next((tmp_path / "figs").glob("*.html")).read_text()
    assert "fig-flips-recovery-seq-math-seq-search-math-id" in html
    assert "fig-flips-divergence-seq-math-seq-search-math-id" in html


def test_every_flips_title_fits_its_panel(flips_run, serve, page, console_errors):
    """The swap test's and the divergence histogram's titles ran past their half-width panels (the pair and the
    count on one line); each title now ends inside its figure."""
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.goto(serve(flips_run) + "/flips")
    page.wait_for_selector("#flips-recovery .main-svg")
    wait_for_dash(page)
    overflow = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(gd => {
        const svg = gd.querySelector('.main-svg'), title = gd.querySelector('.gtitle');
        if (!svg || !title) { return []; }
        const over = title.getBoundingClientRect().right - svg.getBoundingClientRect().right;
        return over > 1 ? [[gd.parentElement.id, title.textContent, Math.round(over)]] : [];
    })""")
    assert overflow == []
    assert console_errors == []
