"""Tokens: a reference's frozen generation, coloured by reference entropy or by each checkpoint's drift.

Pick a probe set, a sequence and a checkpoint. The text shows every token; scored tokens
(the ones the reference generated) are coloured by the reference's entropy or by
``KL(p_ref ‖ p_ckpt)``, and hovering one shows its entropy, both log-probs of the reference
token, KL and JS, and both models' top alternatives. Beside it: the entropy-vs-KL scatter
of the checkpoint's positions, the concentration curves of every checkpoint, and the
summary table. Each callback reads one sequence's rows or one checkpoint's arrays.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run, manifest, reader

PAGE = {"path": "/tokens", "name": "Tokens", "order": 10}

KL_LOW = 1e-4  # drift colour scale starts here (log scale): smaller KL reads as unchanged
STATUS_TEXT = {1: "non-finite logits (flagged, left out of summaries)", 2: "beyond this checkpoint's positions"}


def layout(**query: Any) -> html.Div:
    from aclarena.figures.tokens import token_probes

    run_dir = current_run()
    with reader(run_dir) as r:
        probes = token_probes(r)
    if not probes:
        return html.Div([
            html.H2("Tokens"),
            html.P("No token scores in this run yet: run `aclarena-diag tokens --ref NAME --run DIR`.",
                   className="note", id="tokens-empty"),
        ])
    probe = query.get("probe") if query.get("probe") in probes else probes[0]
    return html.Div([
        html.H2("Tokens: where later checkpoints drift on a frozen generation"),
        html.Div([
            html.Div([html.Label("probe set"),
                      dcc.Dropdown(id="tokens-probe", options=probes, value=probe, clearable=False)]),
            html.Div([html.Label("sequence"), dcc.Dropdown(id="tokens-sequence", clearable=False)],
                     style={"minWidth": "28em"}),
            html.Div([html.Label("checkpoint"), dcc.Dropdown(id="tokens-checkpoint", clearable=False)]),
            html.Div([html.Label("colour by"),
                      dcc.RadioItems(id="tokens-color", value="drift", inline=True,
                                     options=[{"label": " drift (KL) ", "value": "drift"},
                                              {"label": " reference entropy", "value": "entropy"}])]),
        ], className="controls"),
        html.Div(id="tokens-legend", className="note"),
        html.Div(id="tokens-text", className="token-text"),
        html.Div([
            dcc.Graph(id="tokens-scatter", style={"flex": "1 1 28em"}),
            dcc.Graph(id="tokens-concentration", style={"flex": "1 1 28em"}),
        ], style={"display": "flex", "flexWrap": "wrap", "gap": "1em"}),
        html.H3("Summary"),
        html.Div(id="tokens-summary"),
    ])


# --- callback bodies (tests call these directly) ------------------------------------------------


def on_probe(run_dir: Path, probe: str | None) -> tuple[list[dict[str, Any]], int | None, list[str], str | None,
                                                         html.Table | html.P]:
    """Sequence and checkpoint choices of a probe set, and its summary table."""
    from aclarena.figures.tokens import SUMMARY_COLUMNS, fmt, sequence_labels, summaries, token_checkpoints

    with reader(run_dir) as r:
        if r is None or probe is None:
            return [], None, [], None, html.P("no token scores", className="note")
        m = manifest(run_dir)
        labels = sequence_labels(r, probe)
        ckpts = token_checkpoints(r, probe, m)
        rows = summaries(r, probe, m, with_flags=True)
    table = html.Table(
        [html.Tr([html.Th(h) for _, h in SUMMARY_COLUMNS])]
        + [html.Tr([html.Td(fmt(row.get(k))) for k, _ in SUMMARY_COLUMNS],
                   className="flagged" if row.get("n_nonfinite") else None) for row in rows],
        className="simple", id="tokens-summary-table",
    )
    options = [{"label": lab, "value": i} for i, lab in enumerate(labels)]
    return options, 0 if options else None, ckpts, (ckpts[-1] if ckpts else None), table


def _color(t: float, rgb: tuple[int, int, int]) -> str:
    t = min(max(t, 0.0), 1.0)
    return f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.08 + 0.82 * t:.3f})"


def _hover(tok: Any) -> str:
    def alts(items: tuple[tuple[str, float], ...]) -> str:
        return ", ".join(f"{w!r} {lp:.2f}" for w, lp in items)

    lines = [f"token {tok.text!r}", f"reference entropy {tok.entropy:.3f} nats"]
    if not math.isnan(tok.logprob):
        lines.append(f"log p(token): reference {tok.ref_logprob:.3f}, checkpoint {tok.logprob:.3f} "
                     f"(Δ {tok.logprob - tok.ref_logprob:+.3f})")
        lines.append(f"KL {tok.kl:.3g} nats, JS {tok.js:.3g} nats" + ("; top-1 flipped" if tok.flipped else ""))
        lines.append(f"checkpoint's top: {alts(tok.alternatives)}")
    elif tok.status:
        lines.append(STATUS_TEXT.get(tok.status, "not scored"))
    else:
        lines.append(f"log p(token): reference {tok.ref_logprob:.3f}")
    lines.append(f"reference's top: {alts(tok.ref_alternatives)}")
    return "\n".join(lines)


def _span(props: dict[str, Any]) -> dict[str, Any]:
    """An html.Span in the JSON form the Dash renderer reads."""
    return {"type": "Span", "namespace": "dash_html_components", "props": props}


def on_view(run_dir: Path, probe: str | None, seq: int | None, checkpoint: str | None,
            color_by: str) -> tuple[list[dict[str, Any]], str]:
    """The coloured text of one sequence and the legend of its colour scale."""
    from aclarena.figures.tokens import sequence_tokens

    if probe is None or seq is None:
        return [], ""
    with reader(run_dir) as r:
        if r is None:
            return [], ""
        tokens = sequence_tokens(r, probe, int(seq), checkpoint)
    scored = [t for t in tokens if t.scored]
    if color_by == "entropy":
        top = max([t.entropy for t in scored if math.isfinite(t.entropy)] or [1.0]) or 1.0
        value = [t.entropy / top if t.scored and math.isfinite(t.entropy) else None for t in tokens]
        rgb = (31, 119, 180)
        legend = f"blue: reference entropy, 0 to {top:.2f} nats (this sequence's maximum)"
    else:
        kls = [t.kl for t in scored if math.isfinite(t.kl)]
        top = max(max(kls or [0.0]), KL_LOW * 10)
        span = math.log10(top) - math.log10(KL_LOW)
        value = [None if not t.scored or not math.isfinite(t.kl)
                 else (math.log10(max(t.kl, KL_LOW)) - math.log10(KL_LOW)) / span for t in tokens]
        rgb = (214, 39, 40)
        legend = (f"red: KL(p_ref ‖ p_{checkpoint}) on a log scale from {KL_LOW:g} to {top:.3g} nats; "
                  "black: flagged positions; grey text: not scored (prompt, user and tool turns)")
    # children as component dicts: building 1,000 html.Span objects costs more than the rest
    spans: list[dict[str, Any]] = []
    for tok, v in zip(tokens, value, strict=True):
        if not tok.scored:
            spans.append(_span({"children": tok.text, "className": "tok unscored"}))
            continue
        style = {"backgroundColor": "#222", "color": "#fff"} if tok.status == 1 else (
            {"backgroundColor": _color(v, rgb)} if v is not None else {})
        spans.append(_span({"children": tok.text, "title": _hover(tok), "style": style,
                            "className": "tok flip" if tok.flipped and color_by != "entropy" else "tok"}))
    return spans, legend


def on_checkpoint(run_dir: Path, probe: str | None, checkpoint: str | None) -> tuple[Any, Any]:
    """The entropy-vs-KL scatter of ``checkpoint`` and the concentration curves, it highlighted
    (plain figure dicts: plotly's validation would cost more than reading the data)."""
    from aclarena.figures.tokens import concentration_spec, scatter_spec

    empty: dict[str, Any] = {"data": [], "layout": {}}
    if probe is None or checkpoint is None:
        return empty, empty
    with reader(run_dir) as r:
        if r is None:
            return empty, empty
        m = manifest(run_dir)
        return scatter_spec(r, probe, checkpoint), concentration_spec(r, probe, m, highlight=checkpoint)


def register_callbacks(app: Dash, run_dir: Path) -> None:
    @app.callback(
        Output("tokens-sequence", "options"), Output("tokens-sequence", "value"),
        Output("tokens-checkpoint", "options"), Output("tokens-checkpoint", "value"),
        Output("tokens-summary", "children"),
        Input("tokens-probe", "value"),
    )
    def _probe(probe: str | None) -> tuple[Any, ...]:
        return on_probe(run_dir, probe)

    @app.callback(
        Output("tokens-text", "children"), Output("tokens-legend", "children"),
        Input("tokens-probe", "value"), Input("tokens-sequence", "value"), Input("tokens-checkpoint", "value"),
        Input("tokens-color", "value"),
    )
    def _view(probe: str | None, seq: int | None, checkpoint: str | None, color_by: str) -> tuple[Any, ...]:
        return on_view(run_dir, probe, seq, checkpoint, color_by)

    @app.callback(
        Output("tokens-scatter", "figure"), Output("tokens-concentration", "figure"),
        Input("tokens-probe", "value"), Input("tokens-checkpoint", "value"),
    )
    def _checkpoint(probe: str | None, checkpoint: str | None) -> tuple[Any, ...]:
        return on_checkpoint(run_dir, probe, checkpoint)
