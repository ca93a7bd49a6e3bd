"""Overview figures: the capability matrix, each suite's score along the chain, the CL metrics.

* ``overview/capability-matrix``: a heatmap, checkpoints x suites; rows are the base and
  the stages in curriculum order, then single-task oracles, then consolidated models (and
  any other checkpoint); columns are in-domain suites, then out-of-domain, then general.
* ``overview/chain-scores``: every suite's score at each checkpoint of the chain, the
  peak of each marked, so that one sees which stage loses a skill.
* ``overview/cl-metrics``: the continual-learning metrics of the chain as a table
  (formulas in docs/cl-metrics.md).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from aclarena.diagnostics.cl_metrics import METRIC_LABELS as CL_LABELS
from aclarena.errors import AclarenaError
from aclarena.figures import register_figure
from aclarena.store.capability import CapabilityMatrix, chain_data, load_matrix, stage_chains

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

SCORES = {"mean": "greedy accuracy", "avg_k_mean": "avg@k (sampled)"}
ROLE_DASH = {"id": "solid", "ood": "dash", "general": "dot", "other": "dashdot"}
# the figures say them in sentence case
METRIC_LABELS = {k: v[0].upper() + v[1:] for k, v in CL_LABELS.items()}


def row_groups(matrix: CapabilityMatrix, manifest: Manifest) -> list[tuple[str, str]]:
    """``(checkpoint, group)`` in display order: chain(s) from the base, oracles, consolidated, others."""
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    try:
        chains = stage_chains(manifest)
    except AclarenaError:
        chains = []
    for chain in chains:
        for spec in chain:
            if spec.name not in seen:
                rows.append((spec.name, "base" if spec.kind == "base" else "stage"))
                seen.add(spec.name)
    for kind in ("oracle", "consolidated"):
        for spec in manifest:
            if spec.kind == kind and spec.name not in seen:
                rows.append((spec.name, kind))
                seen.add(spec.name)
    for spec in manifest:
        if spec.name not in seen:
            rows.append((spec.name, spec.kind))
            seen.add(spec.name)
    for name in matrix.checkpoints:  # scored but no longer in the manifest
        if name not in seen:
            rows.append((name, "other"))
            seen.add(name)
    present = set(matrix.checkpoints)
    return [(n, g) for n, g in rows if n in present]


def capability_heatmap(matrix: CapabilityMatrix, manifest: Manifest, what: str = "mean") -> go.Figure:
    """Checkpoints x suites, scores in [0, 1]; error cells marked, missing cells blank."""
    rows = row_groups(matrix, manifest)
    names = [n for n, _ in rows]
    z = matrix.array(names, matrix.suites, what)
    text = []
    for n, row in zip(names, z, strict=True):
        line = []
        for s, v in zip(matrix.suites, row, strict=True):
            cell = matrix.get(n, s)
            line.append("error" if cell is not None and not cell.ok else ("" if math.isnan(v) else f"{v:.2f}"))
        text.append(line)
    labels = [f"{n} ({g})" if g not in ("stage", "base") else n for n, g in rows]
    hover = [[(matrix.get(n, s).error if matrix.get(n, s) is not None and not matrix.get(n, s).ok else "")
              for s in matrix.suites] for n in names]
    fig = go.Figure(go.Heatmap(
        z=z, x=matrix.suites, y=labels, text=text, texttemplate="%{text}", zmin=0, zmax=1,
        colorscale="Viridis", colorbar=dict(title=SCORES.get(what, what)), customdata=hover,
        hovertemplate="%{y}<br>%{x}: %{z:.3f}<br>%{customdata}<extra></extra>", hoverongaps=False,
    ))
    fig.update_layout(title=f"Capability matrix ({SCORES.get(what, what)})", template="plotly_white",
                      yaxis=dict(autorange="reversed", title=None), xaxis=dict(title=None, side="top"),
                      height=max(320, 60 + 38 * len(names)), margin=dict(l=160, t=110))
    return fig


def chain_lines(matrix: CapabilityMatrix, manifest: Manifest, chain: str | None = None,
                what: str = "mean") -> go.Figure:
    """Each suite's score at every checkpoint of the chain; a star marks each suite's peak."""
    from aclarena.store.capability import pick_chain

    names = [s.name for s in pick_chain(manifest, chain)]
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly
    fig = go.Figure()
    values = matrix.array(names, matrix.suites, what)
    for j, suite in enumerate(matrix.suites):
        col = values[:, j]
        if np.isnan(col).all():
            continue
        role = matrix.suite_info.get(suite, (None, "other"))[1]
        color = palette[j % len(palette)]
        fig.add_trace(go.Scatter(x=names, y=col, mode="lines+markers", name=suite, legendgroup=suite,
                                 line=dict(dash=ROLE_DASH.get(role, "solid"), color=color),
                                 hovertemplate=f"{suite}<br>%{{x}}: %{{y:.3f}}<extra></extra>"))
        peak = int(np.nanargmax(col))
        fig.add_trace(go.Scatter(x=[names[peak]], y=[col[peak]], mode="markers", legendgroup=suite, showlegend=False,
                                 marker=dict(symbol="star", size=14, color=color, line=dict(width=1, color="#333")),
                                 hovertemplate=f"{suite} peaks at %{{x}}: %{{y:.3f}}<extra></extra>"))
    fig.update_layout(title="Scores along the chain (star: peak; solid in-domain, dashed out-of-domain, dotted general)",
                      template="plotly_white", xaxis=dict(title="checkpoint (curriculum order)"),
                      yaxis=dict(title=SCORES.get(what, what), range=[-0.02, 1.02]))
    return fig


def metric_rows(matrix: CapabilityMatrix, manifest: Manifest, reader: StoreReader | None,
                chain: str | None = None, what: str = "mean") -> tuple[list[dict[str, Any]], list[str]]:
    """The CL metrics of a chain as ``[{"metric", "value"}]`` rows, and notes."""
    from aclarena.diagnostics.cl_metrics import cl_report

    data = chain_data(matrix, manifest, reader, chain=chain, what=what)
    rep = cl_report(data.R, data.tasks, base=data.base, oracle=data.oracle, items=data.items)
    rows = [{"metric": METRIC_LABELS[k], "key": k, "value": None if math.isnan(v) else v}
            for k, v in rep.summary().items()]
    notes = [f"stages: {' -> '.join(data.stages)}; suites: {', '.join(data.suites)}", *data.notes]
    return rows, notes


def metrics_table_figure(rows: list[dict[str, Any]], title: str) -> go.Figure:
    fig = go.Figure(go.Table(
        header=dict(values=["metric", "value"], align="left"),
        cells=dict(values=[[r["metric"] for r in rows],
                           ["-" if r["value"] is None else f"{r['value']:.3f}" for r in rows]], align="left"),
    ))
    fig.update_layout(title=title, margin=dict(t=60, b=10))
    return fig


def _chains(manifest: Manifest) -> list[str | None]:
    try:
        chains = stage_chains(manifest)
    except AclarenaError:
        return []
    chains = [c for c in chains if len(c) > 1]
    return [None] if len(chains) == 1 else [c[-1].name for c in chains]


@register_figure("overview/capability-matrix", "Capability matrix", width=1000, height=560)
def _matrix(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    matrix = load_matrix(reader, manifest)
    if not matrix.cells:
        return []
    return [("", capability_heatmap(matrix, manifest))]


@register_figure("overview/chain-scores", "Scores along the chain", width=1000, height=520)
def _chain(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    matrix = load_matrix(reader, manifest)
    if not matrix.cells:
        return []
    return [(leaf or "", chain_lines(matrix, manifest, leaf)) for leaf in _chains(manifest)]


@register_figure("overview/cl-metrics", "Continual-learning metrics", width=800, height=420)
def _metrics(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    matrix = load_matrix(reader, manifest)
    if not matrix.cells:
        return []
    out = []
    for leaf in _chains(manifest):
        try:
            rows, _ = metric_rows(matrix, manifest, reader, leaf)
        except AclarenaError:
            continue
        out.append((leaf or "", metrics_table_figure(rows, "Continual-learning metrics"
                                                     + (f" (chain to {leaf})" if leaf else ""))))
    return out
