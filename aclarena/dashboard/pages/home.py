"""Home: the run's checkpoints, their lineage, and which results the store holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, dcc, html

from aclarena.dashboard.data import current_run, manifest, reader

PAGE = {"path": "/", "name": "Run", "order": 0}


def results_summary(run_dir: Path) -> list[dict[str, Any]]:
    """One row per result group in the store: key, type, time written."""
    with reader(run_dir) as r:
        if r is None:
            return []
        rows = []
        for key in r.results():
            a = r.attrs(key)
            rows.append({"key": key, "type": a.get("result-type"), "written": a.get("written")})
        return rows


def layout(**_query: Any) -> html.Div:
    from aclarena.figures.run import lineage_figure

    run_dir = current_run()
    m = manifest(run_dir)
    head = ["name", "kind", "domain", "phase", "parent", "on", "path"]
    table = html.Table(
        [html.Tr([html.Th(h) for h in head])]
        + [html.Tr([html.Td(str(getattr(s, h) or "-")) for h in head]) for s in m],
        className="simple",
        id="home-checkpoints",
    )
    results = results_summary(run_dir)
    return html.Div(
        [
            html.H2(f"Run {m.name}"),
            dcc.Graph(id="home-lineage", figure=lineage_figure(m)),
            html.H3("Checkpoints"),
            table,
            html.H3("Results in the store"),
            html.Ul([html.Li(f"{r['key']} ({r['type']}, {r['written']})") for r in results], id="home-results")
            if results
            else html.P("No results yet: run an analysis (e.g. aclarena-diag tokens --ref NAME).", className="note"),
        ]
    )


def register_callbacks(app: Dash, run_dir: Path) -> None:
    """The home page is static."""
