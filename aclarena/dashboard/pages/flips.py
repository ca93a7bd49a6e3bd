"""Flips: the items a later checkpoint forgot, where its path left the earlier one's, and the swap test.

Pick a stored ``aclarena-diag flips`` result and an item. The page shows E's and L's greedy
trajectories of the item token by token, aligned, with the divergence point marked (the
first position where L's top-1 differs from E's token); both next-token distributions
there; the swap test's recovery curve against its random control; and where divergences
fall in E's entropy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, State, dcc, html

from aclarena.dashboard.data import current_run, per_store, reader
from aclarena.results.flips import FlipsData, counts_line

PAGE = {"path": "/flips", "name": "Flips", "order": 11}

EMPTY: dict[str, Any] = {"data": [], "layout": {}}


def _results(run_dir: Path) -> list[dict[str, str]]:
    from aclarena.results.flips import list_flips

    with reader(run_dir) as r:
        return list_flips(r)


def layout(**query: Any) -> html.Div:
    from aclarena.dashboard.urlstate import query_int, query_value

    results = _results(current_run())
    if not results:
        return html.Div([
            html.H2("Flips"),
            html.P("No flips results in this run yet: run `aclarena-diag flips --from E --to L --suite S --run DIR`.",
                   className="note", id="flips-empty"),
        ])
    options = [{"label": f"{e['early']} → {e['late']} on {e['suite']}", "value": e["key"]} for e in results]
    key = query_value(query, "result", [o["value"] for o in options], options[0]["value"])
    initial = {"result": key, "item": query_int(query, "item")}
    return html.Div([
        html.H2("Flips: where a forgotten item's path parted, and whether swapping tokens brings it back"),
        html.P("E is the earlier checkpoint of a result, L the later one (the result's names: earlier → later); "
               "an item is forgotten when E answered it right and L wrong, gained the other way round.",
               className="note", id="flips-el"),
        dcc.Store(id="flips-query", data=initial), dcc.Store(id="flips-url"),
        html.Div([
            html.Div([html.Label("result"),
                      dcc.Dropdown(id="flips-result", options=options, value=key, clearable=False)],
                     style={"minWidth": "24em"}),
            html.Div([html.Label("item"), dcc.Dropdown(id="flips-item", clearable=False)], style={"minWidth": "34em"}),
        ], className="controls"),
        html.Div(id="flips-summary", className="note"),
        html.H3("The item, token by token"),
        html.Div(id="flips-aligned", className="token-text"),
        dcc.Graph(id="flips-distributions"),
        html.Div([
            dcc.Graph(id="flips-recovery", style={"flex": "1 1 30em"}),
            dcc.Graph(id="flips-divergence", style={"flex": "1 1 30em"}),
        ], style={"display": "flex", "flexWrap": "wrap", "gap": "1em"}),
    ])


@per_store()
def _data(run_dir: Path, key: str) -> FlipsData | None:
    from aclarena.results.flips import read_flips_data

    with reader(run_dir) as r:
        if r is None or not r.has(key):
            return None
        return read_flips_data(r, key)


# --- callback bodies (tests call these directly) ------------------------------------------------


@per_store()
def on_result(run_dir: Path, key: str | None) -> tuple[list[dict[str, Any]], int | None, list[Any], Any, Any]:
    """Item choices, the summary lines, the recovery curve and the divergence histogram of one result."""
    from aclarena.figures.flips import divergence_figure, recovery_figure

    data = _data(run_dir, key) if key else None
    if data is None:
        return [], None, [], EMPTY, EMPTY
    options = []
    for i, it in enumerate(data.items):
        where = f"diverges at {it['diverge']}/{it['n_positions']}" if it["diverge"] >= 0 else "never diverges"
        rep = "" if it["reproduced"] else " · not reproduced"
        options.append({"label": f"{it['direction']} · {it['item_id']} · {where}{rep}", "value": i})
    lines = [html.Div(f"{counts_line(data.counts(), '→')}; {data.relation}")]
    for d, c in data.summary["chance"].items():
        if c.get("n"):
            lines.append(html.Div(f"{d}: {c['hits']}/{c['n']} divergences in E's ({data.early}) top "
                                  f"{data.settings['top']:g} "
                                  f"entropy positions = {c['share']:.2f} [{c['share_low']:.2f}, {c['share_high']:.2f}]; "
                                  f"chance {c['chance']:.2f} [{c['chance_low']:.2f}, {c['chance_high']:.2f}], "
                                  f"p = {c['p_value']:.3g}"))
    from aclarena.diagnostics.flips import swap_notes  # here: torch loads only when a result is shown

    for name in ("forward", "reverse"):
        c = data.curve(name)
        if c is not None:
            lines += [html.Div(f"note: {n}") for n in swap_notes(name, c["budgets"], c["swaps_kl"], c["swaps_random"])]
    return options, (0 if options else None), lines, recovery_figure(data), divergence_figure(data)


def _span(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "Span", "namespace": "dash_html_components", "props": props}


def _row(label: str, pieces: list[str], mark: int, row_id: str) -> dict[str, Any]:
    spans = [_span({"children": f"{label}: ", "className": "tok unscored"})]
    for j, text in enumerate(pieces):
        if j == mark:
            spans.append(_span({"children": text, "className": "tok flip-point",
                                "title": f"divergence point (position {j})",
                                "style": {"outline": "2px solid #d62728", "backgroundColor": "rgba(214,39,40,0.25)"}}))
        else:
            spans.append(_span({"children": text, "className": "tok",
                                "style": {"color": "#999"} if mark >= 0 and j > mark else {}}))
    return {"type": "Div", "namespace": "dash_html_components", "props": {"children": spans, "id": row_id}}


@per_store()
def on_item(run_dir: Path, key: str | None, index: int | None) -> tuple[list[Any], Any]:
    """E's and L's trajectories of one item, aligned at the start, the divergence point marked,
    and both distributions there."""
    from aclarena.figures.flips import distributions_figure

    data = _data(run_dir, key) if key else None
    if data is None or index is None or not 0 <= int(index) < len(data.items):
        return [], EMPTY
    it = data.items[int(index)]
    traj = data.trajectories.get(it["item_id"], {})
    mark = int(it["diverge"])
    rows: list[Any] = [_row(f"earlier (E) {data.early}, reward {it['e_reward']:g}", traj.get("e", []), mark,
                            "flips-e-row"),
                       _row(f"later (L) {data.late}, reward {it['l_reward']:g}", traj.get("l", []), mark,
                            "flips-l-row")]
    if mark >= 0:
        rows.append(html.Div(f"at position {mark}: E's entropy {it['e_entropy']:.3f} nats (percentile "
                             f"{it['entropy_pct']:.0f}{', in the top set' if it['in_top'] else ''}), KL(E‖L) "
                             f"{it['kl']:.3g} nats; grey: after the divergence", className="note"))
    return rows, (distributions_figure(it, data.early, data.late) if mark >= 0 else EMPTY)


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    keep_in_url(app, "flips-url", {"result": ("flips-result", "value"), "item": ("flips-item", "value")})

    @app.callback(
        Output("flips-item", "options"), Output("flips-item", "value"), Output("flips-summary", "children"),
        Output("flips-recovery", "figure"), Output("flips-divergence", "figure"),
        Input("flips-result", "value"), State("flips-query", "data"),
    )
    def _result(key: str | None, initial: dict[str, Any] | None) -> tuple[Any, ...]:
        options, value, lines, recovery, divergence = on_result(run_dir, key)
        item = (initial or {}).get("item")
        if (initial or {}).get("result") == key and isinstance(item, int) and 0 <= item < len(options):
            value = item  # a shared or reloaded view
        return options, value, lines, recovery, divergence

    @app.callback(
        Output("flips-aligned", "children"), Output("flips-distributions", "figure"),
        Input("flips-result", "value"), Input("flips-item", "value"),
    )
    def _item(key: str | None, index: int | None) -> tuple[Any, ...]:
        return on_item(run_dir, key, index)
