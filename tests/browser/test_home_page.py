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
    assert "examples/x (example" in page.inner_text("#home-results")
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
