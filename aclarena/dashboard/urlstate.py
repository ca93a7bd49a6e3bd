"""Page state in the URL: reload or share a view.

:func:`keep_in_url` registers a clientside callback that writes the page's control values
into the address bar's query string with ``history.replaceState`` (no request, no page
re-render); a page's ``layout(**query)`` reads them back with :func:`query_value` and
:func:`query_list`. Lists travel comma-joined, ``{"seq": s, "pos": p}`` pins as ``s:p``.
"""

from __future__ import annotations

import json
from typing import Any

from dash import Dash, Input, Output

_WRITE = """
function() {
    var names = %s;
    var q = new URLSearchParams();
    for (var i = 0; i < names.length; i++) {
        var v = arguments[i];
        if (Array.isArray(v)) { q.set(names[i], v.join(",")); continue; }
        if (v === null || v === undefined || v === "") { continue; }
        if (typeof v === "object") {
            if (v.seq === undefined || v.pos === undefined) { continue; }
            v = v.seq + ":" + v.pos;
        }
        q.set(names[i], String(v));
    }
    var search = q.toString();
    var url = window.location.pathname + (search ? "?" + search : "");
    if (url !== window.location.pathname + window.location.search) {
        window.history.replaceState(window.history.state, "", url);
    }
    return search;
}
"""


def keep_in_url(app: Dash, store_id: str, fields: dict[str, tuple[str, str]]) -> None:
    """Mirror ``fields`` (query name -> (component id, property)) into the URL; ``store_id`` is a
    ``dcc.Store`` of the page that receives the query string (the callback's output)."""
    app.clientside_callback(_WRITE % json.dumps(list(fields)), Output(store_id, "data"),
                            *[Input(cid, prop) for cid, prop in fields.values()])


def query_value(query: dict[str, Any], name: str, choices: list[Any] | None = None, default: Any = None) -> Any:
    """``query[name]`` when present (and among ``choices`` when given), else ``default``."""
    v = query.get(name)
    if v is None or v == "" or (choices is not None and v not in choices):
        return default
    return v


def query_list(query: dict[str, Any], name: str, choices: list[str], default: list[str]) -> list[str]:
    """A comma-joined list from the query, unknown entries dropped; ``default`` when absent."""
    v = query.get(name)
    if v is None:
        return default
    return [x for x in str(v).split(",") if x in choices]


def query_int(query: dict[str, Any], name: str) -> int | None:
    try:
        return int(query[name])
    except (KeyError, TypeError, ValueError):
        return None


def query_pin(query: dict[str, Any], name: str = "pin") -> dict[str, int] | None:
    try:
        seq, pos = str(query[name]).split(":")
        return {"seq": int(seq), "pos": int(pos)}
    except (KeyError, ValueError):
        return None
