"""Token-level drift figures and the data behind the dashboard's Tokens page.

Reads what ``aclarena-diag tokens`` stored (keys in :mod:`aclarena.store.token_keys`):
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
from aclarena.store.token_keys import TOKENS, probe_key, reference_key, scores_key, summary_key

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

#: At most this many points in a scatter (SVG stays responsive); the rest is sampled, seeded.
MAX_SCATTER_POINTS = 4000
KL_FLOOR = 1e-7  # log axes need a floor: KL below it is drawn at it
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]


# --- reading ----------------------------------------------------------------------------------


def token_probes(reader: StoreReader | None) -> list[str]:
    """Probe sets that have token scores."""
    if reader is None or not reader.has(TOKENS):
        return []
    return [p for p in reader.keys(TOKENS) if reader.has(reference_key(p)) and reader.has(scores_key(p))]


def token_checkpoints(reader: StoreReader, probe: str, manifest: Manifest | None = None) -> list[str]:
    """Checkpoints scored on ``probe``, in manifest order when a manifest is given."""
    if not reader.has(scores_key(probe)):
        return []
    names = [n for n in reader.keys(scores_key(probe)) if reader.has(summary_key(probe, n))]
    if manifest is not None:
        order = {s.name: i for i, s in enumerate(manifest)}
        names.sort(key=lambda n: (order.get(n, len(order)), n))
    return names


def summaries(reader: StoreReader, probe: str, manifest: Manifest | None = None) -> list[dict[str, Any]]:
    """One dict per checkpoint: its stored summary, ``checkpoint`` and ``n_nonfinite``."""
    rows = []
    for name in token_checkpoints(reader, probe, manifest):
        s = dict(reader.read(f"{summary_key(probe, name)}/summary"))
        attrs = reader.attrs(scores_key(probe, name))
        s["checkpoint"] = name
        s["n_nonfinite"] = int(attrs.get("n_nonfinite", 0))
        rows.append(s)
    return rows


def reference_name(reader: StoreReader, probe: str) -> str:
    return str(reader.attrs(reference_key(probe)).get("reference", probe))


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
    offsets = reader.ragged(f"{reference_key(probe)}/entropy").offsets
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
    pkey, rkey = probe_key(probe), reference_key(probe)
    ids_view = reader.ragged(f"{pkey}/ids")
    if not 0 <= seq < ids_view.n_rows:
        raise IndexError(f"sequence {seq} out of range (0..{ids_view.n_rows - 1})")
    a, b = int(ids_view.offsets[seq]), int(ids_view.offsets[seq + 1])
    texts = [t.decode() if isinstance(t, bytes) else str(t) for t in reader.slice(f"{pkey}/token_text", slice(a, b))]
    scored = np.asarray(reader.ragged(f"{pkey}/scored").row(seq), dtype=bool)
    ref = {k: reader.ragged(f"{rkey}/{k}").row(seq) for k in ("entropy", "logprob", "top1", "topk_ids",
                                                                "topk_logprobs")}
    ck: dict[str, np.ndarray] = {}
    if checkpoint is not None:
        skey = scores_key(probe, checkpoint)
        ck = {k: reader.ragged(f"{skey}/{k}").row(seq) for k in ("logprob", "kl", "js", "top1", "topk_ids",
                                                                   "topk_logprobs", "status")}
    voc = vocab(reader, probe)

    def word(i: int) -> str:
        return voc[i] if 0 <= i < len(voc) else f"<{i}>"

    out: list[TokenView] = []
    j = 0
    for t, text in enumerate(texts):
        if not scored[t]:
            out.append(TokenView(text=text, scored=False))
            continue
        alts = tuple((word(int(i)), float(lp)) for i, lp in zip(ck["topk_ids"][j], ck["topk_logprobs"][j],
                                                                   strict=True)) if ck else ()
        ralts = tuple((word(int(i)), float(lp)) for i, lp in zip(ref["topk_ids"][j], ref["topk_logprobs"][j],
                                                                    strict=True))
        out.append(TokenView(
            text=text, scored=True, entropy=float(ref["entropy"][j]), ref_logprob=float(ref["logprob"][j]),
            logprob=float(ck["logprob"][j]) if ck else math.nan, kl=float(ck["kl"][j]) if ck else math.nan,
            js=float(ck["js"][j]) if ck else math.nan,
            flipped=bool(ck and int(ck["top1"][j]) != int(ref["top1"][j])),
            status=int(ck["status"][j]) if ck else 0, alternatives=alts, ref_alternatives=ralts,
        ))
        j += 1
    return out


def _points(reader: StoreReader, probe: str, checkpoint: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Reference entropy and this checkpoint's KL at a seeded sample of the valid positions."""
    h = reader.ragged(f"{reference_key(probe)}/entropy").all()
    kl = reader.ragged(f"{scores_key(probe, checkpoint)}/kl").all()
    ok = np.flatnonzero(np.isfinite(h) & np.isfinite(kl))
    if len(ok) > MAX_SCATTER_POINTS:
        # keep the largest drifts (the story) and a uniform sample of the rest
        top = ok[np.argsort(-kl[ok], kind="stable")[: MAX_SCATTER_POINTS // 10]]
        rest = np.setdiff1d(ok, top)
        rng = np.random.default_rng(0)
        pick = np.sort(np.concatenate([top, rng.choice(rest, MAX_SCATTER_POINTS - len(top), replace=False)]))
    else:
        pick = ok
    return h[pick], kl[pick], len(ok)


# --- figures ----------------------------------------------------------------------------------


def scatter_figure(reader: StoreReader, probe: str, checkpoint: str) -> go.Figure:
    """Reference entropy (x) against KL(p_ref ‖ p_ckpt) (y, log) at every scored position."""
    x, y, n = _points(reader, probe, checkpoint)
    summary = reader.read(f"{summary_key(probe, checkpoint)}/summary")
    thr = summary.get("entropy_threshold")
    high = x >= thr if thr is not None else np.zeros(len(x), bool)
    fig = go.Figure()
    for mask, name, color in ((~high, "low entropy", "#7f7f7f"), (high, "high entropy", "#d62728")):
        fig.add_trace(go.Scatter(
            x=x[mask], y=np.maximum(y[mask], KL_FLOOR), mode="markers", name=name,
            marker=dict(size=5, color=color, opacity=0.6),
            hovertemplate="entropy %{x:.3f} nats<br>KL %{y:.3g} nats<extra></extra>",
        ))
    if thr is not None:
        fig.add_vline(x=thr, line=dict(color="#d62728", dash="dash"),
                      annotation_text=f"{summary.get('high')}: {thr:.2f} nats", annotation_position="top right")
    shown = f"{len(x):,} of {n:,} positions" if len(x) < n else f"{n:,} positions"
    fig.update_layout(
        title=f"Entropy vs drift: {checkpoint} against {reference_name(reader, probe)} ({shown})",
        xaxis_title="reference entropy (nats)",
        yaxis=dict(title="KL(p_ref ‖ p_ckpt) (nats)", type="log", exponentformat="power"),
        template="plotly_white", legend=dict(orientation="h", y=-0.2),
    )
    return fig


def concentration_figure(reader: StoreReader, probe: str, manifest: Manifest | None = None,
                         highlight: str | None = None) -> go.Figure:
    """Cumulative share of KL against share of positions ranked by reference entropy, every checkpoint."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="no concentration (area 0.5)",
                             line=dict(color="#bbb", dash="dot"), hoverinfo="skip"))
    rows = summaries(reader, probe, manifest)
    for i, s in enumerate(rows):
        yv = [math.nan if v is None else v for v in s["curve_y"]]
        area = s.get("concentration_area")
        label = f"{s['checkpoint']} (area {area:.2f})" if area is not None else f"{s['checkpoint']} (no drift)"
        width = 4 if s["checkpoint"] == highlight else 2
        fig.add_trace(go.Scatter(
            x=s["curve_x"], y=yv, mode="lines", name=label,
            line=dict(color=PALETTE[i % len(PALETTE)], width=width),
            hovertemplate=f"{s['checkpoint']}<br>top %{{x:.0%}} by entropy hold %{{y:.0%}} of KL<extra></extra>",
        ))
    q = rows[0].get("high") if rows else None
    if q and str(q).startswith("q="):
        fig.add_vline(x=float(str(q)[2:]), line=dict(color="#d62728", dash="dash"), annotation_text=str(q))
    fig.update_layout(
        title=f"Where drift concentrates: against {reference_name(reader, probe)}",
        xaxis=dict(title="share of positions, highest reference entropy first", tickformat=".0%", range=[0, 1]),
        yaxis=dict(title="cumulative share of KL", tickformat=".0%", range=[0, 1.02]),
        template="plotly_white",
    )
    return fig


def strata_figure(reader: StoreReader, probe: str, manifest: Manifest | None = None) -> go.Figure:
    """Mean KL and flip rate on high- vs low-entropy positions, per checkpoint."""
    from plotly.subplots import make_subplots

    rows = summaries(reader, probe, manifest)
    names = [r["checkpoint"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean KL (nats)", "flip rate"))
    for key, label, color in (("high", "high entropy", "#d62728"), ("low", "low entropy", "#7f7f7f")):
        fig.add_trace(go.Bar(x=names, y=[r[f"kl_mean_{key}"] for r in rows], name=label, marker_color=color,
                             legendgroup=key), row=1, col=1)
        fig.add_trace(go.Bar(x=names, y=[r[f"flip_rate_{key}"] for r in rows], name=label, marker_color=color,
                             legendgroup=key, showlegend=False), row=1, col=2)
    fig.update_layout(barmode="group", template="plotly_white",
                      title=f"Drift on high- vs low-entropy positions (against {reference_name(reader, probe)})")
    return fig


SUMMARY_COLUMNS = (
    ("checkpoint", "checkpoint"), ("n_valid", "positions"), ("kl_mean", "KL mean"), ("kl_mean_high", "KL high"),
    ("kl_mean_low", "KL low"), ("kl_share_high", "KL share high"), ("flip_rate_high", "flips high"),
    ("flip_rate_low", "flips low"), ("barely_moved_low", "barely moved (low)"),
    ("concentration_area", "conc. area"), ("n_invalid", "excluded"),
)


def fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}"
    return str(value)


def summary_table_figure(reader: StoreReader, probe: str, manifest: Manifest | None = None) -> go.Figure:
    rows = summaries(reader, probe, manifest)
    fig = go.Figure(go.Table(
        header=dict(values=[h for _, h in SUMMARY_COLUMNS], align="left"),
        cells=dict(values=[[fmt(r.get(k)) for r in rows] for k, _ in SUMMARY_COLUMNS], align="left"),
    ))
    fig.update_layout(title=f"Token drift summary against {reference_name(reader, probe)} (probe {probe})")
    return fig


# --- export registry ----------------------------------------------------------------------------


@register_figure("tokens/concentration", "Concentration of drift at high-entropy positions", width=900, height=560)
def _concentration(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    return [(p, concentration_figure(reader, p, manifest)) for p in token_probes(reader)]


@register_figure("tokens/strata", "Drift on high- vs low-entropy positions", width=1000, height=480)
def _strata(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    return [(p, strata_figure(reader, p, manifest)) for p in token_probes(reader)]


@register_figure("tokens/scatter", "Reference entropy vs KL", width=900, height=560)
def _scatter(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    if reader is None:
        return []
    return [(f"{p}-{c}", scatter_figure(reader, p, c)) for p in token_probes(reader)
            for c in token_checkpoints(reader, p, manifest)]


@register_figure("tokens/summary", "Token drift summary table", width=1100, height=420)
def _summary(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    return [(p, summary_table_figure(reader, p, manifest)) for p in token_probes(reader)]
