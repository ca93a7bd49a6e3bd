"""The dashboard on a truncated results.h5: every page's layout, the navigation and a page callback show the
store's one line inside the page.

The test failed on the code before its fix (issue 33, checked against main at 2f42103 / a7087bc)."""

from __future__ import annotations

import json

from reliability_helpers import seed_store, truncated_store


def _post(client, output: str, inputs: list[dict], changed: str) -> dict:
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in output.strip(".").split("...")]
    r = client.post("/_dash-update-component", json={"output": output, "outputs": outputs if len(outputs) > 1 else
                                                     outputs[0], "inputs": inputs, "changedPropIds": [changed],
                                                     "state": []})
    assert r.status_code == 200, (output, r.status_code, r.get_data(as_text=True)[:300])
    return json.loads(r.get_data(as_text=True))


ERROR_ID = "store-error"  # the page's error line (aclarena.dashboard.app.ERROR_ID), spelled out so that the test
# fails on the old code by its HTTP 500, not by an import


def test_every_dashboard_page_shows_the_store_error(fixture_run):
    """Each page's layout, the navigation and a page callback answer with the store's one line in the page
    (before: HTTP 500 and a traceback per request). Callbacks are called through Dash's own endpoint."""
    import dash

    from aclarena.dashboard import create_app
    from aclarena.dashboard.app import PAGES

    seed_store(fixture_run)
    truncated_store(fixture_run)
    app = create_app(fixture_run)
    client = app.server.test_client()
    line = "results.h5 is truncated or corrupted and cannot be opened"
    pages = {p["module"].rsplit(".", 1)[-1]: p["path"] for p in dash.page_registry.values()}
    shown = {}
    for name in PAGES:
        out = _post(client, ".._pages_content.children..._pages_store.data..",
                    [{"id": "_pages_location", "property": "pathname", "value": pages[name]},
                     {"id": "_pages_location", "property": "search", "value": ""}], "_pages_location.pathname")
        shown[name] = line in json.dumps(out)
    assert shown == dict.fromkeys(PAGES, True), shown
    nav = next(cb for cb in app.callback_map if "nav-run.className" in cb)
    out = _post(client, nav, [{"id": "_pages_location", "property": "pathname", "value": "/"}],
                "_pages_location.pathname")
    assert out["response"][ERROR_ID]["hidden"] is True  # a new page starts without the last page's line
    # a page callback that reads the store: a click on a lineage node of Home
    out = _post(client, "home-lineage-links.children",
                [{"id": "home-lineage", "property": "clickData",
                  "value": {"points": [{"customdata": [0, 0, 0, "seq-math"]}]}}], "home-lineage.clickData")
    assert line in out["sideUpdate"][ERROR_ID]["children"] and out["sideUpdate"][ERROR_ID]["hidden"] is False, out
