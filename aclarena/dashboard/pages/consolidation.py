"""Consolidation: the study-shaped comparison of consolidation methods, and a bar, radar or heatmap view
(the heatmap is the export's ``consolidation/table``: colour = mean score, text = mean ± std)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, manifest, per_store, reader

PAGE = {"path": "/consolidation", "name": "Consolidation", "order": 60}
ROUTER_OPTIONS = [{"label": r, "value": r} for r in ("rule", "learned", "bandit")]


@per_store()
def content(run_dir: Path, score: str = "greedy", router: str = "rule", view: str = "bars") -> dict[str, Any]:
    """The comparison rows and the chosen figure (callbacks return these; tests call it directly)."""
    from aclarena.diagnostics.run_notes import avg_k_state, consolidation_note, floor_note
    from aclarena.figures.consolidation import (
        comparison_heatmap,
        method_bars,
        method_radar,
        repair_score_bars,
    )
    from aclarena.results.capability import load_matrix
    from aclarena.results.comparison import comparison, read_mle_routes, repair_scores

    m = manifest(run_dir)
    with reader(run_dir) as r:
        if r is None:
            return {"empty": True}
        matrix = load_matrix(r, m)
        if not matrix.cells:
            return {"empty": True}
        cmp = comparison(matrix, m, r, router=router, what="mean" if score == "greedy" else "avg_k_mean")
        repairs = repair_scores(r, matrix, m)
        has_mle = bool(read_mle_routes(r))
    ok = [c for c in matrix.cells.values() if c.ok]
    n_avg, _, avg_reason = avg_k_state([c.mean for c in ok], [c.avg_k_mean for c in ok])
    if not any(row.role in ("method", "mle") for row in cmp.rows):
        return {"empty": True, "no_methods": True}
    fig = method_radar(cmp) if view == "radar" else comparison_heatmap(cmp) if view == "heatmap" else method_bars(cmp)
    rows = [{"label": row.label, "role": row.role, "cells": [row.cells[s].text() for s in cmp.suites]}
            for row in cmp.rows]
    headers = [f"{s} (id)" if s in cmp.in_domain else s for s in cmp.suites]
    return {"empty": False, "headers": headers, "rows": rows, "figure": fig, "notes": cmp.notes,
            "run_note": consolidation_note(cmp.rows, cmp.in_domain), "has_mle": has_mle, "n_avg": n_avg,
            "avg_reason": avg_reason, "floor": floor_note([c.mean for c in ok]), "repairs": [_repair_row(x) for x in repairs],
            "repair_figure": repair_score_bars(repairs) if repairs else None}


def _repair_row(x: Any) -> dict[str, Any]:
    import math

    from aclarena.diagnostics.repair_score import PARTS
    from aclarena.diagnostics.run_notes import repair_part_reason

    cells, why = [], []
    for p in PARTS:
        part = x.score.part(p)
        cells.append("-" if math.isnan(part.value) else
                     f"{part.value:.2f} [{part.ci[0]:.2f}, {part.ci[1]:.2f}] ({', '.join(part.suites)})")
        reason = repair_part_reason(p, part.value, part.suites, part.dropped)
        if reason:
            why.append(reason)
    return {"label": x.checkpoint, "stage": f"{x.old} → {x.new}", "cells": cells, "why": why}


def _repair_section(c: dict[str, Any]) -> list[Any]:
    if not c.get("repairs"):
        return []
    head = ["repair", "stage", "healing", "preservation", "non-damage", "target retention"]
    table = html.Table([html.Tr([html.Th(h) for h in head])]
                       + [html.Tr([html.Td(r["label"]), html.Td(r["stage"]), *[html.Td(v) for v in r["cells"]]],
                                  id=f"consolidation-repair-row-{i}") for i, r in enumerate(c["repairs"])],
                       className="simple", id="consolidation-repair-table")
    return [html.H3("Repairs"),
            html.P("Each repair against the stage it repairs (from → to): healing is the share of the stage's loss "
                   "on the suites it damaged won back, preservation the share of its held-out gains kept, "
                   "non-damage the accuracy kept (relative to the stage's end) where the stage changed nothing "
                   "measurable, target retention the share of the stage's own gain kept; 95% bootstrap intervals "
                   "over items (Spectral Unforgetting, arXiv 2605.20296; definitions in docs/consolidation.md).",
                   className="note"),
            table,
            html.Ul([html.Li(f"{r['label']}: {w}") for r in c["repairs"] for w in r["why"]], className="note",
                    id="consolidation-repair-why"),
            dcc.Graph(id="consolidation-repair-figure", figure=c["repair_figure"])]


def _table(c: dict[str, Any]) -> html.Table:
    return html.Table(
        [html.Tr([html.Th("model"), *[html.Th(h) for h in c["headers"]]])]
        + [html.Tr([html.Td(r["label"]), *[html.Td(v) for v in r["cells"]]], className=f"role-{r['role']}",
                   id=f"consolidation-row-{i}") for i, r in enumerate(c["rows"])],
        className="simple", id="consolidation-table-inner",
    )


def layout(**query: Any) -> html.Div:
    from aclarena.dashboard.urlstate import query_value

    run_dir = current_run()
    view = query_value(query, "view", ["bars", "radar", "heatmap"], "bars")
    router = query_value(query, "router", [o["value"] for o in ROUTER_OPTIONS], "rule")
    score = query_value(query, "score", ["greedy", "avg"], "greedy")
    c = content(run_dir, score, router, view)
    if not c["empty"] and score == "avg" and c["n_avg"] == 0:  # the URL asks for what the run lacks
        score = "greedy"
        c = content(run_dir, score, router, view)
    if c["empty"]:
        why = ("No consolidated models yet: run `aclarena-diag consolidate --method ...`, then `aclarena-diag eval`."
               if c.get("no_methods") else "No capability matrix yet: run `aclarena-diag eval` (after "
               "`aclarena-diag consolidate`).")
        return html.Div([html.H2("Consolidation"), html.P(why, className="note", id="consolidation-empty")])
    return html.Div([
        html.H2("Consolidation"),
        html.P("Oracles and the sequential end point are reference rows; each method's cells are mean ± std over its "
               "replicates." + (" MLE answers each suite with the expert its router picks from the suite's execution "
                                "context (the backbone when no expert fits)." if c["has_mle"] else ""),
               className="note"),
        html.P(c["run_note"], className="note", id="consolidation-run-note"),
        html.Div([
            html.Div([html.Label("score"), dcc.RadioItems(
                id="consolidation-score", value=score, inline=True,
                options=[{"label": " greedy ", "value": "greedy"},
                         {"label": " avg@k ", "value": "avg", "disabled": c["n_avg"] == 0}])],
                title=c["avg_reason"] or ""),
            html.Div([html.Label("MLE router"), dcc.Dropdown(id="consolidation-router", options=ROUTER_OPTIONS,
                                                             value=router, clearable=False)],
                     style={} if c["has_mle"] else {"display": "none"}),
            html.Div([html.Label("view"), dcc.RadioItems(id="consolidation-view", value=view, inline=True,
                                                         options=[{"label": " bars ", "value": "bars"},
                                                                  {"label": " radar ", "value": "radar"},
                                                                  {"label": " heatmap ", "value": "heatmap"}])]),
        ], className="controls"),
        dcc.Store(id="consolidation-url"),
        html.P(" ".join(x for x in (
            c["floor"], c["avg_reason"],
            None if c["has_mle"] else "MLE router: hidden, this run has no MLE; `aclarena-diag consolidate --method "
                                      "mle --run DIR` makes one.") if x), className="note", id="consolidation-states"),
        html.Div(_table(c), id="consolidation-table"),
        dcc.Graph(id="consolidation-figure", figure=c["figure"]),
        html.Ul([html.Li(n) for n in c["notes"]], id="consolidation-notes", className="note"),
        *_repair_section(c),
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    keep_in_url(app, "consolidation-url", {"score": ("consolidation-score", "value"),
                                           "router": ("consolidation-router", "value"),
                                           "view": ("consolidation-view", "value")})

    @app.callback(
        Output("consolidation-table", "children"), Output("consolidation-figure", "figure"),
        Output("consolidation-notes", "children"), Output("consolidation-run-note", "children"),
        Input("consolidation-score", "value"), Input("consolidation-router", "value"),
        Input("consolidation-view", "value"), prevent_initial_call=True,
    )
    def _update(score: str, router: str, view: str) -> tuple[Any, Any, Any, Any]:
        c = content(run_dir, score, router, view)
        if c["empty"]:
            return html.P("nothing to show"), {}, [], ""
        return _table(c), c["figure"], [html.Li(n) for n in c["notes"]], c["run_note"]
