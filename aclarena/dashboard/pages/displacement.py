"""Displacement: SFT vs RL displacement per stage, its profile over layers, update sparsity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, per_store, reader
from aclarena.results.displacement import DisplacementView

PAGE = {"path": "/displacement", "name": "Displacement", "order": 50}
VIEW_OPTIONS = [{"label": "all weights", "value": "all"},
                {"label": "without embeddings and head", "value": "no-embeddings"}]
KIND_OPTIONS = [{"label": " stages ", "value": "stage"}, {"label": " oracles ", "value": "oracle"},
                {"label": " other ", "value": "other"}]
PHASE_OPTIONS = [{"label": " SFT ", "value": "sft"}, {"label": " RL ", "value": "rl"},
                 {"label": " no phase ", "value": "none"}]
ALL_KINDS = ["stage", "oracle", "other"]
ALL_PHASES = ["sft", "rl", "none"]


@per_store()
def summary(run_dir: Path, view: str = "all") -> DisplacementView | None:
    from aclarena.results.displacement import read_displacement_view

    with reader(run_dir) as r:
        return read_displacement_view(r, view)


def _kept(s: DisplacementView, kinds: list[str] | None, phases: list[str] | None) -> list[int]:
    from aclarena.figures.vectors import update_filter

    keep = update_filter(s, None, phases)
    if kinds is not None:
        keep = [i for i in keep if (s.kinds[i] if s.kinds[i] in ("stage", "oracle") else "other") in kinds]
    return keep


@per_store()
def highlight_options(run_dir: Path, view: str, kinds: list[str] | None = None,
                      phases: list[str] | None = None) -> tuple[list[dict[str, str]], str | None]:
    """The updates the per-layer plots can highlight (the kept ones) and the default (the one that moved
    furthest)."""
    from aclarena.figures.vectors import default_highlight

    s = summary(run_dir, view)
    if s is None:
        return [], None
    keep = _kept(s, kinds, phases)
    hl = default_highlight(s, keep)
    options = [{"label": f"{s.children[i]} ({s.phases[i] or 'no phase'})", "value": s.children[i]}
               for i in keep]
    return options, (s.children[hl] if hl is not None else None)


@per_store()
def figures(run_dir: Path, view: str, kinds: list[str] | None = None,
            phases: list[str] | None = None, highlight: str | None = None) -> tuple[Any, Any, Any]:
    """SFT/RL bars, per-layer profile and sparsity curves for ``view``, the updates filtered by kind
    (stage, oracle, other) and phase (sft, rl, none); ``highlight`` the update drawn in colour in the
    per-layer plots (the others faded; default the one that moved furthest)."""
    from aclarena.figures.vectors import layer_profile_figure, sft_rl_figure, sparsity_figure

    s = summary(run_dir, view)
    if s is None:
        return {}, {}, {}
    keep = _kept(s, kinds, phases)
    hl = s.children.index(highlight) if highlight in s.children else None
    return (sft_rl_figure(s, view, keep), layer_profile_figure(s, view, keep, hl),
            sparsity_figure(s, view, keep, hl))


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
    options, default = highlight_options(run_dir, view, kinds, phases)
    hl = query_value(query, "hl", [o["value"] for o in options], default)
    bars, profile, sparsity = figures(run_dir, view, kinds, phases, hl)
    return html.Div([
        html.H2("Displacement"),
        html.P("‖Δθ‖₂ of each update (θ − θ_parent) and its fraction of ‖θ_parent‖₂. Sparsity is the fraction of "
               "entries that moved by at most the tolerance; dotted curves round both weights to bf16 first, which "
               "hides small updates.", className="note"),
        html.P(displacement_note(s.as_mapping()), className="note", id="displacement-run-note"),
        html.Div([html.Div([html.Label("weights"),
                            dcc.RadioItems(id="displacement-view", options=VIEW_OPTIONS, value=view, inline=True)]),
                  html.Div([html.Label("show"), dcc.Checklist(id="displacement-kinds", options=KIND_OPTIONS,
                                                              value=kinds, inline=True)]),
                  html.Div([html.Label("phase"), dcc.Checklist(id="displacement-phases", options=PHASE_OPTIONS,
                                                               value=phases, inline=True)])],
                 className="controls"),
        dcc.Store(id="displacement-url"),
        dcc.Graph(id="displacement-sft-rl", figure=bars),
        html.Div([html.Label("highlight"), dcc.Dropdown(
            id="displacement-highlight", options=options, value=hl, clearable=False, style={"minWidth": "20em"})],
            className="controls", title="The update drawn in colour in the two per-layer plots below; the others "
                                        "are faded (hover one for its name). Default: the update that moved furthest."),
        dcc.Graph(id="displacement-layers", figure=profile),
        dcc.Graph(id="displacement-sparsity", figure=sparsity),
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    keep_in_url(app, "displacement-url", {"view": ("displacement-view", "value"),
                                          "show": ("displacement-kinds", "value"),
                                          "phase": ("displacement-phases", "value"),
                                          "hl": ("displacement-highlight", "value")})

    @app.callback(
        Output("displacement-sft-rl", "figure"), Output("displacement-layers", "figure"),
        Output("displacement-sparsity", "figure"), Output("displacement-run-note", "children"),
        Output("displacement-highlight", "options"), Output("displacement-highlight", "value"),
        Input("displacement-view", "value"), Input("displacement-kinds", "value"),
        Input("displacement-phases", "value"), Input("displacement-highlight", "value"), prevent_initial_call=True,
    )
    def _view(view: str, kinds: list[str], phases: list[str], hl: str | None) -> tuple[Any, ...]:
        from aclarena.diagnostics.run_notes import displacement_note

        s = summary(run_dir, view)
        options, default = highlight_options(run_dir, view, kinds, phases)
        if hl not in [o["value"] for o in options]:
            hl = default
        return (*figures(run_dir, view, kinds, phases, hl), displacement_note(s.as_mapping()) if s is not None else "", options,
                hl)
