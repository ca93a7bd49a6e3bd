"""Figures of the parameter-space diagnostics: task-vector cosines and distances, displacement.

They read ``vectors/summary`` (written by ``aclarena-diag vectors``) and
``displacement/summary`` (``aclarena-diag displacement``); each summary holds two views,
``all`` (every floating weight) and ``no-embeddings`` (input embeddings and output head left
out). docs/task-vectors.md says what the numbers mean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from aclarena.figures import register_figure

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

VECTORS_KEY = "vectors/summary"
DISPLACEMENT_KEY = "displacement/summary"
VIEWS = ("all", "no-embeddings")
PHASE_COLORS = {"sft": "#d62728", "rl": "#1f77b4", None: "#7f7f7f"}
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def load_summary(reader: StoreReader | None, key: str, view: str = "all") -> dict[str, Any] | None:
    """A stored summary view, or None when the run has none yet."""
    if view not in VIEWS:
        raise ValueError(f"`view` must be one of {', '.join(VIEWS)}, got {view!r}")
    if reader is None or not reader.has(f"{key}/{view}"):
        return None
    return reader.read(f"{key}/{view}")


def _clean(z: np.ndarray) -> list[Any]:
    """A numeric array for plotly with NaN as None (shown as gaps, not errors)."""
    arr = np.asarray(z, dtype=float)
    return np.where(np.isfinite(arr), arr, None).tolist()


def _view_note(view: str) -> str:
    return "all floating weights" if view == "all" else "without embeddings and output head"


# --- vectors -------------------------------------------------------------------------------


def cosine_heatmap(labels: list[str], cos: np.ndarray, title: str) -> go.Figure:
    """A cosine matrix as a heatmap, value in each cell and on hover."""
    z = _clean(cos)
    fig = go.Figure(go.Heatmap(
        z=z, x=labels, y=labels, zmin=-1, zmax=1, colorscale="RdBu", reversescale=False,
        text=[[("-" if v is None else f"{v:.2f}") for v in row] for row in z], texttemplate="%{text}",
        hovertemplate="%{y}<br>vs %{x}<br>cos %{z:.4f}<extra></extra>", colorbar=dict(title="cos"),
    ))
    fig.update_layout(title=title, template="plotly_white", yaxis=dict(autorange="reversed"),
                      xaxis=dict(tickangle=-30), margin=dict(l=160, b=140))
    return fig


def global_cosines_figure(s: dict[str, Any], view: str = "all") -> go.Figure:
    return cosine_heatmap(s["labels"], s["cos"], f"Task-vector cosines ({_view_note(view)}, flattened)")


def layer_cosines_figure(s: dict[str, Any], index: int, view: str = "all") -> go.Figure:
    """The cosine matrix of one layer block (``group_labels[index]``)."""
    groups = s["group_labels"]
    if not groups:
        return _empty("No layer blocks in this view")
    index = max(0, min(int(index), len(groups) - 1))
    return cosine_heatmap(s["labels"], s["cos_group"][index],
                          f"Task-vector cosines in {groups[index]} ({_view_note(view)})")


def layer_oracle_figure(s: dict[str, Any], oracle: int, view: str = "all") -> go.Figure:
    """Cosine of every task vector with one oracle direction, per layer block (vectors × layers)."""
    labels, groups = s["labels"], s["group_labels"]
    name = s["oracles"][oracle]
    idx = [i for i, (p, m) in enumerate(zip(s["plus"], s["minus"], strict=True)) if p == name and m == s["base"]]
    if not idx or not groups:
        return _empty(f"No direction for oracle {name}")
    z = np.asarray(s["cos_group"])[:, :, idx[0]].T  # (V, G)
    fig = go.Figure(go.Heatmap(
        z=_clean(z), x=groups, y=labels, zmin=-1, zmax=1, colorscale="RdBu",
        hovertemplate="%{y}<br>%{x}<br>cos with " + name + " %{z:.4f}<extra></extra>", colorbar=dict(title="cos"),
    ))
    fig.update_layout(title=f"Cosine with the {name} direction, per layer ({_view_note(view)})",
                      template="plotly_white", yaxis=dict(autorange="reversed"), margin=dict(l=160))
    return fig


def distance_figure(s: dict[str, Any], view: str = "all") -> go.Figure:
    """Distance of each checkpoint of the chain to each oracle: one line per oracle."""
    names, on_chain = s["distance_checkpoints"], np.asarray(s["on_chain"], dtype=bool)
    dist = np.asarray(s["distance"])
    fig = go.Figure()
    if not s["oracles"] or not names:
        return _empty("No oracles in this run: distances to oracles need checkpoints of kind oracle")
    chain = [n for n, c in zip(names, on_chain, strict=True) if c]
    off = [n for n, c in zip(names, on_chain, strict=True) if not c]
    for oi, (o, dom) in enumerate(zip(s["oracles"], s["oracle_domains"], strict=True)):
        ys = dist[on_chain, oi]
        fig.add_trace(go.Scatter(x=chain, y=_clean(ys), mode="lines+markers", name=f"to {o} ({dom})",
                                 hovertemplate="%{x}<br>‖θ − θ_" + o + "‖ = %{y:.4g}<extra></extra>"))
        if off:
            fig.add_trace(go.Scatter(x=off, y=_clean(dist[~on_chain, oi]), mode="markers", name=f"{o}: off chain",
                                     marker=dict(symbol="diamond", size=10),
                                     hovertemplate="%{x}<br>‖θ − θ_" + o + "‖ = %{y:.4g}<extra></extra>"))
    fig.update_layout(title=f"Distance to each oracle along the chain ({_view_note(view)})", template="plotly_white",
                      xaxis=dict(title="checkpoint", categoryorder="array", categoryarray=chain + off),
                      yaxis=dict(title="‖θ − θ_oracle‖₂", rangemode="tozero"))
    return fig


def _empty(text: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template="plotly_white", xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")])
    return fig


@register_figure("vectors/cosines", "Task-vector cosines", width=900, height=760)
def _fig_cosines(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    out = []
    for view in VIEWS:
        s = load_summary(reader, VECTORS_KEY, view)
        if s is not None and s["labels"]:
            out.append(("" if view == "all" else view, global_cosines_figure(s, view)))
    return out


@register_figure("vectors/layer-cosines", "Cosine with each oracle direction, per layer", width=1000, height=560)
def _fig_layer_oracle(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = load_summary(reader, VECTORS_KEY)
    if s is None:
        return []
    return [(name, layer_oracle_figure(s, oi)) for oi, name in enumerate(s["oracles"])]


@register_figure("vectors/distances", "Distance to each oracle along the chain", width=900, height=480)
def _fig_distances(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = load_summary(reader, VECTORS_KEY)
    if s is None or not s["oracles"]:
        return []
    return [("", distance_figure(s))]


# --- displacement --------------------------------------------------------------------------


def _update_label(s: dict[str, Any], i: int) -> str:
    return f"{s['children'][i]} ({s['phases'][i] or '-'})"


def sft_rl_figure(s: dict[str, Any], view: str = "all") -> go.Figure:
    """‖Δθ‖₂ of each update, grouped by stage (domain) and coloured by phase."""
    fig = go.Figure()
    norm = np.asarray(s["norm"])
    rel = np.asarray(s["rel"])
    stages = [d if k == "stage" and d else c for c, d, k in zip(s["children"], s["domains"], s["kinds"], strict=True)]
    for phase in ("sft", "rl", None):
        idx = [i for i, p in enumerate(s["phases"]) if p == phase]
        if not idx:
            continue
        fig.add_trace(go.Bar(
            x=[stages[i] for i in idx], y=_clean(norm[idx]), name=(phase or "no phase").upper(),
            marker_color=PHASE_COLORS[phase], customdata=[[s["children"][i], _fmt(rel[i])] for i in idx],
            hovertemplate="%{customdata[0]}<br>‖Δθ‖₂ = %{y:.4g}<br>relative %{customdata[1]}<extra></extra>",
        ))
    ratios = [r for r in s["ratios"] if r.get("ratio") is not None]
    note = "; ".join(f"{r['stage']}: SFT/RL {r['ratio']:.2f}×" for r in ratios)
    if s.get("overall_ratio") is not None and np.isfinite(s["overall_ratio"]):
        note = (note + "; " if note else "") + f"mean SFT / mean RL {s['overall_ratio']:.2f}× (study: 3–7×)"
    fig.update_layout(title=f"Displacement per update, SFT vs RL ({_view_note(view)})", barmode="group",
                      template="plotly_white", yaxis=dict(title="‖Δθ‖₂"), xaxis=dict(title="stage"),
                      annotations=[dict(text=note, showarrow=False, x=0, y=1.08, xref="paper", yref="paper",
                                        xanchor="left")] if note else [])
    return fig


def _fmt(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:.3g}"


def layer_profile_figure(s: dict[str, Any], view: str = "all") -> go.Figure:
    """Relative displacement ‖Δθ‖/‖θ_parent‖ per layer block, one line per update."""
    fig = go.Figure()
    rel = np.asarray(s["rel_group"])  # (G, P)
    for i in range(len(s["children"])):
        phase = s["phases"][i]
        fig.add_trace(go.Scatter(
            x=s["group_labels"], y=_clean(rel[:, i]), mode="lines+markers", name=_update_label(s, i),
            line=dict(color=PALETTE[i % len(PALETTE)], dash="solid" if phase == "sft" else "dot"
                      if phase == "rl" else "dash"),
            hovertemplate=s["children"][i] + "<br>%{x}<br>‖Δθ‖/‖θ_parent‖ = %{y:.4g}<extra></extra>",
        ))
    fig.update_layout(title=f"Relative displacement per layer ({_view_note(view)}; solid SFT, dotted RL)",
                      template="plotly_white",
                      yaxis=dict(title="‖Δθ‖₂ / ‖θ_parent‖₂", rangemode="tozero"), xaxis=dict(title="layer block"))
    return fig


def sparsity_figure(s: dict[str, Any], view: str = "all") -> go.Figure:
    """Update sparsity (fraction of entries with |Δθ| ≤ tol) against the tolerance, exact and bf16."""
    fig = go.Figure()
    tols = [("0" if t == 0 else f"{t:.0e}") for t in np.asarray(s["tolerances"])]
    for i in range(len(s["children"])):
        for mode, key, dash in (("exact", "changed_frac", "solid"), ("bf16", "changed_frac_bf16", "dot")):
            sp = 1.0 - np.asarray(s[key])[i]
            fig.add_trace(go.Scatter(
                x=tols, y=_clean(sp), mode="lines+markers", name=f"{_update_label(s, i)} {mode}",
                line=dict(color=PALETTE[i % len(PALETTE)], dash=dash), legendgroup=s["children"][i],
                hovertemplate=s["children"][i] + f" ({mode})<br>tol %{{x}}<br>sparsity %{{y:.4f}}<extra></extra>",
            ))
    fig.update_layout(title=f"Update sparsity vs tolerance ({_view_note(view)}; dotted: after bf16 rounding)",
                      template="plotly_white", xaxis=dict(title="tolerance on |Δθ|", type="category"),
                      yaxis=dict(title="fraction of entries with |Δθ| ≤ tol", range=[0, 1.02]))
    return fig


@register_figure("displacement/sft-rl", "Displacement per update, SFT vs RL", width=900, height=480)
def _fig_sft_rl(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = load_summary(reader, DISPLACEMENT_KEY)
    return [("", sft_rl_figure(s))] if s is not None and s["children"] else []


@register_figure("displacement/layers", "Relative displacement per layer", width=1000, height=480)
def _fig_layers(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = load_summary(reader, DISPLACEMENT_KEY)
    return [("", layer_profile_figure(s))] if s is not None and s["children"] else []


@register_figure("displacement/sparsity", "Update sparsity vs tolerance", width=900, height=520)
def _fig_sparsity(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = load_summary(reader, DISPLACEMENT_KEY)
    return [("", sparsity_figure(s))] if s is not None and s["children"] else []
