"""The dashboard on a truncated results.h5 (issue 33): every page shows the store's one line inside the
page, no request answers HTTP 500, and the navigation stays usable (was: HTTP 500 on every page)."""

import pytest
from browser_helpers import wait_for_dash
from reliability_helpers import seed_store, truncated_store

pytestmark = pytest.mark.browser

LINE = "results.h5 is truncated or corrupted and cannot be opened"


def test_every_page_shows_the_store_error(fixture_run, serve, page):
    from aclarena.dashboard.app import PAGES

    seed_store(fixture_run)
    truncated_store(fixture_run)
    url = serve(fixture_run)
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 500 else None)
    page.goto(url + "/")
    wait_for_dash(page)
    for name in PAGES:
        page.click(f"#nav-{'run' if name == 'home' else name}")
        page.wait_for_selector(".store-error:visible", timeout=20_000)
        wait_for_dash(page)
        shown = " ".join(page.locator(".store-error:visible").all_inner_texts())
        assert LINE in shown, (name, shown)
    assert failed == []
