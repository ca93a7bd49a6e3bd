"""Orders: the order study (``study --orders``): the pairwise matrix, the orders ranked, the findings in words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, reader

PAGE = {"path": "/orders", "name": "Orders", "order": 65}
MATRIX_OPTIONS = [{"label": " interference ", "value": "interference"}, {"label": " transfer ", "value": "transfer"}]
RANK_OPTIONS = [{"label": " BWT ", "value": "bwt"}, {"label": " final average accuracy ", "value": "final_avg"}]


def study(run_dir: Path) -> dict[str, Any] | None:
    """The run's order study as ``orders.json`` holds it (None without one)."""
    from aclarena.results.orders import read_orders

    with reader(run_dir) as r:
        found = read_orders(r)
    return None if found is None else found.to_json()


def figures(run_dir: Path, what: str = "interference", by: str = "bwt") -> tuple[Any, Any]:
    """The matrix heatmap and the ranking of the run's order study (empty figures without one)."""
    data = study(run_dir)
    return ({}, {}) if data is None else _figures(data, what, by)


def _figures(data: dict[str, Any], what: str, by: str) -> tuple[Any, Any]:
    from aclarena.figures.orders import matrix_figure, ranking_figure

    return matrix_figure(data, what), ranking_figure(data, by)


def layout(**query: Any) -> html.Div:
    from aclarena.dashboard.urlstate import query_value
    from aclarena.diagnostics.orders import summary_lines

    run_dir = current_run()
    data = study(run_dir)
    if data is None:
        return html.Div([html.H2("Orders"),
                         html.P("No order study yet: run `aclarena-diag study --orders pairs --run DIR` "
                                "(`--dry-run` first shows the stages it trains).", className="note", id="orders-empty")])
    what = query_value(query, "matrix", ["interference", "transfer"], "interference")
    by = query_value(query, "rank", ["bwt", "final_avg"], "bwt")
    matrix, ranking = _figures(data, what, by)  # the study read once per page load
    return html.Div([
        html.H2("Orders"),
        html.P(f"Design {data['design']!r}: {len(data['orders'])} orders of {', '.join(data['domains'])}, seeds "
               f"{', '.join(map(str, data['seeds']))}; intervals are 95% Student-t intervals over seeds. "
               "Interference of a -> b: a's in-domain accuracy after a minus after a then b.", className="note"),
        html.Ul([html.Li(line) for line in summary_lines(data)], id="orders-findings"),
        html.Div([html.Div([html.Label("matrix"), dcc.RadioItems(id="orders-matrix-kind", options=MATRIX_OPTIONS,
                                                                 value=what, inline=True)]),
                  html.Div([html.Label("rank by"), dcc.RadioItems(id="orders-rank-by", options=RANK_OPTIONS,
                                                                  value=by, inline=True)])],
                 className="controls"),
        dcc.Store(id="orders-url"),
        dcc.Graph(id="orders-matrix", figure=matrix),
        dcc.Graph(id="orders-ranking", figure=ranking),
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    keep_in_url(app, "orders-url", {"matrix": ("orders-matrix-kind", "value"), "rank": ("orders-rank-by", "value")})

    @app.callback(Output("orders-matrix", "figure"), Output("orders-ranking", "figure"),
                  Input("orders-matrix-kind", "value"), Input("orders-rank-by", "value"), prevent_initial_call=True)
    def _view(what: str, by: str) -> tuple[Any, Any]:
        return figures(run_dir, what, by)
