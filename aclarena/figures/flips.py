"""Figures of ``aclarena-diag flips``: the swap test's recovery curve against its random control,
where divergences fall in entropy, and both distributions at one item's divergence point.

Builders take the plain data of :func:`aclarena.store.flips.read_flips_data`; the dashboard's
Flips page and ``export`` draw the same figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from aclarena.figures import register_figure
from aclarena.store.flips import list_flips, read_flips_data

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

ARMS = {"kl": ("top KL(E‖L)", "#d62728"), "random": ("random control", "#7f7f7f")}


def _label(data: dict[str, Any]) -> str:
    a = data["attrs"]
    return f"{a['early']} → {a['late']} on {a['suite']}"


def recovery_figure(data: dict[str, Any]) -> go.Figure:
    """Share of forgotten items recovered (L generating, E's tokens let through) per budget, the KL-ranked
    swaps against the random control, with 95% Wilson intervals; the reverse direction dashed."""
    fig = go.Figure()
    curves = data["summary"].get("curves", {})
    for direction, dash, what in (("forward", "solid", "recovered"), ("reverse", "dash", "E broken")):
        c = curves.get(direction)
        if not c:
            continue
        budgets = data[direction]["budgets"]
        for arm, (name, color) in ARMS.items():
            s = c[arm]
            fig.add_trace(go.Scatter(
                x=budgets, y=s["share"], mode="lines+markers", name=f"{what}: {name}",
                line={"color": color, "dash": dash},
                error_y={"type": "data", "symmetric": False,
                         "array": [h - m for h, m in zip(s["high"], s["share"], strict=True)],
                         "arrayminus": [m - lo for m, lo in zip(s["share"], s["low"], strict=True)]},
                customdata=s["n"], hovertemplate="%{x}% of tokens: %{y:.2f} (n = %{customdata})<extra></extra>"))
    n = len(data["forward"]["items"]) if data.get("forward") else 0
    ticks = data["forward"]["budgets"] if data.get("forward") else []
    fig.update_layout(title=f"Swap test: {_label(data)} ({n} forgotten items reproduced)",
                      xaxis={"title": "budget (% of E's trajectory tokens)", "type": "log", "tickvals": ticks,
                             "ticktext": [f"{b:g}%" for b in ticks]},
                      yaxis={"title": "share of items", "range": [-0.05, 1.05]}, template="plotly_white",
                      legend={"orientation": "h", "y": -0.2})
    if not n:
        fig.add_annotation(text="no forgotten item was reproduced by the greedy replays: nothing was swapped",
                           showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def divergence_figure(data: dict[str, Any]) -> go.Figure:
    """Where each item's divergence falls among its trajectory's positions by E's entropy (percentile),
    forgotten vs gained, with the top-share line."""
    top = float(data["attrs"]["settings"].get("top", 0.06))
    fig = go.Figure()
    for direction, color in (("forgot", "#d62728"), ("gained", "#1f77b4")):
        rows = [r for r in data["items"] if r["direction"] == direction and r["reproduced"] and r["diverge"] >= 0]
        # percentile 100 (the trajectory's highest entropy) goes in the last bin, not past it
        fig.add_trace(go.Histogram(x=[min(r["entropy_pct"], 99.99) for r in rows], name=f"{direction} ({len(rows)})",
                                   xbins={"start": 0, "end": 100, "size": 5}, marker_color=color, opacity=0.7))
    fig.add_vline(x=100 * (1 - top), line_dash="dot", annotation_text=f"top {top:g}")
    c = data["summary"]["chance"].get("forgot", {})
    note = ""
    if c.get("n"):
        note = (f"forgot: {c['share']:.2f} in the top set [{c['share_low']:.2f}, {c['share_high']:.2f}], "
                f"chance {c['chance']:.2f} [{c['chance_low']:.2f}, {c['chance_high']:.2f}]")
    fig.update_layout(title=f"Entropy percentile of the divergence point: {_label(data)}<br><sup>{note}</sup>",
                      xaxis={"title": "E's entropy percentile at the divergence (100 = the trajectory's highest)"},
                      yaxis={"title": "items"}, barmode="overlay", template="plotly_white")
    return fig


def distributions_figure(item: dict[str, Any]) -> go.Figure:
    """E's and L's top-k next-token probabilities at one item's divergence point."""
    fig = go.Figure()
    for side, name, color in (("e_topk", "E", "#2ca02c"), ("l_topk", "L", "#d62728")):
        pairs = item.get(side) or []
        fig.add_trace(go.Bar(x=[repr(t) for t, _ in pairs], y=[p for _, p in pairs], name=name, marker_color=color))
    fig.update_layout(title=f"At position {item.get('diverge')}: E chose {item.get('e_token')!r}, "
                            f"L's top-1 {item.get('l_token')!r}", barmode="group", template="plotly_white",
                      yaxis={"title": "probability", "range": [0, 1]}, xaxis={"title": "token"}, height=360)
    return fig


def _suffix(entry: dict[str, str]) -> str:
    return entry["key"].split("/", 1)[1].replace("/", "-")


@register_figure("flips/recovery", "Swap test: forgotten items recovered per budget, against a random control")
def _recovery(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    if reader is None:
        return []
    return [(_suffix(e), recovery_figure(read_flips_data(reader, e["key"]))) for e in list_flips(reader)]


@register_figure("flips/divergence", "Entropy percentile of the divergence points")
def _divergence(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    if reader is None:
        return []
    return [(_suffix(e), divergence_figure(read_flips_data(reader, e["key"]))) for e in list_flips(reader)]
