"""Token-level drift figures and the data behind the dashboard's Tokens page.

Reads what ``aclarena-diag tokens`` stored through :mod:`aclarena.results.tokens`:
one sequence's rows, one checkpoint's arrays, the small summaries — never a whole file.
Builders return plotly figures; :func:`sequence_tokens` returns per-token records for the
coloured text (HTML, built by the page).

Exported figures: ``tokens/concentration`` (per probe set), ``tokens/strata`` (mean KL and
flip rate on high- vs low-entropy positions), ``tokens/scatter`` (per probe set and
checkpoint) and ``tokens/summary`` (the table).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from aclarena.figures import register_figure
from aclarena.figures.palette import SERIES, TEMPLATE
from aclarena.results.probes import probe_key
from aclarena.results.tokens import (
    DIST_FIELDS,
    list_checkpoints,
    list_probes,
    read_summary,
    reference_columns,
    reference_name,
    row_offsets,
    scores_columns,
    sequence_values,
    summary_rows,
)

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

#: At most this many points in a scatter (SVG stays responsive); the rest is sampled, seeded.
MAX_SCATTER_POINTS = 4000
KL_FLOOR = 1e-7  # log axes need a floor: KL below it is drawn at it
PALETTE = list(SERIES)


# --- reading ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _vocab_cached(path: str, mtime_ns: int, probe: str) -> tuple[str, ...]:
    from aclarena.store.results import ResultsStore

    store = ResultsStore(os.path.dirname(path))
    with store.reader() as r:
        key = f"{probe_key(probe)}/vocab"
        return tuple(r.read(key)) if r.has(key) else ()


def vocab(reader: StoreReader, probe: str) -> tuple[str, ...]:
    """The probe set's token texts by id (read once per file version, then cached)."""
    path = str(reader.path)
    return _vocab_cached(path, os.stat(path).st_mtime_ns, probe)


def sequence_labels(reader: StoreReader, probe: str) -> list[str]:
    """A short label per sequence: its index, scored count and the start of its last user turn or prompt."""
    import json

    sources = reader.read(f"{probe_key(probe)}/source")
    offsets = row_offsets(reader, probe)
    labels = []
    for i, src in enumerate(sources):
        text = ""
        if isinstance(src, dict):
            if "prompt" in src:
                text = str(src["prompt"])
            else:
                users = [m.get("content") or "" for m in src.get("messages", []) if m.get("role") == "user"]
                text = users[0] if users else json.dumps(src)[:60]
        text = " ".join(text.split())
        labels.append(f"#{i} ({int(offsets[i + 1] - offsets[i])} scored) {text[:70]}")
    return labels


@dataclass(frozen=True)
class TokenView:
    """One token of a sequence as the Tokens page shows it."""

    text: str
    scored: bool
    entropy: float = math.nan
    ref_logprob: float = math.nan
    logprob: float = math.nan
    kl: float = math.nan
    js: float = math.nan
    flipped: bool = False
    status: int = 0
    alternatives: tuple[tuple[str, float], ...] = ()
    ref_alternatives: tuple[tuple[str, float], ...] = ()


def sequence_tokens(reader: StoreReader, probe: str, seq: int, checkpoint: str | None) -> list[TokenView]:
    """Every token of sequence ``seq`` with the reference's and ``checkpoint``'s values at scored ones."""
    pkey = probe_key(probe)
    n_rows = reader.shape(f"{pkey}/ids/offsets")[0] - 1
    if not 0 <= seq < n_rows:
        raise IndexError(f"sequence {seq} out of range (0..{n_rows - 1})")
    o = reader.slice(f"{pkey}/ids/offsets", slice(seq, seq + 2))
    texts = [t.decode() if isinstance(t, bytes) else str(t)
             for t in reader.slice(f"{pkey}/token_text", slice(int(o[0]), int(o[1])))]
    scored = reader.slice(f"{pkey}/scored/values", slice(int(o[0]), int(o[1]))).tolist()
    ref = sequence_values(reader, probe, None, DIST_FIELDS, seq)
    ck: dict[str, list[Any]] = {}
    if checkpoint is not None:
        ck = sequence_values(reader, probe, checkpoint,
                             ("logprob", "kl", "js", "top1", "topk_ids", "topk_logprobs", "status"), seq)
    voc = vocab(reader, probe)
    nv = len(voc)

    def alts(ids: list[int], lps: list[float]) -> tuple[tuple[str, float], ...]:
        return tuple((voc[i] if 0 <= i < nv else f"<{i}>", lp) for i, lp in zip(ids, lps, strict=True))

    out: list[TokenView] = []
    j = 0
    for t, text in enumerate(texts):
        if not scored[t]:
            out.append(TokenView(text=text, scored=False))
            continue
        ralts = alts(ref["topk_ids"][j], ref["topk_logprobs"][j])
        if ck:
            out.append(TokenView(
                text=text, scored=True, entropy=ref["entropy"][j], ref_logprob=ref["logprob"][j],
                logprob=ck["logprob"][j], kl=ck["kl"][j], js=ck["js"][j], flipped=ck["top1"][j] != ref["top1"][j],
                status=ck["status"][j], alternatives=alts(ck["topk_ids"][j], ck["topk_logprobs"][j]),
                ref_alternatives=ralts))
        else:
            out.append(TokenView(text=text, scored=True, entropy=ref["entropy"][j], ref_logprob=ref["logprob"][j],
                                 ref_alternatives=ralts))
        j += 1
    return out


def tokens_from_scores(pieces: list[str], scores: Any, words: dict[int, str]) -> list[TokenView]:
    """The tokens of one scored sequence held in memory (a ``TokenScores`` of one sequence whose
    scored positions are every token but the first, as the Tokens page's prompt box makes them),
    with ``words`` the text of each top-k id."""
    out = [TokenView(text=pieces[0], scored=False)] if pieces else []
    ref = scores.ref

    def alts(ids: Any, lps: Any) -> tuple[tuple[str, float], ...]:
        return tuple((words.get(int(i), f"<{int(i)}>"), float(lp)) for i, lp in zip(ids, lps, strict=True) if i >= 0)

    for j, text in enumerate(pieces[1:]):
        out.append(TokenView(
            text=text, scored=True, entropy=float(ref.entropy[j]), ref_logprob=float(ref.logprob[j]),
            logprob=float(scores.logprob[j]), kl=float(scores.kl[j]), js=float(scores.js[j]),
            flipped=bool(scores.top1[j] != ref.top1[j]), status=int(scores.status[j]),
            alternatives=alts(scores.topk_ids[j], scores.topk_logprobs[j]),
            ref_alternatives=alts(ref.topk_ids[j], ref.topk_logprobs[j])))
    return out


@functools.lru_cache(maxsize=4)
def _template(name: str = TEMPLATE) -> dict[str, Any]:
    """A plotly template as a plain dict (naming it per figure deep-copies it each time: ~0.1 s)."""
    import plotly.io as pio

    return pio.templates[name].to_plotly_json()


def _points(reader: StoreReader, probe: str, checkpoint: str) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Reference entropy and this checkpoint's KL at a seeded sample of the valid positions, and
    the sample's flat indices."""
    h = reference_columns(reader, probe, ("entropy",))["entropy"]
    kl = scores_columns(reader, probe, checkpoint, ("kl",))["kl"]
    valid = np.isfinite(h) & np.isfinite(kl)
    ok = np.flatnonzero(valid)
    if len(ok) > MAX_SCATTER_POINTS:
        # keep the largest drifts (the story) and a uniform sample of the rest
        n_top = MAX_SCATTER_POINTS // 10
        top = ok[np.argpartition(-kl[ok], n_top)[:n_top]]
        valid[top] = False
        rest = np.flatnonzero(valid)
        rng = np.random.default_rng(0)
        pick = np.sort(np.concatenate([top, rest[rng.choice(len(rest), MAX_SCATTER_POINTS - n_top, replace=False)]]))
    else:
        pick = ok
    return h[pick], kl[pick], len(ok), pick


def _round(a: np.ndarray, digits: int = 4) -> list[float]:
    """Values rounded to ``digits`` significant digits, as a list (finite inputs)."""
    a = np.asarray(a, dtype=np.float64)
    if not len(a):
        return []
    mag = np.floor(np.log10(np.where(a != 0, np.abs(a), 1.0)))
    scale = 10.0 ** (digits - 1 - mag)
    return (np.round(a * scale) / scale).tolist()


# --- figures ----------------------------------------------------------------------------------
# The *_spec functions return plain figure dicts: the dashboard sends them as they are (no
# plotly validation on every callback); the *_figure functions wrap them for export.


def scatter_spec(reader: StoreReader, probe: str, checkpoint: str, *, gl: bool = False) -> dict[str, Any]:
    """Reference entropy (x) against KL(p_ref ‖ p_ckpt) (y, log) at every scored position; each
    point's ``customdata`` is [sequence, token index] (a click on the page jumps there). ``gl``: drawn
    with WebGL (the dashboard: thousands of SVG markers took most of a checkpoint change to draw)."""
    x, y, n, pick = _points(reader, probe, checkpoint)
    ref_offsets = row_offsets(reader, probe)
    where = np.stack([np.searchsorted(ref_offsets, pick, side="right") - 1,
                      reference_columns(reader, probe, ("position",))["position"][pick]], axis=1).astype(int)
    summary = read_summary(reader, probe, checkpoint).summary
    thr = summary.get("entropy_threshold")
    high = x >= thr if thr is not None else np.zeros(len(x), bool)
    data = []
    for mask, name, color in ((~high, "low entropy", "#7f7f7f"), (high, "high entropy", "#d62728")):
        data.append(dict(
            # 4 significant digits: a third of the JSON of full floats, and nothing a screen can show is lost
            type="scattergl" if gl else "scatter", x=_round(x[mask]), y=_round(np.maximum(y[mask], KL_FLOOR)), mode="markers", name=name,
            marker=dict(size=5, color=color, opacity=0.6), customdata=where[mask].tolist(),
            hovertemplate="entropy %{x:.3f} nats<br>KL %{y:.3g} nats<br>sequence #%{customdata[0]}, "
                          "token %{customdata[1]} (click to open)<extra></extra>",
        ))
    shapes, notes = [], []
    if thr is not None:
        shapes.append(dict(type="line", xref="x", yref="paper", x0=thr, x1=thr, y0=0, y1=1,
                           line=dict(color="#d62728", dash="dash")))
        notes.append(dict(xref="x", yref="paper", x=thr, y=1, xanchor="left", yanchor="bottom", showarrow=False,
                          text=f"{summary.get('high')}: {thr:.2f} nats"))
    shown = f"{len(x):,} of {n:,} positions" if len(x) < n else f"{n:,} positions"
    return dict(data=data, layout=dict(
        title=dict(text=f"Entropy vs drift: {checkpoint} against {reference_name(reader, probe)} ({shown})"),
        xaxis=dict(title=dict(text="reference entropy (nats)")),
        yaxis=dict(title=dict(text="KL(p_ref ‖ p_ckpt) (nats)"), type="log", exponentformat="power"),
        template=_template(), legend=dict(orientation="h", y=-0.2), shapes=shapes, annotations=notes,
    ))


def scatter_figure(reader: StoreReader, probe: str, checkpoint: str) -> go.Figure:
    return go.Figure(scatter_spec(reader, probe, checkpoint))


def concentration_spec(reader: StoreReader, probe: str, manifest: Manifest | None = None,
                       highlight: str | None = None) -> dict[str, Any]:
    """Cumulative share of KL against share of positions ranked by reference entropy, every checkpoint."""
    data: list[dict[str, Any]] = [dict(type="scatter", x=[0, 1], y=[0, 1], mode="lines",
                                       name="no concentration (area 0.5)", line=dict(color="#bbb", dash="dot"),
                                       hoverinfo="skip")]
    rows = summary_rows(reader, probe, manifest)
    from aclarena.figures.vectors import distinct_colours

    colours = distinct_colours(len(rows))
    for i, s in enumerate(rows):
        yv = [None if v is None else v for v in s["curve_y"]]
        area = s.get("concentration_area")
        label = f"{s['checkpoint']} (area {area:.2f})" if area is not None else f"{s['checkpoint']} (no drift)"
        data.append(dict(
            type="scatter", x=s["curve_x"], y=yv, mode="lines", name=label,
            line=dict(color=colours[i], width=4 if s["checkpoint"] == highlight else 2),
            hovertemplate=f"{s['checkpoint']}<br>top %{{x:.0%}} by entropy hold %{{y:.0%}} of KL<extra></extra>",
        ))
    shapes, notes = [], []
    q = rows[0].get("high") if rows else None
    if q and str(q).startswith("q="):
        xq = float(str(q)[2:])
        shapes.append(dict(type="line", xref="x", yref="paper", x0=xq, x1=xq, y0=0, y1=1,
                           line=dict(color="#d62728", dash="dash")))
        notes.append(dict(xref="x", yref="paper", x=xq, y=1, xanchor="left", yanchor="bottom", showarrow=False,
                          text=str(q)))
    return dict(data=data, layout=dict(
        title=dict(text=f"Where drift concentrates: against {reference_name(reader, probe)}"),
        xaxis=dict(title=dict(text="share of positions, highest reference entropy first"), tickformat=".0%",
                   range=[0, 1]),
        yaxis=dict(title=dict(text="cumulative share of KL"), tickformat=".0%", range=[0, 1.02]),
        template=_template(), shapes=shapes, annotations=notes,
    ))


def concentration_figure(reader: StoreReader, probe: str, manifest: Manifest | None = None,
                         highlight: str | None = None) -> go.Figure:
    return go.Figure(concentration_spec(reader, probe, manifest, highlight))


def strata_figure(reader: StoreReader, probe: str, manifest: Manifest | None = None) -> go.Figure:
    """Mean KL and flip rate on high- vs low-entropy positions, per checkpoint."""
    from plotly.subplots import make_subplots

    rows = summary_rows(reader, probe, manifest)
    names = [r["checkpoint"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean KL (nats)", "flip rate"))
    for key, label, color in (("high", "high entropy", "#d62728"), ("low", "low entropy", "#7f7f7f")):
        fig.add_trace(go.Bar(x=names, y=[r[f"kl_mean_{key}"] for r in rows], name=label, marker_color=color,
                             legendgroup=key), row=1, col=1)
        fig.add_trace(go.Bar(x=names, y=[r[f"flip_rate_{key}"] for r in rows], name=label, marker_color=color,
                             legendgroup=key, showlegend=False), row=1, col=2)
    fig.update_layout(barmode="group", template=TEMPLATE,
                      title=f"Drift on high- vs low-entropy positions (against {reference_name(reader, probe)})")
    return fig


SUMMARY_COLUMNS = (
    ("checkpoint", "checkpoint"), ("n_valid", "positions"), ("kl_mean", "KL mean"), ("kl_mean_high", "KL high"),
    ("kl_mean_low", "KL low"), ("kl_share_high", "KL share high"), ("flip_rate_high", "flips high"),
    ("flip_rate_low", "flips low"), ("barely_moved_low", "barely moved (low)"),
    ("concentration_area", "conc. area"), ("n_invalid", "excluded"),
)


#: what each summary column means and what a good value looks like (the page's header tooltips)
SUMMARY_TIPS = {
    "checkpoint": "The later checkpoint scored on the reference's frozen generations.",
    "n_valid": "Scored positions with finite values.",
    "kl_mean": "Mean KL(p_ref ‖ p_ckpt) over all positions, nats. 0 = the checkpoint still predicts like the reference.",
    "kl_mean_high": "Mean KL at high-entropy positions (the reference's decision points).",
    "kl_mean_low": "Mean KL at low-entropy positions. Near 0 = settled tokens kept.",
    "kl_share_high": "Share of all KL at high-entropy positions. Above their share of positions = drift concentrates "
                     "at decision points (study (Qwen3-8B): ~6% of positions).",
    "flip_rate_high": "Share of high-entropy positions whose top-1 token changed.",
    "flip_rate_low": "Share of low-entropy positions whose top-1 token changed. Near 0 is good.",
    "barely_moved_low": "Low-entropy positions whose log-prob moved < eps. Study (Qwen3-8B): ~94% barely move.",
    "concentration_area": "Area under the concentration curve: 0.5 = drift unrelated to entropy, 1 = all at the top.",
    "n_invalid": "Positions left out (non-finite logits or beyond the checkpoint's positions). 0 is good.",
}


def fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}"
    return str(value)


def summary_table_figure(reader: StoreReader, probe: str, manifest: Manifest | None = None) -> go.Figure:
    rows = summary_rows(reader, probe, manifest, with_flags=True)
    fig = go.Figure(go.Table(
        header=dict(values=[h for _, h in SUMMARY_COLUMNS], align="left"),
        cells=dict(values=[[fmt(r.get(k)) for r in rows] for k, _ in SUMMARY_COLUMNS], align="left"),
    ))
    fig.update_layout(title=f"Token drift summary against {reference_name(reader, probe)} (probe {probe})")
    return fig


# --- export registry ----------------------------------------------------------------------------


@register_figure("tokens/concentration", "Concentration of drift at high-entropy positions", width=900, height=560)
def _concentration(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    if reader is None:
        return []
    return [(p, concentration_figure(reader, p, manifest)) for p in list_probes(reader)]


@register_figure("tokens/strata", "Drift on high- vs low-entropy positions", width=1000, height=480)
def _strata(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    if reader is None:
        return []
    return [(p, strata_figure(reader, p, manifest)) for p in list_probes(reader)]


@register_figure("tokens/scatter", "Reference entropy vs KL", width=900, height=560)
def _scatter(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    if reader is None:
        return []
    return [(f"{p}-{c}", scatter_figure(reader, p, c)) for p in list_probes(reader)
            for c in list_checkpoints(reader, p, manifest)]


@register_figure("tokens/summary", "Token drift summary table", width=1100, height=420)
def _summary(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    if reader is None:
        return []
    return [(p, summary_table_figure(reader, p, manifest)) for p in list_probes(reader)]
