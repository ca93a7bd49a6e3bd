"""Home: the run's status: which analyses exist, when they were written, links to their pages,
and the command that makes a missing one; then the checkpoints and their lineage (click a node
for links to the pages that show that checkpoint).

:func:`page_status` also tells the navigation which pages have data (the others are greyed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, manifest, page_names, per_store, reader

PAGE = {"path": "/", "name": "Run", "order": 0}

# page path -> (what it shows, store key prefix of its results, the command that makes them)
ANALYSES: dict[str, tuple[str, str | None, str]] = {
    "/overview": ("capability matrix and CL metrics", "capability", "aclarena-diag eval --run DIR"),
    "/tokens": ("token-level drift on frozen generations", "tokens", "aclarena-diag tokens --ref NAME --run DIR"),
    "/flips": ("where forgotten items diverged, and the swap test", "flips",
               "aclarena-diag flips --from E --to L --suite S --run DIR"),
    "/vectors": ("task-vector cosines and distances", "vectors", "aclarena-diag vectors --run DIR"),
    "/displacement": ("SFT vs RL parameter displacement", "displacement", "aclarena-diag displacement --run DIR"),
    "/monitor": ("drift-monitor series of training", None, "train with a [monitor] section (series.h5)"),
    "/consolidation": ("consolidated models against the chain", "capability",
                       "aclarena-diag consolidate --method ..., then aclarena-diag eval"),
    "/router": ("MLE routers per context type", "routing", "aclarena-diag consolidate --method mle"),
    "/orders": ("curriculum orders: pairwise interference, orders ranked", "orders",
                "aclarena-diag study --orders pairs --run DIR"),
}


@per_store()
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


def results_groups(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The store's result groups summarised: one row per top-level key and result type (``tokens``,
    ``capability``...) with how many results it holds, an example key and the newest write."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        prefix = r["key"].split("/", 1)[0]
        g = groups.setdefault((prefix, str(r["type"])), {"group": prefix, "type": str(r["type"]), "count": 0,
                                                          "example": r["key"], "written": None})
        g["count"] += 1
        if r.get("written") and (g["written"] is None or str(r["written"]) > g["written"]):
            g["written"] = str(r["written"])
    return list(groups.values())


def results_table(results: list[dict[str, Any]]) -> html.Table:
    head = html.Tr([html.Th("group", title="The first part of the results' keys in results.h5."),
                    html.Th("type", title="The stored result type."), html.Th("results"),
                    html.Th("for example", title="One of the group's keys."), html.Th("last written")])
    return html.Table([head] + [html.Tr([html.Td(g["group"]), html.Td(g["type"]), html.Td(str(g["count"])),
                                         html.Td(html.Code(g["example"])), html.Td(g["written"] or "-")])
                                for g in results_groups(results)], className="simple", id="home-results")


@per_store()
def page_status(run_dir: Path, results: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Per page path of :data:`ANALYSES`: ``has_data``, ``results`` (count), ``written`` (latest) and ``hint``."""
    from aclarena.dashboard.pages.monitor import labels

    results = results_summary(run_dir) if results is None else results
    m = manifest(run_dir)
    out: dict[str, dict[str, Any]] = {}
    for path, (what, prefix, hint) in ANALYSES.items():
        mine = [r for r in results if prefix is not None and r["key"].split("/", 1)[0] == prefix]
        if path == "/consolidation":
            consolidated = {s.name for s in m if s.kind == "consolidated"}
            mine = [r for r in mine if any(f"/{c}/" in f"/{r['key']}/" for c in consolidated)]
        has = bool(labels(run_dir)) if path == "/monitor" else bool(mine)
        written = max((str(r["written"]) for r in mine if r.get("written")), default=None)
        out[path] = {"what": what, "has_data": has, "results": len(mine), "written": written, "hint": hint}
    return out


def status_table(status: dict[str, dict[str, Any]], names: dict[str, str]) -> html.Table:
    head = html.Tr([html.Th("page", title="Open it from here or from the navigation."),
                    html.Th("shows"), html.Th("results", title="Result groups in results.h5 behind the page."),
                    html.Th("last written", title="When the newest of them was written (UTC)."),
                    html.Th("to make it", title="The command that writes what the page needs.")])
    rows = []
    for path, st in status.items():
        name = names.get(path, path)
        rows.append(html.Tr([
            html.Td(dcc.Link(name, href=path, id=f"home-link-{path.strip('/')}") if st["has_data"] else name),
            html.Td(st["what"]), html.Td(str(st["results"]) if st["has_data"] else "none"),
            html.Td(st["written"] or "-"), html.Td("" if st["has_data"] else html.Code(st["hint"])),
        ], className="has-data" if st["has_data"] else "no-data"))
    return html.Table([head, *rows], className="simple", id="home-status")


@per_store()
def token_scored(run_dir: Path) -> dict[str, set[str]]:
    """Probe set -> the checkpoints scored on it."""
    from aclarena.results.tokens import list_checkpoints, list_probes

    with reader(run_dir) as r:
        return {p: set(list_checkpoints(r, p)) for p in list_probes(r)} if r is not None else {}


def checkpoint_pages(name: str, status: dict[str, dict[str, Any]], scored: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(label, href) of the pages that show checkpoint ``name``: its token drift on each probe set it
    was scored on, then the run-wide pages that have data."""
    out = [(f"tokens ({p})", f"/tokens?probe={p}&checkpoint={name}") for p, ckpts in scored.items() if name in ckpts]
    out += [(path.strip("/"), path) for path in ("/overview", "/vectors", "/displacement")
            if status[path]["has_data"]]
    return out


def _links(pages: list[tuple[str, str]], prefix: str | None = None) -> list[Any]:
    out = [dcc.Link(label, href=href, id=f"{prefix}-{i}") if prefix else dcc.Link(label, href=href)
           for i, (label, href) in enumerate(pages)]
    return [x for pair in zip(out, [" · "] * len(out), strict=True) for x in pair][:-1]


def lineage_links(run_dir: Path, click: dict[str, Any] | None) -> Any:
    """The panel under the lineage: the clicked node's checkpoint and links to the pages that show it."""
    point = (click or {}).get("points", [{}])[0]
    cd = point.get("customdata")
    m = manifest(run_dir)
    if not isinstance(cd, list) or len(cd) < 4 or cd[3] not in m:
        return html.P("Click a checkpoint of the lineage for the pages that show it.", className="note")
    name = str(cd[3])
    pages = checkpoint_pages(name, page_status(run_dir), token_scored(run_dir))
    if not pages:
        return html.P(f"{name}: no page shows it yet (run an analysis on it).", className="note")
    return html.P([html.B(name), ": ", *_links(pages, "home-lineage-link")])


def layout(**_query: Any) -> html.Div:
    from aclarena.figures.run import lineage_figure

    run_dir = current_run()
    m = manifest(run_dir)
    results = results_summary(run_dir)
    status = page_status(run_dir, results)
    scored = token_scored(run_dir)

    def links(name: str) -> list[Any]:
        return _links(checkpoint_pages(name, status, scored))

    head = ["name", "kind", "domain", "phase", "parent", "on", "path"]
    table = html.Table(
        [html.Tr([html.Th(h) for h in head] + [html.Th("pages", title="Pages that show this checkpoint.")])]
        + [html.Tr([html.Td(str(getattr(s, h) or "-")) for h in head] + [html.Td(links(s.name))]) for s in m],
        className="simple",
        id="home-checkpoints",
    )
    return html.Div(
        [
            html.H2(f"Run {m.name}"),
            html.H3("Status"),
            status_table(status, page_names()),
            html.H3("Checkpoints"),
            dcc.Graph(id="home-lineage", figure=lineage_figure(m)),
            html.Div(lineage_links(run_dir, None), id="home-lineage-links", className="links"),
            table,
            html.H3("Results in the store"),
            html.P(f"{len(results)} results in results.h5, one row per group.", className="note",
                   id="home-results-count") if results else None,
            html.Div([results_table(results),
                      html.Details([html.Summary(f"every key ({len(results)})"),
                                    html.Ul([html.Li(f"{r['key']} ({r['type']}, {r['written']})") for r in results],
                                            id="home-results-keys")])])
            if results
            else html.P("No results yet: run an analysis (e.g. aclarena-diag tokens --ref NAME).", className="note"),
        ]
    )


def register_callbacks(app: Dash, run_dir: Path) -> None:
    """A click on a lineage node lists the pages that show its checkpoint."""

    @app.callback(Output("home-lineage-links", "children"), Input("home-lineage", "clickData"),
                  prevent_initial_call=True)
    def _lineage(click: Any) -> Any:
        return lineage_links(run_dir, click)
