"""Tokens: a reference's frozen generation, coloured by reference entropy or by each checkpoint's drift.

Pick a probe set, a sequence and a checkpoint (and, to compare, a second checkpoint shown
side by side on the same colour scale). The text shows every token with its boundary and
whitespace visible; scored tokens (the ones the reference generated) are coloured by the
reference's entropy or by ``KL(p_ref ‖ p_ckpt)`` on one scale for the whole probe set
(colour bar above the text); flips (top-1 changed) carry a dark underline. Hovering a
token shows its values; clicking it pins a detail panel (both top-k lists, log-probs, KL,
JS, entropy, its KL rank in the sequence). Below: the most-drifted sequences or positions
(sortable; a click jumps to the token), the top substitutions at flips, the entropy-vs-KL
scatter (a click on a point jumps too), the concentration curves, the summary table and the
high- vs low-entropy strata. A "score your own prompt" box runs typed text through the probe
set's reference and a checkpoint live (:mod:`aclarena.analysis.prompt`: CPU, small models only).

The text is sent as one escaped HTML string and written into the page by a clientside
callback: a thousand Dash components per sequence cost more to draw than everything else.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dash import ClientsideFunction, Dash, Input, Output, State, dash_table, dcc, html, no_update
from dash.development.base_component import Component

from aclarena.dashboard.data import current_run, manifest, per_store, reader

PAGE = {"path": "/tokens", "name": "Tokens", "order": 10}

RANK_COLUMNS = {
    "sequences": [
        ("sequence", "sequence", "text", "The sequence: index, scored positions, start of its prompt."),
        ("positions", "positions", "int", "Valid scored positions (the reference generated them)."),
        ("kl_sum", "KL sum", "numeric", "Sum of KL(p_ref ‖ p_ckpt) over the sequence, nats. 0 = unchanged."),
        ("kl_mean", "KL mean", "numeric", "Mean KL per position, nats. Near 0 = the checkpoint still agrees."),
        ("kl_max", "KL max", "numeric", "Largest KL at one position (a click jumps there)."),
        ("flips", "flips", "int", "Positions whose top-1 token changed."),
        ("flip_rate", "flip rate", "numeric", "Flips / positions. 0 = same greedy choices as the reference."),
        ("high_share", "KL share high", "numeric",
         "Share of the sequence's KL at high-entropy positions (study (Qwen3-8B): forgetting concentrates there)."),
    ],
    "positions": [
        ("seq", "seq", "int", "Sequence index."),
        ("pos", "token", "int", "Token index in the sequence."),
        ("token", "text", "text", "The reference's token (· space, ↵ newline)."),
        ("entropy", "entropy", "numeric", "Reference entropy, nats: high = a decision point."),
        ("kl", "KL", "numeric", "KL(p_ref ‖ p_ckpt), nats. 0 = unchanged."),
        ("js", "JS", "numeric", "Jensen-Shannon divergence, nats (at most ln 2)."),
        ("flipped", "flip", "text", "Top-1 token changed."),
        ("ref_top", "ref top", "text", "The reference's top-1 token."),
        ("ckpt_top", "ckpt top", "text", "The checkpoint's top-1 token."),
    ],
}
SUBST_COLUMNS = [
    ("from", "reference's top", "text", "The reference's top-1 token at a flipped position."),
    ("to", "checkpoint's top", "text", "What the checkpoint puts first there instead."),
    ("count", "count", "int", "Flipped positions with this pair, over the probe set."),
    ("share", "share of flips", "numeric", "Count / all flips: a few large shares = a format takeover."),
    ("kl_mean", "KL mean", "numeric", "Mean KL at these positions, nats."),
]


def _columns(spec: list[tuple[str, str, str, str]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    from dash.dash_table.Format import Format, Scheme

    formats = {"numeric": Format(precision=3, scheme=Scheme.decimal_or_exponent),
               "int": Format(precision=0, scheme=Scheme.fixed)}
    cols = [{"id": k, "name": n, "type": "numeric" if t in formats else t,
             **({"format": formats[t]} if t in formats else {})} for k, n, t, _ in spec]
    return cols, {k: tip for k, _, _, tip in spec}


def _table(table_id: str, spec: list[tuple[str, str, str, str]]) -> Component:
    cols, tips = _columns(spec)
    # dash/dash_table/__init__.py is `# type: ignore`d, so mypy misses the DataTable it re-exports
    return dash_table.DataTable(  # type: ignore[attr-defined]
        id=table_id, columns=cols, data=[], sort_action="native", page_size=12, export_format="csv",
        export_headers="display", tooltip_header=tips, tooltip_delay=300, tooltip_duration=None,
        style_table={"overflowX": "auto"}, style_cell={"fontFamily": "inherit", "fontSize": "0.85em",
                                                       "textAlign": "left", "maxWidth": "28em",
                                                       "overflow": "hidden", "textOverflow": "ellipsis"},
        style_header={"fontWeight": 600, "textDecoration": "underline dotted"}, cell_selectable=True,
    )


def layout(**query: Any) -> html.Div:
    from aclarena.diagnostics.run_notes import main_probe, probe_help
    from aclarena.results.tokens import list_probes, reference_name

    run_dir = current_run()
    names = [c.name for c in manifest(run_dir)]
    with reader(run_dir) as r:
        probes = list_probes(r)
        helps = {p: probe_help(p, reference_name(r, p), names) for p in probes} if r is not None else {}
    if not probes:
        return html.Div([
            html.H2("Tokens"),
            html.P("No token scores in this run yet: run `aclarena-diag tokens --ref NAME --run DIR`.",
                   className="note", id="tokens-empty"),
        ])
    from aclarena.dashboard.urlstate import query_int, query_pin, query_value

    probe = query_value(query, "probe", probes, main_probe(probes, names))
    initial = {"probe": probe, "seq": query_int(query, "seq"), "checkpoint": query_value(query, "checkpoint"),
               "b": query_value(query, "b")}
    return html.Div([
        dcc.Store(id="tokens-query", data=initial), dcc.Store(id="tokens-url"),
        html.H2("Tokens: where later checkpoints drift on a frozen generation"),
        html.Div([
            html.Div([html.Label("probe set", title="Hover a probe set for what it is; the line below the "
                                                     "controls explains the one shown."),
                      dcc.Dropdown(id="tokens-probe", clearable=False, value=probe,
                                   options=[{"label": p, "value": p, "title": helps[p]} for p in probes])]),
            html.Div([html.Label("sequence"), dcc.Dropdown(id="tokens-sequence", clearable=False)],
                     style={"minWidth": "28em"}),
            html.Div([html.Label("checkpoint"), dcc.Dropdown(id="tokens-checkpoint", clearable=False)]),
            html.Div([html.Label("side by side with"),
                      dcc.Dropdown(id="tokens-checkpoint-b", placeholder="(none)", clearable=True)]),
            html.Div([html.Label("colour by"),
                      dcc.RadioItems(id="tokens-color", value=query_value(query, "color", ["drift", "entropy"], "drift"),
                                     inline=True,
                                     options=[{"label": " drift (KL) ", "value": "drift"},
                                              {"label": " reference entropy", "value": "entropy"}])]),
            html.Div([html.Label("colour scale"),
                      dcc.RadioItems(id="tokens-scale", value=query_value(query, "scale", ["fitted", "global"],
                                                                          "fitted"), inline=True,
                                     options=[{"label": " fitted to this view ", "value": "fitted"},
                                              {"label": " global (whole probe set) ", "value": "global"}])],
                     title="fitted: the 1st-99th percentile of the values shown; global: one scale for every "
                           "sequence and checkpoint of the probe set"),
        ], className="controls"),
        html.P(helps[probe], className="note", id="tokens-probe-help"),
        html.P(className="note", id="tokens-run-note"),
        html.Div(id="tokens-legend", className="tokens-legend"),
        html.Div([
            html.Div([html.H4(id="tokens-title-a"), html.Div(id="tokens-text", className="token-text")],
                     className="token-panel"),
            html.Div([html.H4(id="tokens-title-b"), html.Div(id="tokens-text-b", className="token-text")],
                     className="token-panel", id="tokens-panel-b", style={"display": "none"}),
        ], className="token-panels"),
        html.Div(html.P("Click a token to pin its details here.", className="note"), id="tokens-detail",
                 className="token-detail"),
        _prompt_box(),
        dcc.Store(id="tokens-render"), dcc.Store(id="tokens-pin", data=query_pin(query)), dcc.Store(id="tokens-drawn"),
        dcc.Store(id="tokens-curves-of"),
        html.Div([
            html.Div([
                html.H3("Most drifted"),
                dcc.RadioItems(id="tokens-rank-by", value=query_value(query, "rank", ["sequences", "positions"],
                                                                      "sequences"), inline=True,
                               options=[{"label": " sequences ", "value": "sequences"},
                                        {"label": " positions (top 200) ", "value": "positions"}]),
                html.P("Sortable; click a row to open its token (a sequence opens at its largest KL).",
                       className="note"),
                _table("tokens-rank", RANK_COLUMNS[query_value(query, "rank", ["sequences", "positions"], "sequences")]),
            ], style={"flex": "3 1 40em", "minWidth": 0}),
            html.Div([
                html.H3("Top substitutions at flips"),
                html.P("Reference's top-1 → checkpoint's top-1, counted over the probe set.", className="note"),
                _table("tokens-subst", SUBST_COLUMNS),
            ], style={"flex": "2 1 28em", "minWidth": 0}),
        ], style={"display": "flex", "flexWrap": "wrap", "gap": "1.5em"}),
        html.Div([
            dcc.Graph(id="tokens-scatter", style={"flex": "1 1 28em"}),
            dcc.Graph(id="tokens-concentration", style={"flex": "1 1 28em"}),
        ], style={"display": "flex", "flexWrap": "wrap", "gap": "1em"}),
        html.H3("Summary"),
        html.Div(id="tokens-summary"),
        dcc.Graph(id="tokens-strata"),
        *_signatures_section(),
    ])


def _signatures_section() -> list[Any]:
    """SFT vs RL (and stages, consolidations): each update's drift signature, from `aclarena-diag signatures`."""
    from aclarena.figures.signatures import KIND_COLORS

    return [
        html.H3("Drift signatures of updates: SFT vs RL"),
        html.P("Each update (an SFT phase, an RL phase, a whole stage, a consolidation) measured on its parent's own "
               "generations of its domain; bars are 95% bootstrap intervals over sequences, black ticks the chance "
               "share. Made by `aclarena-diag signatures`.", className="note"),
        dcc.Checklist(id="tokens-sig-kinds", options=list(KIND_COLORS), value=["sft", "rl"], inline=True),
        html.Div(id="tokens-sig-note", className="note"),
        dcc.Graph(id="tokens-signatures"),
        html.Div(id="tokens-sig-table"),
    ]


# --- callback bodies (tests call these directly) ------------------------------------------------


@per_store()
def on_probe(run_dir: Path, probe: str | None) -> tuple[list[dict[str, Any]], int | None, list[str], str | None,
                                                         html.Table | html.P]:
    """Sequence and checkpoint choices of a probe set, and its summary table."""
    from aclarena.figures.tokens import (
        SUMMARY_COLUMNS,
        SUMMARY_TIPS,
        fmt,
        sequence_labels,
    )
    from aclarena.results.tokens import list_checkpoints, summary_rows

    with reader(run_dir) as r:
        if r is None or probe is None:
            return [], None, [], None, html.P("no token scores", className="note")
        m = manifest(run_dir)
        labels = sequence_labels(r, probe)
        ckpts = list_checkpoints(r, probe, m)
        rows = summary_rows(r, probe, m, with_flags=True)
    table = html.Table(
        [html.Tr([html.Th(h, title=SUMMARY_TIPS.get(k)) for k, h in SUMMARY_COLUMNS])]
        + [html.Tr([html.Td(fmt(row.get(k))) for k, _ in SUMMARY_COLUMNS],
                   className="flagged" if row.get("n_nonfinite") else None) for row in rows],
        className="simple", id="tokens-summary-table",
    )
    options = [{"label": lab, "value": i} for i, lab in enumerate(labels)]
    return options, 0 if options else None, ckpts, (ckpts[-1] if ckpts else None), table


@per_store()
def probe_notes(run_dir: Path, probe: str | None) -> tuple[str, str]:
    """What the probe set is, and its run note: the KL share at high-entropy positions of the last stage
    checkpoint scored on it (else the last checkpoint), beside the study's."""
    from aclarena.diagnostics.run_notes import probe_help, tokens_note
    from aclarena.results.tokens import reference_name, summary_rows

    if probe is None:
        return "", ""
    m = manifest(run_dir)
    with reader(run_dir) as r:
        if r is None:
            return "", ""
        rows = summary_rows(r, probe, m)
        ref = reference_name(r, probe)
    kinds = {c.name: c.kind for c in m}
    stages = [row for row in rows if kinds.get(row["checkpoint"]) == "stage"]
    row = (stages or rows)[-1] if rows else None
    return probe_help(probe, ref, [c.name for c in m]), tokens_note(probe, row)


def _prompt_box() -> html.Details:
    names = [s.name for s in manifest(current_run())]
    return html.Details([
        html.Summary("Score your own prompt"),
        html.P("Runs the text through this probe set's reference and a checkpoint, teacher-forced on the CPU "
               "(small models only: a larger one is refused with its size; loaded on first use, two kept loaded), "
               "and colours its tokens as above.", className="note"),
        dcc.Textarea(id="tokens-prompt-text", placeholder="type a prompt, e.g. what is 3 + 4?",
                     style={"width": "100%", "height": "4em"}),
        html.Div([
            html.Div([html.Label("checkpoint"),
                      dcc.Dropdown(id="tokens-prompt-checkpoint", options=names,
                                   placeholder="(the checkpoint chosen above)")], style={"minWidth": "16em"}),
            html.Button("score", id="tokens-prompt-go", n_clicks=0),
        ], className="controls"),
        html.P(id="tokens-prompt-note", className="note"),
        html.Div(id="tokens-prompt-html", className="token-text"),
        dcc.Store(id="tokens-prompt-render"),
    ], id="tokens-prompt", className="token-detail")


def on_prompt(run_dir: Path, text: str | None, checkpoint: str | None, probe: str | None,
              color_by: str = "drift") -> dict[str, Any]:
    """Score a typed prompt against the probe set's reference: ``{"html", "note"}`` (the coloured
    tokens on the probe set's colour scale, or "" and the one-line reason it was refused)."""
    from aclarena.dashboard.data import prompt_scorer
    from aclarena.errors import AclarenaError
    from aclarena.figures.token_explore import colour_scale, text_html
    from aclarena.figures.tokens import tokens_from_scores
    from aclarena.results.tokens import list_checkpoints, reference_name

    if probe is None:
        return {"html": "", "note": "no probe set: run `aclarena-diag tokens` first"}
    with reader(run_dir) as r:
        if r is None:
            return {"html": "", "note": "no token scores in this run"}
        reference = reference_name(r, probe)
        scale = colour_scale(r, probe, color_by, list_checkpoints(r, probe))
    if not checkpoint:
        return {"html": "", "note": "choose a checkpoint to compare with the reference"}
    score_prompt = prompt_scorer()
    if score_prompt is None:
        return {"html": "", "note": "live prompt scoring is off in this app; `aclarena-diag dashboard` turns it on"}
    try:
        ps = score_prompt(run_dir, text, reference, checkpoint)
    except AclarenaError as e:  # PromptRefused (empty prompt, model too large) included
        return {"html": "", "note": f"not scored: {str(e).splitlines()[0]}"}
    import numpy as np

    tokens = tokens_from_scores(ps.pieces, ps.scores, ps.words)
    kl = np.asarray(ps.scores.kl, dtype=float)
    flips = int(np.count_nonzero(ps.scores.top1 != ps.scores.ref.top1))
    note = (f"{checkpoint} against {reference}: {len(ps.ids)} tokens, {len(kl)} scored; mean KL "
            f"{np.nanmean(kl):.4g} nats, largest {np.nanmax(kl):.4g}; {flips} top-1 flips. Colours on this probe "
            "set's scale (hover a token for its values).")
    return {"html": text_html(tokens, color_by, scale, pinnable=False), "note": "; ".join([note, *ps.notes])}


@per_store()
def on_signatures(run_dir: Path, kinds: list[str] | None) -> tuple[Any, html.Table | str, str]:
    """The signatures figure, its table and a note, for the update kinds ticked."""
    from aclarena.figures.signatures import TABLE_COLUMNS, ordered_rows, signature_rows, signatures_figure
    from aclarena.figures.tokens import fmt

    order = [c.name for c in manifest(run_dir)]
    with reader(run_dir) as r:
        rows = ordered_rows(signature_rows(r, kinds or None), order)
        every = signature_rows(r)
    if not rows:
        what = "none of the kinds ticked" if every else "none in this run"
        return {}, "", f"drift signatures: {what}; run `aclarena-diag signatures --run DIR`"
    table = html.Table(
        [html.Tr([html.Th(h) for _, h in TABLE_COLUMNS])]
        + [html.Tr([html.Td(fmt(row.get(k)) if k in ("update", "kind", "domain", "n_sequences", "high_share",
                                                      "first_k_share") else
                            f"{fmt(row[k])} [{fmt(row[k + '_low'])}, {fmt(row[k + '_high'])}]")
                    for k, _ in TABLE_COLUMNS]) for row in rows],
        className="simple", id="tokens-sig-table-rows")
    return signatures_figure(rows, order), table, f"{len(rows)} of {len(every)} signed updates shown"


@per_store()
def strata(run_dir: Path, probe: str | None) -> Any:
    """Mean KL and flip rate at high- vs low-entropy positions per checkpoint (the export's tokens/strata)."""
    from aclarena.figures.tokens import strata_figure

    with reader(run_dir) as r:
        if r is None or probe is None:
            return {}
        return strata_figure(r, probe, manifest(run_dir))


def colour_bar(scale: tuple[float, float], color_by: str, checkpoint: str | None,
               whole: tuple[float, float] | None = None) -> html.Div:
    """The colour bar above the text: gradient, ticks and what the colours mean (``whole``: the probe
    set's global scale, given when ``scale`` is fitted to the view)."""
    from aclarena.figures.token_explore import DRIFT_RGB, ENTROPY_RGB, colour_ticks, rgba

    rgb = ENTROPY_RGB if color_by == "entropy" else DRIFT_RGB
    gradient = f"linear-gradient(to right, {rgba(0.0, rgb)}, {rgba(0.5, rgb)}, {rgba(1.0, rgb)})"
    ticks = [html.Span(label, className="tick", style={"left": f"{100 * f:.1f}%"})
             for f, label in colour_ticks(scale, color_by)]
    if whole is not None:
        unit = "reference entropy (nats)" if color_by == "entropy" else "KL(p_ref ‖ p_ckpt) in nats, log scale"
        what = (f"{unit}, fitted to this view: the 1st-99th percentile of the values shown ({scale[0]:.3g} to "
                f"{scale[1]:.3g}); the probe set's global scale is {whole[0]:.3g} to {whole[1]:.3g} "
                "(colour scale: global)")
    elif color_by == "entropy":
        what = "reference entropy (nats), 0 to the probe set's largest"
    else:
        what = (f"KL(p_ref ‖ p_ckpt) in nats, log scale, one scale for every sequence and checkpoint "
                f"of this probe set (largest {scale[1]:.3g})")
    return html.Div([
        html.Div([html.Div(className="bar", style={"background": gradient}), html.Div(ticks, className="ticks")],
                 className="colour-bar", id="tokens-colour-bar"),
        html.Span(what, className="note"),
        html.Span([html.Span("flip", className="tok flip sample"), " top-1 changed · ",
                   html.Span("x", className="tok sample", style={"backgroundColor": "#222", "color": "#fff"}),
                   " flagged (non-finite) · ", html.Span("grey", className="tok unscored sample"),
                   " context (not scored) · ", html.Span("·", className="ws"), " space ",
                   html.Span("↵", className="ws"), " newline ", html.Span("⟨b⟩", className="ws"),
                   " byte piece of a multi-byte character"], className="note key"),
    ], id="tokens-legend-inner")


@per_store()
def on_view(run_dir: Path, probe: str | None, seq: int | None, checkpoint: str | None, color_by: str,
            checkpoint_b: str | None = None, scale_mode: str = "global") -> tuple[dict[str, Any], Any]:
    """The coloured text of one sequence (HTML, for ``checkpoint`` and optionally ``checkpoint_b`` on
    the same scale) and the colour bar; ``scale_mode`` "global" (one scale for the probe set) or
    "fitted" (the 1st-99th percentile of the values shown; the page's default)."""
    from aclarena.figures.token_explore import colour_scale, fitted_scale, text_html
    from aclarena.figures.tokens import sequence_tokens
    from aclarena.results.tokens import list_checkpoints

    if probe is None or seq is None:
        return {}, ""
    with reader(run_dir) as r:
        if r is None:
            return {}, ""
        ckpts = list_checkpoints(r, probe)
        scale = colour_scale(r, probe, color_by, ckpts)
        out: dict[str, Any] = {"seq": int(seq)}
        shown = {side: sequence_tokens(r, probe, int(seq), name)
                 for side, name in (("a", checkpoint), ("b", checkpoint_b)) if side == "a" or name}
    whole = scale
    if scale_mode == "fitted":
        values = [t.entropy if color_by == "entropy" else t.kl for ts in shown.values() for t in ts if t.scored]
        scale = fitted_scale(values, color_by, scale)
    for side, tokens in shown.items():
        name = checkpoint if side == "a" else checkpoint_b
        out[side] = text_html(tokens, color_by, scale)
        out[f"title_{side}"] = f"{name}" if color_by == "drift" else f"{name} (colour: reference entropy)"
    return out, colour_bar(scale, color_by, checkpoint, None if scale_mode != "fitted" else whole)


@per_store()
def on_rank(run_dir: Path, probe: str | None, checkpoint: str | None, by: str) -> tuple[Any, ...]:
    """The most-drifted table (``by`` sequences or positions: data, columns, header tips) and the
    substitutions table's data."""
    from aclarena.figures.token_explore import rank_positions, rank_sequences, substitutions
    from aclarena.figures.tokens import sequence_labels

    cols, tips = _columns(RANK_COLUMNS[by])
    if probe is None or checkpoint is None:
        return [], cols, tips, []
    with reader(run_dir) as r:
        if r is None:
            return [], cols, tips, []
        if by == "positions":
            rows = rank_positions(r, probe, checkpoint)
            for row in rows:
                row["flipped"] = "yes" if row["flipped"] else ""
        else:
            rows = rank_sequences(r, probe, checkpoint, sequence_labels(r, probe))
        subst = substitutions(r, probe, checkpoint)
    return rows, cols, tips, subst


def _num(v: float, spec: str = ".4g") -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def _topk_table(title: str, items: list[tuple[str, float]], mark: str | None) -> html.Table:
    return html.Table(
        [html.Tr([html.Th(title, colSpan=3)]), html.Tr([html.Th("token"), html.Th("log p"), html.Th("p")])]
        + [html.Tr([html.Td(w, className="mono"), html.Td(f"{lp:.3f}"), html.Td(f"{math.exp(lp):.3f}")],
                   className="hit" if w == mark else None) for w, lp in items],
        className="simple topk",
    )


@per_store()
def on_detail(run_dir: Path, probe: str | None, pin: dict[str, Any] | None, checkpoint: str | None,
              checkpoint_b: str | None = None) -> Any:
    """The pinned token's panel: values for each shown checkpoint, both top-k lists, KL rank."""
    from aclarena.figures.token_explore import sequence_ids, token_detail
    from aclarena.figures.tokens import sequence_tokens

    if not pin or probe is None or checkpoint is None:
        return html.P("Click a token to pin its details here.", className="note")
    seq, pos = int(pin["seq"]), int(pin["pos"])
    with reader(run_dir) as r:
        if r is None:
            return html.P("no token scores", className="note")
        try:
            ids = sequence_ids(r, probe, seq)
            details = [(c, token_detail(sequence_tokens(r, probe, seq, c), pos, ids))
                       for c in (checkpoint, checkpoint_b) if c]
        except IndexError:
            return html.P(f"sequence {seq} is not in probe set {probe}", className="note")
    if not details or details[0][1] is None:
        return html.P(f"token {pos} is not in sequence {seq}", className="note")
    d0 = details[0][1]
    head = html.H4(["Pinned: sequence #", str(seq), ", token ", str(pos), " ",
                    html.Span(d0["text"], className="mono pinned-text"), f" (id {d0.get('id')})"],
                   id="tokens-detail-title")
    if not d0["scored"]:
        return html.Div([head, html.P("Context token (prompt, user or tool turn): not scored.", className="note")])
    rows = [("reference entropy (nats)", _num(d0["entropy"])), ("log p(token), reference", _num(d0["ref_logprob"]))]
    tables = [_topk_table("reference's top-k", d0["ref_top"], d0["text"])]
    for c, d in details:
        assert d is not None
        rank = f"{d['rank']} of {d['n_ranked']}" if "rank" in d else "-"
        rows += [(f"log p(token), {c}", _num(d["logprob"])),
                 (f"Δ log p, {c}", _num(d["logprob"] - d["ref_logprob"], "+.4g")),
                 (f"KL(p_ref ‖ p_{c}) (nats)", _num(d["kl"])), (f"JS, {c} (nats)", _num(d["js"])),
                 (f"top-1 flipped, {c}", "yes" if d["flipped"] else "no"),
                 (f"KL rank in this sequence, {c}", rank)]
        tables.append(_topk_table(f"{c}'s top-k", d["ckpt_top"], d["text"]))
    values = html.Table([html.Tr([html.Th(k), html.Td(v)]) for k, v in rows], className="simple",
                        id="tokens-detail-values")
    return html.Div([head, html.Div([values, *tables], className="detail-row")])


def highlight(run_dir: Path, probe: str | None, checkpoint: str | None) -> Any:
    """A patch of the concentration figure that widens ``checkpoint``'s curve (the curves themselves
    change only with the probe set, so a checkpoint change sends a few bytes, not the figure)."""
    from dash import Patch

    from aclarena.results.tokens import list_checkpoints

    if probe is None:
        return no_update
    with reader(run_dir) as r:
        if r is None:
            return no_update
        names = list_checkpoints(r, probe, manifest(run_dir))
    patch = Patch()
    for i, name in enumerate(names):
        patch["data"][i + 1]["line"]["width"] = 4 if name == checkpoint else 2  # trace 0: the diagonal
    return patch


@per_store()
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
        return scatter_spec(r, probe, checkpoint, gl=True), concentration_spec(r, probe, m, highlight=checkpoint)


@per_store()
def _scatter(run_dir: Path, probe: str, checkpoint: str) -> Any:
    from aclarena.figures.tokens import scatter_spec

    with reader(run_dir) as r:
        return scatter_spec(r, probe, checkpoint, gl=True) if r is not None else None


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    @app.callback(
        Output("tokens-sequence", "options"), Output("tokens-sequence", "value"),
        Output("tokens-checkpoint", "options"), Output("tokens-checkpoint", "value"),
        Output("tokens-checkpoint-b", "options"), Output("tokens-checkpoint-b", "value"),
        Output("tokens-summary", "children"), Output("tokens-probe-help", "children"),
        Output("tokens-run-note", "children"),
        Input("tokens-probe", "value"), State("tokens-query", "data"),
    )
    def _probe(probe: str | None, initial: dict[str, Any] | None) -> tuple[Any, ...]:
        options, value, ckpts, ckpt, table = on_probe(run_dir, probe)
        b = None
        if initial and initial.get("probe") == probe:  # a shared or reloaded view
            if initial.get("seq") is not None and 0 <= initial["seq"] < len(options):
                value = initial["seq"]
            ckpt = initial["checkpoint"] if initial.get("checkpoint") in ckpts else ckpt
            b = initial["b"] if initial.get("b") in ckpts else None
        return (options, value, ckpts, ckpt, ckpts, b, table, *probe_notes(run_dir, probe))

    @app.callback(
        Output("tokens-prompt-render", "data"), Output("tokens-prompt-note", "children"),
        Input("tokens-prompt-go", "n_clicks"),
        State("tokens-prompt-text", "value"), State("tokens-prompt-checkpoint", "value"),
        State("tokens-checkpoint", "value"), State("tokens-probe", "value"), State("tokens-color", "value"),
        prevent_initial_call=True,
    )
    def _prompt(_n: int, text: str | None, checkpoint: str | None, shown: str | None, probe: str | None,
                color_by: str | None) -> tuple[Any, str]:
        out = on_prompt(run_dir, text, checkpoint or shown, probe, color_by or "drift")
        return out["html"], out["note"]

    app.clientside_callback(
        ClientsideFunction("tokens", "putPrompt"),
        Output("tokens-prompt-html", "title"), Input("tokens-prompt-render", "data"), prevent_initial_call=True)

    @app.callback(Output("tokens-signatures", "figure"), Output("tokens-sig-table", "children"),
                  Output("tokens-sig-note", "children"), Input("tokens-sig-kinds", "value"))
    def _signatures(kinds: list[str] | None) -> tuple[Any, Any, str]:
        return on_signatures(run_dir, kinds)

    @app.callback(Output("tokens-strata", "figure"), Input("tokens-probe", "value"))
    def _strata(probe: str | None) -> Any:
        return strata(run_dir, probe)

    keep_in_url(app, "tokens-url", {
        "probe": ("tokens-probe", "value"), "seq": ("tokens-sequence", "value"),
        "checkpoint": ("tokens-checkpoint", "value"), "b": ("tokens-checkpoint-b", "value"),
        "color": ("tokens-color", "value"), "scale": ("tokens-scale", "value"), "rank": ("tokens-rank-by", "value"),
        "pin": ("tokens-pin", "data")})

    @app.callback(
        Output("tokens-render", "data"), Output("tokens-legend", "children"),
        Input("tokens-probe", "value"), Input("tokens-sequence", "value"), Input("tokens-checkpoint", "value"),
        Input("tokens-color", "value"), Input("tokens-checkpoint-b", "value"), Input("tokens-scale", "value"),
    )
    def _view(probe: str | None, seq: int | None, checkpoint: str | None, color_by: str,
              checkpoint_b: str | None, scale_mode: str | None) -> tuple[Any, ...]:
        render, legend = on_view(run_dir, probe, seq, checkpoint, color_by, checkpoint_b, scale_mode or "fitted")
        render = {**render, "version": f"{probe}|{seq}|{checkpoint}|{checkpoint_b}|{color_by}|{scale_mode}"}
        return render, legend

    app.clientside_callback(
        ClientsideFunction("tokens", "drawText"),
        Output("tokens-title-a", "children"), Output("tokens-title-b", "children"),
        Output("tokens-panel-b", "style"), Output("tokens-drawn", "data"),
        Input("tokens-render", "data"), Input("tokens-pin", "data"),
    )

    @app.callback(
        Output("tokens-rank", "data"), Output("tokens-rank", "columns"), Output("tokens-rank", "tooltip_header"),
        Output("tokens-subst", "data"),
        Input("tokens-probe", "value"), Input("tokens-checkpoint", "value"), Input("tokens-rank-by", "value"),
    )
    def _rank(probe: str | None, checkpoint: str | None, by: str) -> tuple[Any, ...]:
        return on_rank(run_dir, probe, checkpoint, by)

    app.clientside_callback(
        ClientsideFunction("tokens", "jump"),
        Output("tokens-sequence", "value", allow_duplicate=True), Output("tokens-pin", "data", allow_duplicate=True),
        Input("tokens-rank", "active_cell"), Input("tokens-subst", "active_cell"), Input("tokens-scatter", "clickData"),
        State("tokens-rank", "data"), State("tokens-subst", "data"), prevent_initial_call=True,
    )

    @app.callback(
        Output("tokens-detail", "children"),
        Input("tokens-pin", "data"), Input("tokens-checkpoint", "value"), Input("tokens-checkpoint-b", "value"),
        State("tokens-probe", "value"),
    )
    def _detail(pin: Any, checkpoint: str | None, checkpoint_b: str | None, probe: str | None) -> Any:
        return on_detail(run_dir, probe, pin, checkpoint, checkpoint_b)

    @app.callback(
        Output("tokens-scatter", "figure"), Output("tokens-concentration", "figure"),
        Output("tokens-curves-of", "data"),
        Input("tokens-probe", "value"), Input("tokens-checkpoint", "value"), State("tokens-curves-of", "data"),
    )
    def _checkpoint(probe: str | None, checkpoint: str | None, drawn: str | None) -> tuple[Any, ...]:
        if drawn is not None and drawn == probe and checkpoint is not None:
            scatter = _scatter(run_dir, probe, checkpoint)  # the curves are drawn: only the highlight moves
            return scatter if scatter is not None else no_update, highlight(run_dir, probe, checkpoint), no_update
        scatter, curves = on_checkpoint(run_dir, probe, checkpoint)
        return scatter, curves, probe if curves.get("data") else None
