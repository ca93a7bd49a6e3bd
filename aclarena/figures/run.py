"""Figures about the run itself: the checkpoint lineage."""

from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

from aclarena.figures import register_figure
from aclarena.figures.palette import KIND_COLORS as _KINDS
from aclarena.figures.palette import TEMPLATE

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

KIND_COLORS = {k: _KINDS[k] for k in ("base", "stage", "oracle", "consolidated")}


def lineage_figure(manifest: Manifest) -> go.Figure:
    """Checkpoints as a tree: x = distance from the root, y = order; edges parent -> child. Each node's
    ``customdata[3]`` is its checkpoint name (the dashboard links a clicked node to its pages)."""
    depth = {s.name: len(manifest.ancestors(s.name)) for s in manifest}
    rows: dict[int, int] = {}
    pos: dict[str, tuple[float, float]] = {}
    for s in manifest:
        d = depth[s.name]
        pos[s.name] = (d, -rows.get(d, 0))
        rows[d] = rows.get(d, 0) + 1
    fig = go.Figure()
    for s in manifest:
        for ref, dash in ((s.parent, "solid"), (s.on, "dot")):
            if ref is not None:
                (x0, y0), (x1, y1) = pos[ref], pos[s.name]
                fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip",
                                         line=dict(color="#999", dash=dash), showlegend=False))
    for kind, color in KIND_COLORS.items():
        members = [s for s in manifest if s.kind == kind]
        if not members:
            continue
        fig.add_trace(go.Scatter(
            x=[pos[s.name][0] for s in members],
            y=[pos[s.name][1] for s in members],
            mode="markers+text",
            text=[s.name for s in members],
            textposition="top center",
            marker=dict(size=16, color=color),
            name=kind,
            customdata=[[s.domain or "-", s.phase or "-", s.parent or "-", s.name] for s in members],
            hovertemplate="%{text}<br>domain %{customdata[0]}<br>phase %{customdata[1]}<br>parent %{customdata[2]}"
                          "<br>(click: the pages that show it)<extra></extra>",
        ))
    fig.update_layout(title="Checkpoint lineage", xaxis=dict(title="steps from the base", dtick=1),
                      yaxis=dict(visible=False), template=TEMPLATE)
    return fig


@register_figure("run/lineage", "Checkpoint lineage", width=900, height=420)
def _lineage(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    return [("", lineage_figure(manifest))] if len(manifest) else []
