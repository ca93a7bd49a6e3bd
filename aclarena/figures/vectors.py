"""Figures of the parameter-space diagnostics: task-vector cosines and distances, displacement.

They read ``vectors/summary`` (written by ``aclarena-diag vectors``; :mod:`aclarena.results.vectors`) and
``displacement/summary`` (``aclarena-diag displacement``; :mod:`aclarena.results.displacement`), one view at a
time; each summary holds two views,
``all`` (every floating weight) and ``no-embeddings`` (input embeddings and output head left
out). docs/task-vectors.md says what the numbers mean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from aclarena.figures import register_figure
from aclarena.figures.palette import PHASE_COLORS, SERIES, TEMPLATE
from aclarena.results.displacement import read_displacement_view
from aclarena.results.vectors import VIEWS, read_vectors_view

if TYPE_CHECKING:
    from aclarena.results.displacement import DisplacementView
    from aclarena.results.vectors import VectorSummaryView
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

PALETTE = SERIES
#: what the vectors page can show: stage updates (θ − θ_parent), cumulative updates (θ − θ_base), oracle directions
VECTOR_KINDS = ("stage", "cumulative", "oracle")
PHASES = ("sft", "rl", "none")


def distinct_colours(n: int) -> list[str]:
    """``n`` colours that stay distinguishable: plotly's Dark24 then Light24 (48), then evenly spaced hues."""
    import colorsys

    import plotly.colors

    base = list(plotly.colors.qualitative.Dark24) + list(plotly.colors.qualitative.Light24)
    if n <= len(base):
        return base[:n]
    out = []
    for i in range(n):
        r, g, b = colorsys.hls_to_rgb((i * 0.618033988749895) % 1.0, 0.45 + 0.15 * (i % 3) / 2, 0.75)
        out.append(f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}")
    return out


def axis_type(*arrays: Any) -> str:
    """"log" when the positive finite values span two decades or more, else "linear"."""
    vals = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in arrays]) if arrays else np.array([])
    vals = vals[np.isfinite(vals) & (vals > 0)]
    return "log" if len(vals) > 1 and vals.max() / vals.min() >= 100 else "linear"


def vector_categories(s: VectorSummaryView, manifest: Manifest | None) -> list[tuple[str, str]]:
    """(kind, phase) of each task vector: kind in VECTOR_KINDS, phase "sft", "rl" or "none"."""
    out = []
    for plus, kind in zip(s.plus, s.kinds, strict=True):
        spec = manifest.checkpoints.get(plus) if manifest is not None else None
        if spec is not None and spec.kind == "oracle" or plus in s.oracles:
            k = "oracle"
        else:
            k = "cumulative" if kind == "cumulative" else "stage"
        phase = (spec.phase if spec is not None else None) or "none"
        out.append((k, phase))
    return out


def vector_filter(s: VectorSummaryView, manifest: Manifest | None, kinds: list[str] | None = None,
                  phases: list[str] | None = None) -> list[int]:
    """Indices of the task vectors whose kind is in ``kinds`` and phase in ``phases`` (None: all)."""
    cats = vector_categories(s, manifest)
    return [i for i, (k, p) in enumerate(cats) if (kinds is None or k in kinds) and (phases is None or p in phases)]


def _clean(z: np.ndarray) -> list[Any]:
    """A numeric array for plotly with NaN as None (shown as gaps, not errors)."""
    arr = np.asarray(z, dtype=float)
    return np.where(np.isfinite(arr), arr, np.array(None)).tolist()


def _view_note(view: str) -> str:
    return "all floating weights" if view == "all" else "without embeddings and output head"


# --- vectors -------------------------------------------------------------------------------


#: cell values are written in the cells up to this many rows; beyond, only on hover
MAX_TEXT_ROWS = 30


def heatmap_size(n_rows: int, labels: list[str]) -> dict[str, Any]:
    """Height growing with the rows (at least 14 px a row) and margins that fit the labels."""
    row = 14 if n_rows > 40 else 22 if n_rows > 12 else 34
    font = 9 if n_rows > 60 else 10 if n_rows > 30 else 12
    longest = max((len(x) for x in labels), default=4)
    left = min(420, 40 + int(longest * font * 0.6))
    return dict(height=max(480, 160 + left * 0.5 + row * n_rows), font=font, left=left)


def cosine_heatmap(labels: list[str], cos: np.ndarray, title: str, norms: np.ndarray | None = None) -> go.Figure:
    """A cosine matrix as a heatmap: value in each cell (up to :data:`MAX_TEXT_ROWS` rows) and on hover;
    height grows with the rows. Zero vectors (``norms`` 0: cosine undefined) are drawn grey and
    labelled "zero" instead of as blank stripes."""
    cos = np.asarray(cos, dtype=float)
    n = len(labels)
    zero = np.zeros(n, bool) if norms is None else ~(np.asarray(norms, dtype=float) > 0)
    shown = [f"{lab} [zero]" if zr else lab for lab, zr in zip(labels, zero, strict=True)]
    z = _clean(np.round(cos, 4))  # the hover's precision: a smaller page
    write = n <= MAX_TEXT_ROWS
    # beyond MAX_TEXT_ROWS no text at all is sent (it was a matrix of empty strings)
    text = [[("zero" if (zero[i] or zero[j]) else "-" if v is None else f"{v:.2f}")
             for j, v in enumerate(row)] for i, row in enumerate(z)] if write else None
    size = heatmap_size(n, shown)
    traces = []
    if zero.any():
        grey = np.where(zero[:, None] | zero[None, :], 0.0, np.nan)
        traces.append(go.Heatmap(z=_clean(grey), x=shown, y=shown, colorscale=[[0, "#d9d9d9"], [1, "#d9d9d9"]],
                                 showscale=False, hovertemplate="%{y}<br>vs %{x}<br>zero vector: no direction"
                                 "<extra></extra>", name="zero vectors"))
    traces.append(go.Heatmap(
        z=z, x=shown, y=shown, zmin=-1, zmax=1, colorscale="RdBu", reversescale=False,
        **(dict(text=text, texttemplate="%{text}", textfont=dict(size=size["font"])) if write else {}),
        hovertemplate="%{y}<br>vs %{x}<br>cos %{z:.4f}<extra></extra>", colorbar=dict(title="cos"),
        hoverongaps=False,
    ))
    fig = go.Figure(traces)
    fig.update_layout(title=title, template=TEMPLATE, height=size["height"],
                      yaxis=dict(autorange="reversed", tickfont=dict(size=size["font"]), automargin=True),
                      xaxis=dict(tickangle=-45, tickfont=dict(size=size["font"]), automargin=True),
                      margin=dict(l=size["left"], b=size["left"] * 0.7))
    return fig


def _subset(s: VectorSummaryView, keep: list[int] | None, cos: np.ndarray, norms: Any) -> tuple[list[str], Any, Any]:
    labels = list(s.labels)
    cos = np.asarray(cos)
    norms = np.asarray(norms) if norms is not None else None
    if keep is None:
        return labels, cos, norms
    idx = np.asarray(keep, dtype=int)
    return [labels[i] for i in keep], cos[np.ix_(idx, idx)], (norms[idx] if norms is not None else None)


def global_cosines_figure(s: VectorSummaryView, view: str = "all", keep: list[int] | None = None) -> go.Figure:
    """The cosine matrix of the task vectors ``keep`` (indices; None: all)."""
    labels, cos, norms = _subset(s, keep, s.cos, s.norm)
    if not labels:
        return _empty("No task vector matches the filter")
    return cosine_heatmap(labels, cos, f"Task-vector cosines ({_view_note(view)}, flattened; {len(labels)} vectors)",
                          norms)


def layer_cosines_figure(s: VectorSummaryView, index: int, view: str = "all", keep: list[int] | None = None) -> go.Figure:
    """The cosine matrix of one layer block (``group_labels[index]``)."""
    groups = s.group_labels
    if not groups:
        return _empty("No layer blocks in this view")
    index = max(0, min(int(index), len(groups) - 1))
    labels, cos, norms = _subset(s, keep, s.cos_group[index], np.asarray(s.norm_group)[index])
    if not labels:
        return _empty("No task vector matches the filter")
    return cosine_heatmap(labels, cos, f"Task-vector cosines in {groups[index]} ({_view_note(view)})", norms)


def layer_oracle_figure(s: VectorSummaryView, oracle: int, view: str = "all", keep: list[int] | None = None) -> go.Figure:
    """Cosine of every task vector (``keep``: indices; None: all) with one oracle direction, per layer
    block (vectors × layers); the height grows with the rows."""
    labels, groups = list(s.labels), s.group_labels
    if not s.oracles:
        return _empty("No oracles in this run: oracle directions need checkpoints of kind oracle")
    name = s.oracles[max(0, min(int(oracle), len(s.oracles) - 1))]
    idx = [i for i, (p, m) in enumerate(zip(s.plus, s.minus, strict=True)) if p == name and m == s.base]
    if not idx or not groups:
        return _empty(f"No direction for oracle {name}")
    z = np.asarray(s.cos_group)[:, :, idx[0]].T  # (V, G)
    if keep is not None:
        z, labels = z[np.asarray(keep, dtype=int)], [labels[i] for i in keep]
    if not labels:
        return _empty("No task vector matches the filter")
    size = heatmap_size(len(labels), labels)
    fig = go.Figure(go.Heatmap(
        z=_clean(z), x=groups, y=labels, zmin=-1, zmax=1, colorscale="RdBu",
        hovertemplate="%{y}<br>%{x}<br>cos with " + name + " %{z:.4f}<extra></extra>", colorbar=dict(title="cos"),
    ))
    fig.update_layout(title=f"Cosine with the {name} direction, per layer ({_view_note(view)})",
                      template=TEMPLATE, height=size["height"],
                      yaxis=dict(autorange="reversed", tickfont=dict(size=size["font"]), automargin=True),
                      margin=dict(l=size["left"]))
    return fig


def distance_figure(s: VectorSummaryView, view: str = "all") -> go.Figure:
    """Distance of each checkpoint of the chain to each oracle: one line per oracle."""
    names, on_chain = s.distance_checkpoints, np.asarray(s.on_chain, dtype=bool)
    dist = np.asarray(s.distance)
    fig = go.Figure()
    if not s.oracles or not names:
        return _empty("No oracles in this run: distances to oracles need checkpoints of kind oracle")
    chain = [n for n, c in zip(names, on_chain, strict=True) if c]
    off = [n for n, c in zip(names, on_chain, strict=True) if not c]
    for oi, (o, dom) in enumerate(zip(s.oracles, s.oracle_domains, strict=True)):
        ys = dist[on_chain, oi]
        fig.add_trace(go.Scatter(x=chain, y=_clean(ys), mode="lines+markers", name=f"to {o} ({dom})",
                                 hovertemplate="%{x}<br>‖θ − θ_" + o + "‖ = %{y:.4g}<extra></extra>"))
        if off:
            fig.add_trace(go.Scatter(x=off, y=_clean(dist[~on_chain, oi]), mode="markers", name=f"{o}: off chain",
                                     marker=dict(symbol="diamond", size=10),
                                     hovertemplate="%{x}<br>‖θ − θ_" + o + "‖ = %{y:.4g}<extra></extra>"))
    fig.update_layout(title=f"Distance to each oracle along the chain ({_view_note(view)})", template=TEMPLATE,
                      xaxis=dict(title="checkpoint", categoryorder="array", categoryarray=chain + off),
                      yaxis=dict(title="‖θ − θ_oracle‖₂", rangemode="tozero"))
    return fig


def _empty(text: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")])
    return fig


@register_figure("vectors/cosines", "Task-vector cosines", width=900, height=760)
def _fig_cosines(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    out = []
    for view in VIEWS:
        s = read_vectors_view(reader, view)
        if s is not None and s.labels:
            out.append(("" if view == "all" else view, global_cosines_figure(s, view)))
    return out


@register_figure("vectors/layer-cosines", "Cosine with each oracle direction, per layer", width=1000, height=560)
def _fig_layer_oracle(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = read_vectors_view(reader)
    if s is None:
        return []
    return [(name, layer_oracle_figure(s, oi)) for oi, name in enumerate(s.oracles)]


@register_figure("vectors/distances", "Distance to each oracle along the chain", width=900, height=480)
def _fig_distances(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = read_vectors_view(reader)
    if s is None or not s.oracles:
        return []
    return [("", distance_figure(s))]


# --- displacement --------------------------------------------------------------------------


def _update_label(s: DisplacementView, i: int) -> str:
    return f"{s.children[i]} ({s.phases[i] or '-'})"


def update_filter(s: DisplacementView, kinds: list[str] | None = None, phases: list[str] | None = None) -> list[int]:
    """Indices of the displacement updates whose kind ("stage", "oracle", ...) is in ``kinds`` and
    phase ("sft", "rl", "none") in ``phases`` (None: all)."""
    return [i for i, (k, p) in enumerate(zip(s.kinds, s.phases, strict=True))
            if (kinds is None or k in kinds) and (phases is None or (p or "none") in phases)]


def stage_groups(s: DisplacementView) -> list[str]:
    """The stage each update belongs to, so that a stage's SFT and RL updates share one x position.

    An RL update whose parent is an SFT update of the same domain joins that stage; oracles pair
    by domain ("oracle math"); a domain that recurs along the chain is numbered ("math #2").
    """
    children, parents, domains, kinds = s.children, s.parents, s.domains, s.kinds
    index = {c: i for i, c in enumerate(children)}
    group: list[str] = [""] * len(children)
    seen: dict[str, int] = {}
    for i, c in enumerate(children):
        dom = domains[i] or c
        if kinds[i] == "oracle":
            group[i] = f"oracle {dom}"
            continue
        if kinds[i] != "stage":
            group[i] = c
            continue
        p = index.get(parents[i])
        if p is not None and kinds[p] == "stage" and domains[p] == domains[i] and s.phases[p] != s.phases[i] \
                and group[p]:
            group[i] = group[p]
            continue
        seen[dom] = seen.get(dom, 0) + 1
        group[i] = dom if seen[dom] == 1 else f"{dom} #{seen[dom]}"
    return group


def sft_rl_figure(s: DisplacementView, view: str = "all", keep: list[int] | None = None) -> go.Figure:
    """‖Δθ‖₂ of each update, its stage's SFT and RL bars side by side (chains and oracles alike),
    coloured by phase; a log axis when the norms span two decades."""
    fig = go.Figure()
    norm = np.asarray(s.norm)
    rel = np.asarray(s.rel)
    stages = stage_groups(s)
    keep = list(range(len(s.children))) if keep is None else keep
    order = list(dict.fromkeys(stages[i] for i in keep))
    for phase in ("sft", "rl", None):
        idx = [i for i in keep if s.phases[i] == phase]
        if not idx:
            continue
        fig.add_trace(go.Bar(
            x=[stages[i] for i in idx], y=_clean(norm[idx]), name=(phase or "no phase").upper(),
            marker_color=PHASE_COLORS[phase], customdata=[[s.children[i], _fmt(rel[i])] for i in idx],
            hovertemplate="%{customdata[0]}<br>‖Δθ‖₂ = %{y:.4g}<br>relative %{customdata[1]}<extra></extra>",
        ))
    ratios = [r for r in s.ratios if r.get("ratio") is not None]
    note = "; ".join(f"{r['stage']}: SFT/RL {r['ratio']:.2f}×" for r in ratios[:8])
    if len(ratios) > 8:
        note += f"; … ({len(ratios)} stages)"
    if np.isfinite(s.overall_ratio):
        note = (note + "; " if note else "") + f"mean SFT / mean RL {s.overall_ratio:.2f}× (study (Qwen3-8B): 3–7×)"
    elif "sft" in s.phases and "rl" in s.phases:
        note = (note + "; " if note else "") + "SFT/RL ratio: no stage has both an SFT and a non-zero RL update"
    zero = [s.children[i] for i in keep if not norm[i] > 0]
    if zero:
        note += f"<br>zero updates (no bar): {', '.join(zero[:6])}" + (" …" if len(zero) > 6 else "")
    ytype = axis_type(norm[keep]) if keep else "linear"
    fig.update_layout(title=f"Displacement per update, SFT vs RL ({_view_note(view)})", barmode="group",
                      template=TEMPLATE, yaxis=dict(title="‖Δθ‖₂" + (" (log)" if ytype == "log" else ""),
                                                          type=ytype),
                      xaxis=dict(title="stage (SFT and RL of a stage side by side)", categoryorder="array",
                                 categoryarray=order, tickangle=-45 if len(order) > 12 else 0),
                      margin=dict(t=110),
                      annotations=[dict(text=note, showarrow=False, x=0, y=1.02, xref="paper", yref="paper",
                                        xanchor="left", yanchor="bottom", align="left")] if note else [])
    return fig


def _fmt(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:.3g}"


def default_highlight(s: DisplacementView, keep: list[int]) -> int | None:
    """The update drawn highlighted when none is chosen: the one that moved furthest (largest ‖Δθ‖₂)."""
    norm = np.asarray(s.norm, dtype=float)
    finite = [i for i in keep if np.isfinite(norm[i])]
    return max(finite, key=lambda i: norm[i]) if finite else (keep[0] if keep else None)


def _faded(phase: str | None) -> str:
    """A phase's colour, faded: the updates not highlighted."""
    h = PHASE_COLORS.get(phase, PHASE_COLORS[None]).lstrip("#")
    r, g, b = (int(h[k:k + 2], 16) for k in (0, 2, 4))
    return f"rgba({r}, {g}, {b}, 0.28)"


def _highlighted(s: DisplacementView, keep: list[int], highlight: int | None) -> int | None:
    return highlight if highlight in keep else default_highlight(s, keep)


def layer_profile_figure(s: DisplacementView, view: str = "all", keep: list[int] | None = None,
                         highlight: int | None = None) -> go.Figure:
    """Relative displacement ‖Δθ‖/‖θ_parent‖ per layer block: one highlighted update (``highlight``, an
    index of ``s.children``; default the one that moved furthest) in its phase's colour, every other
    kept update a thin faded line of its phase (hover names it); log axis when the values span two
    decades. The legend has the highlighted update and one entry per phase, so it never outgrows the plot."""
    fig = go.Figure()
    rel = np.asarray(s.rel_group)  # (G, P)
    keep = list(range(len(s.children))) if keep is None else keep
    hl = _highlighted(s, keep, highlight)
    seen: set[str | None] = set()
    for i in keep:
        if i == hl:
            continue
        phase = s.phases[i]
        fig.add_trace(go.Scatter(
            x=s.group_labels, y=_clean(rel[:, i]), mode="lines", name=f"other {(phase or 'no phase').upper()} "
            "updates", legendgroup=f"other-{phase}", showlegend=phase not in seen,
            line=dict(color=_faded(phase), width=1.2, dash="solid" if phase != "rl" else "dot"),
            hovertemplate=s.children[i] + "<br>%{x}<br>‖Δθ‖/‖θ_parent‖ = %{y:.4g}<extra></extra>",
        ))
        seen.add(phase)
    if hl is not None:
        phase = s.phases[hl]
        fig.add_trace(go.Scatter(
            x=s.group_labels, y=_clean(rel[:, hl]), mode="lines+markers", name=_update_label(s, hl),
            line=dict(color=PHASE_COLORS.get(phase, PHASE_COLORS[None]), width=3.5), marker=dict(size=7),
            hovertemplate=s.children[hl] + "<br>%{x}<br>‖Δθ‖/‖θ_parent‖ = %{y:.4g}<extra></extra>",
        ))
    ytype = axis_type(rel[:, keep]) if keep else "linear"
    fig.update_layout(title=f"Relative displacement per layer ({_view_note(view)}): "
                            f"{s.children[hl] if hl is not None else 'no update'} highlighted",
                      template=TEMPLATE, height=480, legend=dict(orientation="h", x=0, y=-0.22),
                      yaxis=dict(title="‖Δθ‖₂ / ‖θ_parent‖₂", type=ytype,
                                 **({"rangemode": "tozero"} if ytype == "linear" else {})),
                      xaxis=dict(title="layer block"), margin=dict(b=120))
    return fig


def sparsity_figure(s: DisplacementView, view: str = "all", keep: list[int] | None = None,
                    highlight: int | None = None) -> go.Figure:
    """Update sparsity (fraction of entries with |Δθ| ≤ tol) against the tolerance, exact (solid) and
    after bf16 rounding (dotted): the highlighted update in its phase's colour, the others faded."""
    fig = go.Figure()
    tols = [("0" if t == 0 else f"{t:.0e}") for t in np.asarray(s.tolerances)]
    keep = list(range(len(s.children))) if keep is None else keep
    hl = _highlighted(s, keep, highlight)
    seen: set[str | None] = set()
    for i in [*[k for k in keep if k != hl], *([hl] if hl is not None else [])]:
        phase = s.phases[i]
        top = i == hl
        for mode, changed, dash in (("exact", s.changed_frac, "solid"), ("bf16", s.changed_frac_bf16, "dot")):
            sp = 1.0 - np.asarray(changed)[i]
            fig.add_trace(go.Scatter(
                x=tols, y=_clean(sp), mode="lines+markers" if top else "lines",
                name=f"{_update_label(s, i)} {mode}" if top else f"other {(phase or 'no phase').upper()} updates",
                legendgroup=s.children[i] if top else f"other-{phase}",
                showlegend=top or (mode == "exact" and phase not in seen),
                line=dict(color=PHASE_COLORS.get(phase, PHASE_COLORS[None]) if top else _faded(phase),
                          width=3.5 if top else 1.2, dash=dash),
                hovertemplate=s.children[i] + f" ({mode})<br>tol %{{x}}<br>sparsity %{{y:.4f}}<extra></extra>",
            ))
        if not top:
            seen.add(phase)
    fig.update_layout(title=f"Update sparsity vs tolerance ({_view_note(view)}; dotted: after bf16 rounding): "
                            f"{s.children[hl] if hl is not None else 'no update'} highlighted",
                      template=TEMPLATE, height=500, legend=dict(orientation="h", x=0, y=-0.22),
                      xaxis=dict(title="tolerance on |Δθ|", type="category"), margin=dict(b=120),
                      yaxis=dict(title="fraction of entries with |Δθ| ≤ tol", range=[0, 1.02]))
    return fig


@register_figure("displacement/sft-rl", "Displacement per update, SFT vs RL", width=900, height=480)
def _fig_sft_rl(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = read_displacement_view(reader)
    return [("", sft_rl_figure(s))] if s is not None and s.children else []


@register_figure("displacement/layers", "Relative displacement per layer", width=1000, height=480)
def _fig_layers(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = read_displacement_view(reader)
    return [("", layer_profile_figure(s))] if s is not None and s.children else []


@register_figure("displacement/sparsity", "Update sparsity vs tolerance", width=900, height=520)
def _fig_sparsity(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    s = read_displacement_view(reader)
    return [("", sparsity_figure(s))] if s is not None and s.children else []
