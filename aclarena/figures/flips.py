"""Figures of ``aclarena-diag flips``: the swap test's recovery curve against its random control,
where divergences fall in entropy, and both distributions at one item's divergence point.

Builders take the payload of :func:`aclarena.results.flips.read_flips_data`; the dashboard's
Flips page and ``export`` draw the same figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from aclarena.figures import register_figure
from aclarena.figures.palette import SERIES, TEMPLATE
from aclarena.results.flips import FlipsData, list_flips, read_flips_data

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

#: the two arms of the swap test, told apart by the line: KL-ranked solid, the random control dotted
ARMS = {"kl": ("top KL(E‖L) swaps", "solid"), "random": ("random swaps (control)", "dot")}
#: the two directions, one colour each (the same in the divergence histogram)
DIRECTIONS = {"forgot": "#d62728", "gained": "#1f77b4"}


def _label(data: FlipsData) -> str:
    return f"{data.early} → {data.late} on {data.suite}"


def recovery_figure(data: FlipsData) -> go.Figure:
    """Share of forgotten items recovered (the later checkpoint L generating, the earlier E's tokens let
    through) per budget, the KL-ranked swaps (solid) against the random control (dotted), with 95% Wilson
    intervals; the reverse direction (gained items, E broken by L's tokens) in the gained colour."""
    fig = go.Figure()
    curves = data.summary.get("curves", {})
    for direction, color, what in (("forward", DIRECTIONS["forgot"], "forgotten items recovered"),
                                   ("reverse", DIRECTIONS["gained"], "gained items broken in E")):
        c = curves.get(direction)
        stored = data.curve(direction)
        if not c or stored is None:
            continue
        budgets = stored["budgets"]
        for arm, (name, dash) in ARMS.items():
            s = c[arm]
            fig.add_trace(go.Scatter(
                x=budgets, y=s["share"], mode="lines+markers", name=f"{what}: {name}",
                line={"color": color, "dash": dash},
                error_y={"type": "data", "symmetric": False,
                         "array": [h - m for h, m in zip(s["high"], s["share"], strict=True)],
                         "arrayminus": [m - lo for m, lo in zip(s["share"], s["low"], strict=True)]},
                customdata=s["n"], hovertemplate="%{x}% of tokens: %{y:.2f} (n = %{customdata})<extra></extra>"))
    n = len(data.forward["items"]) if data.forward else 0
    ticks = data.forward["budgets"] if data.forward else []
    # the pair and the count on a second line: in the page's half-width panel one line ran past its edge
    fig.update_layout(title=f"Swap test<br><sup>{_label(data)}: {n} forgotten items reproduced</sup>",
                      xaxis={"title": "budget (% of E's trajectory tokens)", "type": "log", "tickvals": ticks,
                             "ticktext": [f"{b:g}%" for b in ticks]},
                      yaxis={"title": "share of items", "range": [-0.05, 1.05]}, template=TEMPLATE,
                      legend={"orientation": "h", "y": -0.2})
    if not n:
        fig.add_annotation(text="no forgotten item was reproduced by the greedy replays: nothing was swapped",
                           showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def divergence_figure(data: FlipsData) -> go.Figure:
    """Where each item's divergence falls among its trajectory's positions by E's entropy (percentile),
    forgotten vs gained, with the top-share line."""
    top = float(data.settings.get("top", 0.06))
    fig = go.Figure()
    for direction, color in DIRECTIONS.items():
        rows = [r for r in data.items if r["direction"] == direction and r["reproduced"] and r["diverge"] >= 0]
        # percentile 100 (the trajectory's highest entropy) goes in the last bin, not past it
        fig.add_trace(go.Histogram(x=[min(r["entropy_pct"], 99.99) for r in rows], name=f"{direction} ({len(rows)})",
                                   xbins={"start": 0, "end": 100, "size": 5}, marker_color=color, opacity=0.7))
    fig.add_vline(x=100 * (1 - top), line_dash="dot", annotation_text=f"top {top:g}")
    c = data.summary["chance"].get("forgot", {})
    note = ""
    if c.get("n"):
        note = (f"forgot: {c['share']:.2f} in the top set [{c['share_low']:.2f}, {c['share_high']:.2f}], "
                f"chance {c['chance']:.2f} [{c['chance_low']:.2f}, {c['chance_high']:.2f}]")
    sub = "; ".join(x for x in (_label(data), note) if x)
    fig.update_layout(title=f"Entropy percentile of the divergence point<br><sup>{sub}</sup>",
                      xaxis={"title": "E's entropy percentile at the divergence (100 = the trajectory's highest)"},
                      yaxis={"title": "items"}, barmode="overlay", template=TEMPLATE)
    return fig


def distributions_figure(item: dict[str, Any], early: str = "", late: str = "") -> go.Figure:
    """The earlier (E, ``early``) and later (L, ``late``) checkpoint's top-k next-token probabilities at one
    item's divergence point; the axis fitted to the largest probability shown (a fixed 0-1 hid 0.005),
    each bar labelled with its value."""
    fig = go.Figure()
    top = 0.0
    for side, name, color in (("e_topk", f"earlier checkpoint (E){' ' + early if early else ''}", SERIES[2]),
                              ("l_topk", f"later checkpoint (L){' ' + late if late else ''}", SERIES[3])):
        pairs = item.get(side) or []
        ps = [float(p) for _, p in pairs]
        top = max([top, *ps])
        fig.add_trace(go.Bar(x=[repr(t) for t, _ in pairs], y=ps, name=name, marker_color=color,
                             text=[f"{p:.3g}" for p in ps], textposition="outside", cliponaxis=False,
                             hovertemplate="%{x}: p = %{y:.4g}<extra>" + name + "</extra>"))
    e = f"E ({early})" if early else "the earlier checkpoint E"
    ell = f"L ({late})" if late else "the later checkpoint L"
    fig.update_layout(title=f"At position {item.get('diverge')}: {e} chose {item.get('e_token')!r}, "
                            f"{ell} puts {item.get('l_token')!r} first", barmode="group", template=TEMPLATE,
                      yaxis={"title": "probability", "range": [0, (top or 1.0) * 1.18]}, xaxis={"title": "token"},
                      height=380, legend={"orientation": "h", "x": 0, "y": -0.25}, margin={"b": 110})
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
