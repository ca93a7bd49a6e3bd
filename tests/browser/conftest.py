"""Headless-Chromium fixtures: the dashboard served in a thread, a Playwright page on it.

Uses Debian's /usr/bin/chromium (never a browser downloaded by Playwright). `make test`
installs it when missing and run as root.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Debian chromium is missing: `apt-get install chromium` (make test does this as root)")
    return path


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": chromium_path(), "args": CHROMIUM_ARGS, "headless": True}


class ServedApp:
    def __init__(self, run_dir: Path) -> None:
        from werkzeug.serving import make_server

        from aclarena.analysis.items import describe_items
        from aclarena.analysis.prompt import score_prompt
        from aclarena.dashboard import create_app

        self.app = create_app(run_dir, score_prompt=score_prompt, describe_items=describe_items)
        self.server = make_server("127.0.0.1", 0, self.app.server, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=10)


@pytest.fixture()
def serve() -> Iterator:
    """``serve(run_dir)`` starts the dashboard of a run on 127.0.0.1 and returns its URL."""
    started: list[ServedApp] = []

    def start(run_dir: Path) -> str:
        s = ServedApp(run_dir)
        started.append(s)
        return s.url

    yield start
    for s in started:
        s.close()


@pytest.fixture()
def console_errors(page) -> list[str]:
    """Console errors and uncaught page errors seen by ``page`` (assert it stays empty)."""
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return errors
