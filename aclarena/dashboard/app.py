"""``create_app(run_dir)``: the Dash app with one page per module of :data:`PAGES`."""

from __future__ import annotations

import errno
import functools
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import dash
from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import ITEMS_KEY, PROMPT_KEY, RUN_KEY, ItemDescriber, PromptScorer
from aclarena.errors import AclarenaError
from aclarena.store.manifest import load_manifest

# Page modules under aclarena/dashboard/pages/, each with PAGE, layout and register_callbacks.
PAGES = ("home", "overview", "tokens", "flips", "vectors", "displacement", "monitor", "consolidation", "router", "orders")

ASSETS = Path(__file__).parent / "assets"
ERROR_ID = "store-error"


def create_app(run_dir: str | os.PathLike[str], *, score_prompt: PromptScorer | None = None,
               describe_items: ItemDescriber | None = None) -> Dash:
    """Build the dashboard for a run folder (its manifest is checked first). ``score_prompt``
    (:func:`aclarena.analysis.prompt.score_prompt`, which ``aclarena-diag dashboard`` passes) turns on the
    Tokens page's live scoring of a typed prompt; without it the page says how to start it.
    ``describe_items`` (:func:`aclarena.analysis.items.describe_items`, passed the same way) gives the
    Overview's cell detail each item's prompt and expected answer; without it the detail shows the replies."""
    run_dir = Path(run_dir).resolve()
    load_manifest(run_dir)  # one-line error now rather than a broken page later
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder="",
        assets_folder=str(ASSETS),
        title="aclarena",
        suppress_callback_exceptions=True,
        update_title=None,  # type: ignore[arg-type]  # dash documents None (keep the title) but annotates str
        on_error=_show_error,
    )
    app.server.config[RUN_KEY] = str(run_dir)
    app.server.config[PROMPT_KEY] = score_prompt
    app.server.config[ITEMS_KEY] = describe_items
    app.server.before_request(_refuse_traversal)
    modules = [importlib.import_module(f"aclarena.dashboard.pages.{name}") for name in PAGES]
    for module in modules:
        dash.register_page(module.__name__, layout=_safe_layout(module.layout, str(module.PAGE["name"])),
                           **module.PAGE)
    for module in modules:
        module.register_callbacks(app, run_dir)
    ordered = sorted(modules, key=lambda m: m.PAGE.get("order", 99))
    _grey_empty_pages(app, run_dir, ordered)
    app.layout = html.Div(
        [
            html.Header(
                [
                    html.Span("aclarena", className="brand"),
                    html.Nav([dcc.Link(m.PAGE["name"], href=m.PAGE["path"], id=_nav_id(m.PAGE)) for m in ordered]),
                    html.Span(run_dir.name, className="run-name", title=str(run_dir)),
                ],
                className="topbar",
            ),
            html.Main([html.Div(id=ERROR_ID, className="store-error", role="alert", hidden=True),
                       dash.page_container]),
        ]
    )
    return app


def error_panel(message: str, page: str) -> html.Div:
    """What a page shows instead of its content when the run cannot be read (a damaged results.h5)."""
    return html.Div([html.H2(page), html.P(message, className="store-error", role="alert", id=f"{ERROR_ID}-page")])


def _safe_layout(layout: Callable[..., Any], page: str) -> Callable[..., Any]:
    """A page's layout that shows a store or manifest error as its one line inside the page (was HTTP 500 and a
    traceback per request)."""

    @functools.wraps(layout)
    def safe(**query: Any) -> Any:
        try:
            return layout(**query)
        except AclarenaError as e:
            return error_panel(str(e), page)

    return safe


def _show_error(err: Exception) -> None:
    """Every callback's error handler (Dash ``on_error``): an :class:`AclarenaError` (a damaged store, say) is
    shown as its one line above the page and the callback's outputs stay as they were; anything else is a bug
    and is raised."""
    if not isinstance(err, AclarenaError):
        raise err
    dash.set_props(ERROR_ID, {"children": str(err), "hidden": False})


def _nav_id(page: dict[str, object]) -> str:
    return f"nav-{str(page['name']).lower()}"


def _grey_empty_pages(app: Dash, run_dir: Path, modules: list[ModuleType]) -> None:
    """On every navigation, grey the links of pages without data (pages Home knows nothing about stay)."""
    from aclarena.dashboard.pages.home import page_status

    pages = [m.PAGE for m in modules]

    @app.callback([Output(_nav_id(p), "className") for p in pages] + [Output(ERROR_ID, "hidden")],
                  Input("_pages_location", "pathname"))
    def _nav(_path: str | None) -> list[Any]:
        try:
            status = page_status(run_dir)
        except AclarenaError:  # the page itself says what is wrong; every link stays usable
            status = {}
        # a new page starts without the previous page's error line
        return ["" if status.get(str(p["path"]), {}).get("has_data", True) else "no-data" for p in pages] + [True]


def _refuse_traversal() -> tuple[str, int] | None:
    """404 for any request path with a '..' segment, encoded or not (nothing outside the app is served)."""
    from urllib.parse import unquote

    from flask import request

    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or request.path
    for candidate in (raw, unquote(raw), unquote(unquote(raw)), request.path):
        if ".." in candidate.replace("\\", "/").split("/"):
            return "not found", 404
    return None


def check_address(host: str, port: int) -> None:
    """Refuse a port out of range, a host that does not resolve to a local interface, or a port in use,
    in one line, before Werkzeug would (with a traceback, or its own text and exit 1)."""
    import socket

    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise AclarenaError(f"--port {port!r} is not a port; use a number from 1 to 65535 (e.g. 8050)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError) as e:
        raise AclarenaError(f"--host {host!r} is not an address of this machine ({getattr(e, 'strerror', None) or e}); "
                            "use 127.0.0.1 (default), localhost or 0.0.0.0") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Werkzeug binds
        try:
            sock.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise AclarenaError(f"port {port} on {host} is in use by another program; stop it or pass another "
                                    "--port (e.g. --port 8060)") from None
            raise AclarenaError(f"cannot serve on {host}:{port} ({e.strerror or e}); choose another --host or "
                                "--port") from None


def serve(run_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 8050, debug: bool = False,
          score_prompt: PromptScorer | None = None, describe_items: ItemDescriber | None = None) -> None:
    check_address(host, port)
    app = create_app(run_dir, score_prompt=score_prompt, describe_items=describe_items)
    try:
        app.run(host=host, port=port, debug=debug)
    except (OSError, OverflowError) as e:
        raise AclarenaError(f"cannot serve on {host}:{port} ({getattr(e, 'strerror', None) or e}); choose another "
                            "--port") from None
    except SystemExit as e:  # Werkzeug prints its own text and exits when the port was taken meanwhile
        if e.code not in (0, None):
            raise AclarenaError(f"cannot serve on {host}:{port} (taken by another program just now); pass another "
                                "--port") from None
        raise
