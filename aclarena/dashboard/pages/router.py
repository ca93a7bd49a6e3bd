"""Router: how each MLE router does per context type, and its confusion matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, per_store, reader
from aclarena.results.routing import RoutingData

PAGE = {"path": "/router", "name": "Router", "order": 61}


@per_store()
def reports(run_dir: Path) -> dict[str, RoutingData]:
    from aclarena.results.routing import read_reports

    with reader(run_dir) as r:
        return read_reports(r)


@per_store()
def router_content(run_dir: Path, router: str | None = None) -> dict[str, Any]:
    """Accuracy figure, the chosen router's confusion matrix and table (tests call it directly)."""
    from aclarena.figures.consolidation import confusion_heatmap, router_accuracy

    reps = reports(run_dir)
    if not reps:
        return {"empty": True}
    name = router if router in reps else next(iter(reps))
    rep = reps[name]
    acc = rep.accuracy
    rows = [{"type": t, "n": n, "accuracy": a, "abstain": ab, "chance": c}
            for t, n, a, ab, c in zip(acc["type"], acc["n"], acc["accuracy"], acc["abstain_rate"], acc["chance"],
                                      strict=True)]
    return {"empty": False, "routers": list(reps), "router": name, "accuracy": router_accuracy(reps),
            "confusion": confusion_heatmap(name, rep), "rows": rows, "mixed": dict(rep.mixed)}


def _table(c: dict[str, Any]) -> html.Table:
    return html.Table(
        [html.Tr([html.Th(h) for h in ("context type", "contexts", "accuracy", "no expert", "chance")])]
        + [html.Tr([html.Td(r["type"]), html.Td(str(r["n"])), html.Td(f"{r['accuracy']:.2f}"),
                    html.Td(f"{r['abstain']:.2f}"), html.Td(f"{r['chance']:.2f}")], id=f"router-type-{r['type']}")
           for r in c["rows"]],
        className="simple",
    )


def _mixed(c: dict[str, Any]) -> str:
    m = c["mixed"]
    total = sum(m.values())
    if not total:
        return ""
    return (f"Contexts mixing two environments ({total}): routed to the first of the pair {m['first']}, to the second "
            f"{m['second']}, to no expert {m['none']}, elsewhere {m['other']}.")


def layout(**_query: Any) -> html.Div:
    c = router_content(current_run())
    if c["empty"]:
        return html.Div([html.H2("Router"), html.P("No routing results yet: run `aclarena-diag consolidate --method "
                                                   "mle` (or `--routers-only`).", className="note", id="router-empty")])
    return html.Div([
        html.H2("Router"),
        html.P("Each router reads only the execution context (system prompt and tool schemas). Accuracy counts the "
               "domain's expert as right, 'no expert' as right where no expert fits (foreign environments, empty "
               "contexts), and either expert for contexts mixing two environments. A context a router cannot place "
               "goes to no expert; the fallback policy then serves it with the frozen backbone.", className="note"),
        dcc.Graph(id="router-accuracy", figure=c["accuracy"]),
        html.Div([html.Label("router"), dcc.Dropdown(id="router-choice", value=c["router"], clearable=False,
                                                      options=[{"label": r, "value": r} for r in c["routers"]])],
                 className="controls"),
        html.Div(_table(c), id="router-table"),
        html.P(_mixed(c), id="router-mixed", className="note"),
        dcc.Graph(id="router-confusion", figure=c["confusion"]),
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    @app.callback(
        Output("router-confusion", "figure"), Output("router-table", "children"), Output("router-mixed", "children"),
        Input("router-choice", "value"), prevent_initial_call=True,
    )
    def _choose(router: str) -> tuple[Any, Any, Any]:
        c = router_content(run_dir, router)
        if c["empty"]:
            return {}, html.P("nothing to show"), ""
        return c["confusion"], _table(c), _mixed(c)
