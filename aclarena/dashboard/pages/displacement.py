"""Displacement: SFT vs RL displacement per stage, its profile over layers, update sparsity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, reader

PAGE = {"path": "/displacement", "name": "Displacement", "order": 50}
VIEW_OPTIONS = [{"label": "all weights", "value": "all"},
                {"label": "without embeddings and head", "value": "no-embeddings"}]
KIND_OPTIONS = [{"label": " stages ", "value": "stage"}, {"label": " oracles ", "value": "oracle"},
                {"label": " other ", "value": "other"}]
PHASE_OPTIONS = [{"label": " SFT ", "value": "sft"}, {"label": " RL ", "value": "rl"},
                 {"label": " no phase ", "value": "none"}]
ALL_KINDS = ["stage", "oracle", "other"]
ALL_PHASES = ["sft", "rl", "none"]


def summary(run_dir: Path, view: str = "all") -> dict[str, Any] | None:
    from aclarena.figures.vectors import DISPLACEMENT_KEY, load_summary

    with reader(run_dir) as r:
        return load_summary(r, DISPLACEMENT_KEY, view)


def figures(run_dir: Path, view: str, kinds: list[str] | None = None,
            phases: list[str] | None = None) -> tuple[Any, Any, Any]:
    """SFT/RL bars, per-layer profile and sparsity curves for ``view``, the updates filtered by kind
    (stage, oracle, other) and phase (sft, rl, none)."""
    from aclarena.figures.vectors import layer_profile_figure, sft_rl_figure, sparsity_figure, update_filter

    s = summary(run_dir, view)
    if s is None:
        return {}, {}, {}
    keep = update_filter(s, None, phases)
    if kinds is not None:
        keep = [i for i in keep if (s["kinds"][i] if s["kinds"][i] in ("stage", "oracle") else "other") in kinds]
    return sft_rl_figure(s, view, keep), layer_profile_figure(s, view, keep), sparsity_figure(s, view, keep)


def layout(**query: Any) -> html.Div:
    from aclarena.dashboard.urlstate import query_list, query_value
    from aclarena.diagnostics.run_notes import displacement_note

    run_dir = current_run()
    view = query_value(query, "view", ["all", "no-embeddings"], "all")
    kinds = query_list(query, "show", ALL_KINDS, ALL_KINDS)
    phases = query_list(query, "phase", ALL_PHASES, ALL_PHASES)
    s = summary(run_dir, view)
    if s is None:
        return html.Div([html.H2("Displacement"),
                         html.P("No displacement yet: run `aclarena-diag displacement --run DIR`.", className="note",
                                id="displacement-empty")])
    bars, profile, sparsity = figures(run_dir, view, kinds, phases)
    return html.Div([
        html.H2("Displacement"),
        html.P("‖Δθ‖₂ of each update (θ − θ_parent) and its fraction of ‖θ_parent‖₂. Sparsity is the fraction of "
               "entries that moved by at most the tolerance; dotted curves round both weights to bf16 first, which "
               "hides small updates.", className="note"),
        html.P(displacement_note(s), className="note", id="displacement-run-note"),
        html.Div([html.Div([html.Label("weights"),
                            dcc.RadioItems(id="displacement-view", options=VIEW_OPTIONS, value=view, inline=True)]),
                  html.Div([html.Label("show"), dcc.Checklist(id="displacement-kinds", options=KIND_OPTIONS,
                                                              value=kinds, inline=True)]),
                  html.Div([html.Label("phase"), dcc.Checklist(id="displacement-phases", options=PHASE_OPTIONS,
                                                               value=phases, inline=True)])],
                 className="controls"),
        dcc.Store(id="displacement-url"),
        dcc.Graph(id="displacement-sft-rl", figure=bars),
        dcc.Graph(id="displacement-layers", figure=profile),
        dcc.Graph(id="displacement-sparsity", figure=sparsity),
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    keep_in_url(app, "displacement-url", {"view": ("displacement-view", "value"),
                                          "show": ("displacement-kinds", "value"),
                                          "phase": ("displacement-phases", "value")})

    @app.callback(
        Output("displacement-sft-rl", "figure"), Output("displacement-layers", "figure"),
        Output("displacement-sparsity", "figure"), Output("displacement-run-note", "children"),
        Input("displacement-view", "value"),
        Input("displacement-kinds", "value"), Input("displacement-phases", "value"), prevent_initial_call=True,
    )
    def _view(view: str, kinds: list[str], phases: list[str]) -> tuple[Any, Any, Any, str]:
        from aclarena.diagnostics.run_notes import displacement_note

        s = summary(run_dir, view)
        return (*figures(run_dir, view, kinds, phases), displacement_note(s) if s is not None else "")
