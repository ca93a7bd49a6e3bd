"""Vectors: task-vector cosines (all weights and per layer block), each vector's cosine with an oracle
direction per layer block, and distances to the oracles.

A filter picks which task vectors the heatmaps show (stage updates θ − θ_parent, cumulative
updates θ − θ_base, oracle directions; SFT / RL): a 40-checkpoint chain has over 80 vectors.
The heatmaps grow with their rows; zero vectors are grey and labelled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, manifest, per_store, reader
from aclarena.results.vectors import VectorSummaryView

PAGE = {"path": "/vectors", "name": "Vectors", "order": 40}
VIEW_OPTIONS = [{"label": "all weights", "value": "all"},
                {"label": "without embeddings and head", "value": "no-embeddings"}]
KIND_OPTIONS = [{"label": " stage updates ", "value": "stage"}, {"label": " cumulative ", "value": "cumulative"},
                {"label": " oracles ", "value": "oracle"}]
PHASE_OPTIONS = [{"label": " SFT ", "value": "sft"}, {"label": " RL ", "value": "rl"},
                 {"label": " no phase ", "value": "none"}]
DEFAULT_KINDS = ["stage", "oracle"]
DEFAULT_PHASES = ["sft", "rl", "none"]


@per_store()
def summary(run_dir: Path, view: str = "all") -> VectorSummaryView | None:
    from aclarena.results.vectors import read_vectors_view

    with reader(run_dir) as r:
        return read_vectors_view(r, view)


def slider_marks(groups: list[str]) -> dict[int, str]:
    """At most ~12 labelled marks, so that a 36-layer model stays readable."""
    step = max(1, -(-len(groups) // 12))
    return {i: g.replace("layer.", "L") for i, g in enumerate(groups) if i % step == 0 or i == len(groups) - 1}


def _keep(run_dir: Path, s: VectorSummaryView, kinds: list[str] | None, phases: list[str] | None) -> list[int]:
    from aclarena.figures.vectors import vector_filter

    return vector_filter(s, manifest(run_dir), kinds, phases)


@per_store()
def view_figures(run_dir: Path, view: str, kinds: list[str] | None = None,
                 phases: list[str] | None = None) -> tuple[Any, Any, int, dict[int, str]]:
    """Global heatmap (the filtered vectors), distance lines, and the layer slider's max and marks."""
    from aclarena.figures.vectors import distance_figure, global_cosines_figure

    s = summary(run_dir, view)
    if s is None:
        return {}, {}, 0, {}
    groups = s.group_labels
    keep = _keep(run_dir, s, kinds, phases)
    return (global_cosines_figure(s, view, keep), distance_figure(s, view), max(0, len(groups) - 1),
            slider_marks(groups))


@per_store()
def layer_figure(run_dir: Path, view: str, index: int | None, kinds: list[str] | None = None,
                 phases: list[str] | None = None) -> Any:
    from aclarena.figures.vectors import layer_cosines_figure

    return _per_layer(layer_cosines_figure, run_dir, view, index, kinds, phases)


@per_store()
def oracle_figure(run_dir: Path, view: str, oracle: int | None, kinds: list[str] | None = None,
                  phases: list[str] | None = None) -> Any:
    """Cosine of the filtered task vectors with one oracle direction, per layer block."""
    from aclarena.figures.vectors import layer_oracle_figure

    return _per_layer(layer_oracle_figure, run_dir, view, oracle, kinds, phases)


def _per_layer(figure: Any, run_dir: Path, view: str, index: int | None, kinds: list[str] | None,
               phases: list[str] | None) -> Any:
    """A per-layer figure of the stored summary (``figure(summary, index, view, keep)``); {} without one."""
    s = summary(run_dir, view)
    if s is None:
        return {}
    return figure(s, index or 0, view, _keep(run_dir, s, kinds, phases))


def run_note(run_dir: Path, s: VectorSummaryView) -> str:
    """The run's cosines beside the study's (:func:`aclarena.diagnostics.run_notes.vectors_note`)."""
    from aclarena.diagnostics.run_notes import vectors_note

    m = manifest(run_dir)
    stages = [c.name for c in m if c.kind == "stage"]
    folder = {c.path: c.name for c in m if c.kind == "stage"}
    same = {c.name: folder[c.path] for c in m if c.kind == "oracle" and c.path in folder}  # oracle-math = seq-math
    return vectors_note(s.as_mapping(), {c.name: (c.domain, c.phase, c.kind) for c in m}, stages[-1] if stages else None, same)


def layout(**query: Any) -> html.Div:
    from aclarena.dashboard.urlstate import query_int, query_list, query_value

    run_dir = current_run()
    view = query_value(query, "view", ["all", "no-embeddings"], "all")
    kinds = query_list(query, "show", [o["value"] for o in KIND_OPTIONS], DEFAULT_KINDS)
    phases = query_list(query, "phase", [o["value"] for o in PHASE_OPTIONS], DEFAULT_PHASES)
    s = summary(run_dir, view)
    if s is None:
        return html.Div([html.H2("Task vectors"),
                         html.P("No task vectors yet: run `aclarena-diag vectors --run DIR`.", className="note",
                                id="vectors-empty")])
    heat, dist, gmax, marks = view_figures(run_dir, view, kinds, phases)
    layer = min(max(query_int(query, "layer") or 0, 0), gmax)
    oracle = min(max(query_int(query, "oracle") or 0, 0), max(0, len(s.oracles) - 1))
    return html.Div([
        html.H2("Task vectors"),
        html.P("Cosines of stage updates (θ − θ_parent), cumulative updates (θ − θ_base) and oracle directions "
               "(oracle − base).", className="note"),
        html.P(run_note(run_dir, s), className="note", id="vectors-run-note"),
        html.Div([html.Div([html.Label("weights"),
                            dcc.RadioItems(id="vectors-view", options=VIEW_OPTIONS, value=view, inline=True)]),
                  html.Div([html.Label("show"),
                            dcc.Checklist(id="vectors-kinds", options=KIND_OPTIONS, value=kinds, inline=True)]),
                  html.Div([html.Label("phase"),
                            dcc.Checklist(id="vectors-phases", options=PHASE_OPTIONS, value=phases,
                                          inline=True)])],
                 className="controls"),
        dcc.Store(id="vectors-url"),
        dcc.Graph(id="vectors-heatmap", figure=heat),
        html.H3("Per layer block"),
        html.Div(dcc.Slider(id="vectors-layer-slider", min=0, max=gmax, step=1, value=layer, marks=marks,
                            allow_direct_input=False), style={"maxWidth": "900px"}),
        dcc.Graph(id="vectors-layer-heatmap", figure=layer_figure(run_dir, view, layer, kinds, phases)),
        html.H3("Cosine with an oracle direction, per layer block"),
        html.Div([html.Label("oracle"), dcc.Dropdown(
            id="vectors-oracle", clearable=False, style={"minWidth": "16em"},
            options=[{"label": o, "value": i} for i, o in enumerate(s.oracles)],
            value=oracle)], className="controls"),
        dcc.Graph(id="vectors-layer-oracle", figure=oracle_figure(run_dir, view, oracle, kinds, phases)),
        html.H3("Distance to each oracle along the chain"),
        dcc.Graph(id="vectors-distances", figure=dist),
        html.Ul([html.Li(n) for n in s.notes], id="vectors-notes", className="note"),
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    keep_in_url(app, "vectors-url", {"view": ("vectors-view", "value"), "show": ("vectors-kinds", "value"),
                                     "phase": ("vectors-phases", "value"), "layer": ("vectors-layer-slider", "value"),
                                     "oracle": ("vectors-oracle", "value")})

    @app.callback(
        Output("vectors-heatmap", "figure"), Output("vectors-distances", "figure"),
        Output("vectors-layer-slider", "max"), Output("vectors-layer-slider", "marks"),
        Output("vectors-run-note", "children"),
        Input("vectors-view", "value"), Input("vectors-kinds", "value"), Input("vectors-phases", "value"),
        prevent_initial_call=True,
    )
    def _view(view: str, kinds: list[str], phases: list[str]) -> tuple[Any, Any, int, dict[int, str], str]:
        s = summary(run_dir, view)
        return (*view_figures(run_dir, view, kinds, phases), run_note(run_dir, s) if s is not None else "")

    @app.callback(
        Output("vectors-layer-heatmap", "figure"),
        Input("vectors-layer-slider", "value"), Input("vectors-view", "value"), Input("vectors-kinds", "value"),
        Input("vectors-phases", "value"), prevent_initial_call=True,
    )
    def _layer(index: int | None, view: str, kinds: list[str], phases: list[str]) -> Any:
        return layer_figure(run_dir, view, index, kinds, phases)

    @app.callback(
        Output("vectors-layer-oracle", "figure"),
        Input("vectors-oracle", "value"), Input("vectors-view", "value"), Input("vectors-kinds", "value"),
        Input("vectors-phases", "value"), prevent_initial_call=True,
    )
    def _oracle(oracle: int | None, view: str, kinds: list[str], phases: list[str]) -> Any:
        return oracle_figure(run_dir, view, oracle, kinds, phases)
