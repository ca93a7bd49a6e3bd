"""Overview: the capability matrix, each suite's score along the chain, and the CL metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, State, dash_table, dcc, html

from aclarena.dashboard.data import current_run, item_describer, manifest, per_store, reader

PAGE = {"path": "/overview", "name": "Overview", "order": 1}


def _chain_options(run_dir: Path) -> list[dict[str, str]]:
    from aclarena.errors import AclarenaError
    from aclarena.results.capability import stage_chains

    try:
        chains = [c for c in stage_chains(manifest(run_dir)) if len(c) > 1]
    except AclarenaError:
        return []
    return [{"label": " -> ".join(s.name for s in c), "value": c[-1].name} for c in chains]


@per_store()
def suite_options(run_dir: Path, chain: str | None) -> tuple[list[dict[str, str]], list[str]]:
    """The ``DOMAIN=SUITE`` choices of the chain's domains that have several in-domain suites, and the
    default choice of each (``forgetting``'s: DOMAIN/id, else the first)."""
    from aclarena.errors import AclarenaError
    from aclarena.results.capability import load_matrix, pick_chain, suite_choices

    m = manifest(run_dir)
    try:
        domains = list(dict.fromkeys(s.domain for s in pick_chain(m, chain)[1:] if s.domain))
    except AclarenaError:
        return [], []
    with reader(run_dir) as r:
        matrix = load_matrix(r, m)
    options, default = [], []
    for d in domains:
        first, choices = suite_choices(matrix, d)
        if len(choices) > 1:
            options += [{"label": f"{d}: {c}", "value": f"{d}={c}"} for c in choices]
            default.append(f"{d}={first}")
    return options, default


def _suite_of(values: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or []:
        d, _, s = v.partition("=")
        out[d] = s  # two suites of one domain picked: the later one
    return out


@per_store()
def overview_content(run_dir: Path, what: str = "mean", chain: str | None = None,
                     suite_of: dict[str, str] | None = None) -> dict[str, Any]:
    """Figures, metric rows and notes of the page (callbacks return these; tests call it directly)."""
    from aclarena.diagnostics.run_notes import avg_k_state, floor_note
    from aclarena.errors import AclarenaError
    from aclarena.figures.overview import capability_heatmap, chain_lines, metric_rows, score_intervals
    from aclarena.results.capability import SeveralChainsError, load_matrix

    m = manifest(run_dir)
    with reader(run_dir) as r:
        matrix = load_matrix(r, m)
        if not matrix.cells:
            return {"empty": True}
        intervals = score_intervals(r, what)
        out: dict[str, Any] = {"empty": False, "matrix": capability_heatmap(matrix, m, what, intervals)}
        ok = [c for c in matrix.cells.values() if c.ok]
        out["n_avg"], _, out["avg_reason"] = avg_k_state([c.mean for c in ok], [c.avg_k_mean for c in ok])
        out["floor"] = floor_note([getattr(c, what) for c in ok], "greedy" if what == "mean" else "avg@k")
        try:
            out["chain"] = chain_lines(matrix, m, chain, what, intervals)
            out["rows"], out["notes"] = metric_rows(matrix, m, r, chain, what, suite_of=suite_of)
        except SeveralChainsError as e:  # the page does not guess either: it asks
            out["chain"], out["rows"], out["notes"] = None, [], [str(e.how("the chain menu above"))]
        except AclarenaError as e:
            out["chain"], out["rows"], out["notes"] = None, [], [str(e)]
    return out


def items_content(run_dir: Path, click: dict[str, Any] | None, what: str = "mean") -> dict[str, Any] | None:
    """The per-item outcomes of the clicked matrix cell (None when nothing was clicked)."""
    if not click or not click.get("points"):
        return None
    point = click["points"][0]
    cd = point.get("customdata")
    m = manifest(run_dir)
    if isinstance(cd, list) and len(cd) >= 2:
        checkpoint, suite = str(cd[0]), str(cd[1])
    elif isinstance(point.get("y"), str) and isinstance(point.get("x"), str):
        # a heatmap's click carries its axis labels: "name" or "name (group)"
        label = point["y"]
        checkpoint = label if label in m or not label.endswith(")") else label.rsplit(" (", 1)[0]
        suite = point["x"]
    else:
        return None
    return cell_items(run_dir, checkpoint, suite, what, item_describer())


@per_store()
def cell_items(run_dir: Path, checkpoint: str, suite: str, what: str = "mean",
               describe: Any = None) -> dict[str, Any] | None:
    """One matrix cell's per-item outcomes beside its parent's, each item with its prompt and expected
    answer (``describe``: the app's item describer, when it has one) and the checkpoint's reply."""
    from aclarena.figures.overview import cell_outcomes
    from aclarena.results.capability import load_matrix, read_replies
    from aclarena.results.tokens import list_checkpoints, list_probes

    m = manifest(run_dir)
    with reader(run_dir) as r:
        if r is None:
            return None
        matrix = load_matrix(r, m)
        out = cell_outcomes(r, matrix, m, checkpoint, suite, what)
        out["probes"] = [p for p in list_probes(r) if checkpoint in list_checkpoints(r, p)]
        cell = matrix.get(checkpoint, suite)
        replies = read_replies(r, cell.key) if cell is not None and cell.ok else {}
        settings = cell.settings if cell is not None and cell.ok else {}
    texts = describe(run_dir, suite, settings, [row["item"] for row in out["rows"]]) if describe and out["rows"] else {}
    out["described"] = describe is not None
    for row in out["rows"]:
        t = texts.get(row["item"], {})
        row["prompt"], row["expected"] = t.get("prompt", ""), t.get("expected", "")
        row["reply"] = replies.get(row["item"], "")
    return out


def _items_panel(c: dict[str, Any] | None) -> Any:
    if c is None:
        return html.P("Click a cell of the matrix to see its per-item outcomes.", className="note")
    head = f"{c['checkpoint']} on {c['suite']}"
    if c.get("score") is not None and c.get("interval"):
        lo, hi, n = c["interval"]
        head += f": {c['score']:.3f} (95% CI {lo:.3f}-{hi:.3f}, {n} items)"
    links = [dcc.Link(f"token drift of {c['checkpoint']} on probe {p}", id=f"overview-tokens-link-{i}",
                      href=f"/tokens?probe={p}&checkpoint={c['checkpoint']}") for i, p in enumerate(c["probes"])]
    cols = [{"id": "prompt", "name": "prompt"}, {"id": "reply", "name": f"reply of {c['checkpoint']}"},
            {"id": "expected", "name": "expected answer"}, {"id": "score", "name": "score", "type": "numeric"},
            {"id": "parent", "name": f"parent ({c['parent']})" if c["parent"] else "parent", "type": "numeric"},
            {"id": "change", "name": "change"}, {"id": "item", "name": "item id"}]
    missing = "" if c.get("described") else (" Prompts and expected answers come with `aclarena-diag dashboard` "
                                             "(this app was started without the arena's task generator).")
    return html.Div([
        html.H4(head, id="overview-items-title"),
        html.P(c["note"] + missing, className="note", id="overview-items-note"),
        html.Div(links, className="links"),
        # dash/dash_table/__init__.py is `# type: ignore`d, so mypy misses the DataTable it re-exports
        dash_table.DataTable(id="overview-items-table", columns=cols, data=c["rows"], sort_action="native",  # type: ignore[attr-defined]
                             filter_action="native", page_size=15, export_format="csv", export_headers="display",
                             style_cell={"fontFamily": "inherit", "fontSize": "0.85em", "textAlign": "left",
                                         "whiteSpace": "pre-wrap", "verticalAlign": "top", "maxWidth": "32em",
                                         "minWidth": "4em"},
                             style_table={"overflowX": "auto"},
                             style_data_conditional=[
                                 {"if": {"filter_query": '{change} = "lost"'}, "backgroundColor": "#fde0dd"},
                                 {"if": {"filter_query": '{change} = "gained"'}, "backgroundColor": "#e5f5e0"}])
        if c["rows"] else html.Span(),
    ])


def _metrics_table(rows: list[dict[str, Any]]) -> html.Table:
    from aclarena.figures.overview import METRIC_TIPS

    return html.Table(
        [html.Tr([html.Th("metric", title="Hover a metric for what it means and what a good value is."),
                  html.Th("value")])]
        + [html.Tr([html.Td(r["metric"], title=METRIC_TIPS.get(r["key"])),
                    html.Td("-" if r["value"] is None else f"{r['value']:.3f}")],
                   id=f"overview-metric-{r['key']}") for r in rows],
        className="simple", id="overview-metrics-table",
    )


def layout(**query: Any) -> html.Div:
    from aclarena.dashboard.findings import findings_panel
    from aclarena.dashboard.urlstate import query_list, query_value

    run_dir = current_run()
    findings = findings_panel(run_dir)  # aclarena-diag study's findings.json, when the run has one
    options = _chain_options(run_dir)
    score = query_value(query, "score", ["mean", "avg_k_mean"], "mean")
    # one chain: it; several: the one the URL names, else none (the page asks, as the CLI and the API refuse)
    chain = query_value(query, "chain", [o["value"] for o in options], options[0]["value"] if len(options) == 1 else None)
    suites, default = suite_options(run_dir, chain)
    picked = query_list(query, "suites", [o["value"] for o in suites], default)
    first = overview_content(run_dir, score, chain, _suite_of(picked))
    if not first["empty"] and score == "avg_k_mean" and first["n_avg"] == 0:  # the URL asks for what the run lacks
        score = "mean"
        first = overview_content(run_dir, score, chain, _suite_of(picked))
    if first["empty"]:
        return html.Div([
            html.H2("Overview"),
            html.P("No capability matrix yet: run `aclarena-diag eval` (or import lm-eval results with "
                   "`aclarena-diag eval --import-lm-eval NAME=FILE`).", className="note", id="overview-empty"),
            findings,
        ])
    return html.Div([
        html.H2("Overview"),
        html.Div([
            html.Div([html.Label("score"), dcc.RadioItems(
                id="overview-score", value=score, inline=True,
                options=[{"label": " greedy ", "value": "mean"},
                         {"label": " avg@k " if first["avg_reason"] is None else
                          f" avg@k ({first['n_avg']} cells) ", "value": "avg_k_mean",
                          "disabled": first["n_avg"] == 0}])], title=first["avg_reason"] or ""),
            html.Div([html.Label("chain"), dcc.Dropdown(
                id="overview-chain", options=options, value=chain, clearable=False,
                placeholder="several chains of stages: choose one")]),
            html.Div([html.Label("suite per domain"), dcc.Dropdown(
                id="overview-suites", options=suites, value=picked, multi=True,
                placeholder="one in-domain suite per domain")],
                title="the suite that measures each domain in the CL metrics (forgetting --suite-of); shown when a "
                      "domain has several in-domain suites", style={} if suites else {"display": "none"}),
        ], className="controls"),
        dcc.Store(id="overview-url"),
        html.P(first["avg_reason"] or "", className="note", id="overview-avg-note"),
        html.P(first["floor"] or "", className="note", id="overview-floor-note"),
        dcc.Graph(id="overview-matrix", figure=first["matrix"]),
        html.Div(_items_panel(None), id="overview-items", className="token-detail"),
        dcc.Graph(id="overview-chain-scores", figure=first["chain"] or {}),
        html.H3("Continual-learning metrics"),
        html.Div(_metrics_table(first["rows"]), id="overview-metrics"),
        html.Ul([html.Li(n) for n in first["notes"]], id="overview-notes", className="note"),
        html.P("Formulas and sources: docs/cl-metrics.md.", className="note"),
        findings,
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    keep_in_url(app, "overview-url", {"score": ("overview-score", "value"), "chain": ("overview-chain", "value"),
                                      "suites": ("overview-suites", "value")})

    @app.callback(
        Output("overview-suites", "options"),
        Output("overview-suites", "value"),
        Output("overview-suites", "style"),
        Input("overview-chain", "value"),
        State("overview-suites", "value"),
        prevent_initial_call=True,
    )
    def _suites(chain: str | None, picked: list[str] | None) -> tuple[Any, Any, Any]:
        suites, default = suite_options(run_dir, chain)
        values = [o["value"] for o in suites]
        keep = [v for v in picked or [] if v in values]
        domains = {v.partition("=")[0] for v in keep}
        value = keep + [v for v in default if v.partition("=")[0] not in domains]
        return suites, value, {} if suites else {"display": "none"}

    @app.callback(
        Output("overview-matrix", "figure"),
        Output("overview-chain-scores", "figure"),
        Output("overview-metrics", "children"),
        Output("overview-notes", "children"),
        Output("overview-floor-note", "children"),
        Input("overview-score", "value"),
        Input("overview-chain", "value"),
        Input("overview-suites", "value"),
        prevent_initial_call=True,
    )
    def _update(what: str, chain: str | None, picked: list[str] | None) -> tuple[Any, Any, Any, Any, Any]:
        out = overview_content(run_dir, what or "mean", chain, _suite_of(picked))
        if out["empty"]:
            return {}, {}, html.P("No capability matrix yet.", className="note"), [], ""
        return (out["matrix"], out["chain"] or {}, _metrics_table(out["rows"]),
                [html.Li(n) for n in out["notes"]], out["floor"] or "")

    @app.callback(
        Output("overview-items", "children"),
        Input("overview-matrix", "clickData"), State("overview-score", "value"), prevent_initial_call=True,
    )
    def _items(click: Any, what: str | None) -> Any:
        return _items_panel(items_content(run_dir, click, what or "mean"))
