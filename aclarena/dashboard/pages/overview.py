"""Overview: the capability matrix, each suite's score along the chain, and the CL metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, manifest, reader

PAGE = {"path": "/overview", "name": "Overview", "order": 1}


def _chain_options(run_dir: Path) -> list[dict[str, str]]:
    from aclarena.errors import AclarenaError
    from aclarena.store.capability import stage_chains

    try:
        chains = [c for c in stage_chains(manifest(run_dir)) if len(c) > 1]
    except AclarenaError:
        return []
    return [{"label": " -> ".join(s.name for s in c), "value": c[-1].name} for c in chains]


def overview_content(run_dir: Path, what: str = "mean", chain: str | None = None) -> dict[str, Any]:
    """Figures, metric rows and notes of the page (callbacks return these; tests call it directly)."""
    from aclarena.errors import AclarenaError
    from aclarena.figures.overview import capability_heatmap, chain_lines, metric_rows
    from aclarena.store.capability import load_matrix

    m = manifest(run_dir)
    with reader(run_dir) as r:
        matrix = load_matrix(r, m)
        if not matrix.cells:
            return {"empty": True}
        out: dict[str, Any] = {"empty": False, "matrix": capability_heatmap(matrix, m, what)}
        try:
            out["chain"] = chain_lines(matrix, m, chain, what)
            out["rows"], out["notes"] = metric_rows(matrix, m, r, chain, what)
        except AclarenaError as e:
            out["chain"], out["rows"], out["notes"] = None, [], [str(e)]
    return out


def _metrics_table(rows: list[dict[str, Any]]) -> html.Table:
    return html.Table(
        [html.Tr([html.Th("metric"), html.Th("value")])]
        + [html.Tr([html.Td(r["metric"]), html.Td("-" if r["value"] is None else f"{r['value']:.3f}")],
                   id=f"overview-metric-{r['key']}") for r in rows],
        className="simple",
    )


def layout(**_query: Any) -> html.Div:
    run_dir = current_run()
    options = _chain_options(run_dir)
    first = overview_content(run_dir, "mean", options[0]["value"] if options else None)
    if first["empty"]:
        return html.Div([
            html.H2("Overview"),
            html.P("No capability matrix yet: run `aclarena-diag eval` (or import lm-eval results with "
                   "`aclarena-diag eval --import-lm-eval NAME=FILE`).", className="note", id="overview-empty"),
        ])
    return html.Div([
        html.H2("Overview"),
        html.Div([
            html.Div([html.Label("score"), dcc.RadioItems(
                id="overview-score", value="mean", inline=True,
                options=[{"label": " greedy ", "value": "mean"}, {"label": " avg@k ", "value": "avg_k_mean"}])]),
            html.Div([html.Label("chain"), dcc.Dropdown(
                id="overview-chain", options=options, value=options[0]["value"] if options else None,
                clearable=False)]),
        ], className="controls"),
        dcc.Graph(id="overview-matrix", figure=first["matrix"]),
        dcc.Graph(id="overview-chain-scores", figure=first["chain"] or {}),
        html.H3("Continual-learning metrics"),
        html.Div(_metrics_table(first["rows"]), id="overview-metrics"),
        html.Ul([html.Li(n) for n in first["notes"]], id="overview-notes", className="note"),
        html.P("Formulas and sources: docs/cl-metrics.md.", className="note"),
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    @app.callback(
        Output("overview-matrix", "figure"),
        Output("overview-chain-scores", "figure"),
        Output("overview-metrics", "children"),
        Output("overview-notes", "children"),
        Input("overview-score", "value"),
        Input("overview-chain", "value"),
        prevent_initial_call=True,
    )
    def _update(what: str, chain: str | None) -> tuple[Any, Any, Any, Any]:
        out = overview_content(run_dir, what or "mean", chain)
        if out["empty"]:
            return {}, {}, html.P("No capability matrix yet.", className="note"), []
        return (out["matrix"], out["chain"] or {}, _metrics_table(out["rows"]),
                [html.Li(n) for n in out["notes"]])
