"""Helpers for the headless-Chromium tests (imported as a top-level module)."""

from __future__ import annotations


def wait_for_dash(page, timeout: float = 20_000) -> None:
    """Wait until Dash has rendered the page and no callback is pending."""
    page.wait_for_selector("#react-entry-point", state="attached", timeout=timeout)
    page.wait_for_selector("main", timeout=timeout)
    page.wait_for_function(
        "() => !document.querySelector('[data-dash-is-loading=\"true\"]')", timeout=timeout
    )
