"""Consolidation and routing figures.

* ``consolidation/table``: the study-shaped comparison (``aclarena-diag compare``) as a
  heatmap, rows = oracles, sequential end point, methods, MLE; columns = in-domain suites,
  then out-of-domain; each cell shows mean ± std over replicates.
* ``consolidation/bars``: each method's score per suite as grouped bars, with error bars
  (std over replicates), the oracles' in-domain scores as a dashed reference.
* ``consolidation/radar``: each method's in-domain profile on one polar chart.
* ``consolidation/repair``: the four-part score of each repair (healing, preservation,
  non-damage, target retention) as grouped bars with 95% bootstrap intervals.
* ``router/accuracy``: each router's accuracy per context type, with chance marked.
* ``router/confusion``: each router's confusion matrix (experts and ``none``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from aclarena.figures import register_figure
from aclarena.figures.palette import DOMAIN_SERIES, KIND_COLORS, SERIES, TEMPLATE

if TYPE_CHECKING:
    from aclarena.results.comparison import Comparison
    from aclarena.results.routing import RoutingData
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

ROLE_COLORS = {"oracle": KIND_COLORS["oracle"], "end": KIND_COLORS["stage"], "method": SERIES[1],
               "mle": KIND_COLORS["consolidated"]}
PALETTE = SERIES


def row_colours(cmp: Comparison) -> dict[str, str]:
    """A distinct colour per row: each oracle its own (the domain colours, in row order), the sequential
    end point the stages' blue, methods and MLE the remaining colours of the series."""
    out: dict[str, str] = {}
    oracles = [r.label for r in cmp.rows if r.role == "oracle"]
    for i, label in enumerate(oracles):
        out[label] = DOMAIN_SERIES[i % len(DOMAIN_SERIES)]
    for r in cmp.rows:
        if r.role == "end":
            out[r.label] = KIND_COLORS["stage"]
    rest = [c for c in SERIES if c not in out.values()] or list(SERIES)
    for i, r in enumerate(x for x in cmp.rows if x.label not in out):
        out[r.label] = rest[i % len(rest)]
    return out


def _comparison(reader: StoreReader | None, manifest: Manifest, router: str = "rule") -> Comparison | None:
    from aclarena.errors import AclarenaError
    from aclarena.results.capability import load_matrix
    from aclarena.results.comparison import comparison

    if reader is None:
        return None
    matrix = load_matrix(reader, manifest)
    if not matrix.cells:
        return None
    try:
        return comparison(matrix, manifest, reader, router=router)
    except AclarenaError:
        return None


def comparison_heatmap(cmp: Comparison) -> go.Figure:
    """Rows x suites, colour = mean score, text = mean ± std."""
    suites = cmp.suites
    labels = [r.label for r in cmp.rows]
    z = np.array([[r.cells[s].mean for s in suites] for r in cmp.rows], dtype=float).reshape(len(labels), len(suites))
    text = [[r.cells[s].text(2) for s in suites] for r in cmp.rows]
    cols = [f"{s} (id)" if s in cmp.in_domain else s for s in suites]
    fig = go.Figure(go.Heatmap(z=z, x=cols, y=labels, text=text, texttemplate="%{text}", zmin=0, zmax=1,
                               colorscale="Viridis", colorbar={"title": cmp.score},
                               hovertemplate="%{y}<br>%{x}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(template=TEMPLATE, title=f"Consolidation methods ({cmp.score}, mean ± std over replicates)",
                      margin={"l": 260, "r": 20, "t": 60, "b": 60}, height=max(320, 40 * len(labels) + 140))
    return fig


def method_bars(cmp: Comparison, rows: Sequence[str] | None = None) -> go.Figure:
    """Grouped bars per suite, one bar group per row (methods and references), std as error bars."""
    fig = go.Figure()
    chosen = [r for r in cmp.rows if rows is None or r.label in rows]
    colours = row_colours(cmp)
    for r in chosen:
        color = colours[r.label]
        fig.add_bar(name=r.label, x=cmp.suites, y=[_nan_none(r.cells[s].mean) for s in cmp.suites],
                    error_y={"type": "data", "array": [_nan_zero(r.cells[s].std) for s in cmp.suites], "visible": True},
                    marker_color=color, opacity=0.6 if r.role in ("oracle", "end") else 1.0,
                    marker_pattern_shape="/" if r.role in ("oracle", "end") else "")
    fig.update_layout(barmode="group", template=TEMPLATE, title=f"Scores per suite ({cmp.score})", yaxis={"range": [0, 1], "title": cmp.score},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def method_radar(cmp: Comparison, rows: Sequence[str] | None = None) -> go.Figure:
    """Each row's in-domain scores on a polar chart (all suites when there are fewer than 3 in-domain)."""
    axes = cmp.in_domain if len(cmp.in_domain) >= 3 else cmp.suites
    fig = go.Figure()
    chosen = [r for r in cmp.rows if rows is None or r.label in rows]
    colours = row_colours(cmp)
    for r in chosen:
        vals = [_nan_zero(r.cells[s].mean) for s in axes]
        fig.add_trace(go.Scatterpolar(r=[*vals, vals[0]] if vals else [], theta=[*axes, axes[0]] if axes else [],
                                      name=r.label, mode="lines+markers",
                                      line={"dash": "dash" if r.role in ("oracle", "end") else "solid",
                                            "color": colours[r.label]}))
    fig.update_layout(template=TEMPLATE, title=f"In-domain profile ({cmp.score})", polar={"radialaxis": {"range": [0, 1]}},
                      legend={"orientation": "h", "y": -0.15})
    return fig


def router_accuracy(reports: dict[str, RoutingData]) -> go.Figure:
    """Accuracy per context type, one bar group per router; chance as markers."""
    fig = go.Figure()
    types: list[str] = []
    for rep in reports.values():
        for t in rep.accuracy["type"]:
            if t not in types:
                types.append(t)
    for i, (name, rep) in enumerate(reports.items()):
        acc = dict(zip(rep.accuracy["type"], rep.accuracy["accuracy"], strict=True))
        abst = dict(zip(rep.accuracy["type"], rep.accuracy["abstain_rate"], strict=True))
        fig.add_bar(name=name, x=types, y=[_nan_none(acc.get(t, math.nan)) for t in types],
                    customdata=[_nan_none(abst.get(t, math.nan)) for t in types], marker_color=PALETTE[i % len(PALETTE)],
                    hovertemplate="%{x}: accuracy %{y:.2f}, no expert %{customdata:.2f}<extra>" + name + "</extra>")
    first = next(iter(reports.values()), None)
    if first is not None:
        chance = dict(zip(first.accuracy["type"], first.accuracy["chance"], strict=True))
        fig.add_scatter(name="chance (random expert)", x=types, y=[chance.get(t) for t in types], mode="markers",
                        marker={"symbol": "line-ew-open", "size": 28, "color": "black"})
    fig.update_layout(barmode="group", template=TEMPLATE, title="Routing accuracy per context type", yaxis={"range": [0, 1.05],
                      "title": "accuracy"}, legend={"orientation": "h", "y": -0.25})
    return fig


def confusion_heatmap(name: str, rep: RoutingData) -> go.Figure:
    """Rows: the right answer; columns: what the router chose (mixed contexts excluded)."""
    labels = list(rep.labels)
    c = np.asarray(rep.confusion, dtype=float)
    fig = go.Figure(go.Heatmap(z=c, x=labels, y=labels, text=c.astype(int), texttemplate="%{text}",
                               colorscale="Blues", hovertemplate="answer %{y}, routed %{x}: %{z}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="right answer")
    fig.update_xaxes(title="routed to")
    fig.update_layout(template=TEMPLATE, title=f"Confusion matrix: {name} router", width=560, height=480)
    return fig


def _nan_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _nan_zero(x: float) -> float:
    return 0.0 if x is None or math.isnan(x) else float(x)


@register_figure("consolidation/table", "Consolidation methods", width=1100, height=560)
def _table(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    cmp = _comparison(reader, manifest)
    if cmp is None or not any(r.role in ("method", "mle") for r in cmp.rows):
        return []
    return [("", comparison_heatmap(cmp))]


@register_figure("consolidation/bars", "Consolidation methods per suite", width=1100, height=560)
def _bars(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    cmp = _comparison(reader, manifest)
    if cmp is None or not any(r.role in ("method", "mle") for r in cmp.rows):
        return []
    return [("", method_bars(cmp))]


@register_figure("consolidation/radar", "In-domain profile of each method", width=800, height=640)
def _radar(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    cmp = _comparison(reader, manifest)
    if cmp is None or not any(r.role in ("method", "mle") for r in cmp.rows):
        return []
    return [("", method_radar(cmp))]


def repair_score_bars(rows: Sequence[Any]) -> go.Figure:
    """One group of bars per repair (:class:`aclarena.results.comparison.RepairScoreRow`), one bar per part,
    error bars = the 95% bootstrap interval; parts without suites are left out (no bar)."""
    from aclarena.diagnostics.repair_score import PARTS

    fig = go.Figure()
    labels = [r.checkpoint for r in rows]
    for k, part in enumerate(PARTS):
        ps = [r.score.part(part) for r in rows]
        y = [_nan_none(p.value) for p in ps]
        plus = [_nan_zero(p.ci[1] - p.value) for p in ps]
        minus = [_nan_zero(p.value - p.ci[0]) for p in ps]
        text = [f"{len(p.suites)} suites: {', '.join(p.suites)}" for p in ps]
        fig.add_trace(go.Bar(name=part.replace("_", " "), x=labels, y=y, marker_color=PALETTE[k], text=text,
                             textposition="none", hovertemplate="%{x}<br>%{fullData.name}: %{y:.2f}<br>%{text}"
                             "<extra></extra>",
                             error_y={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus}))
    fig.add_hline(y=1.0, line_dash="dash", line_color="#444", annotation_text="1 = all recovered / kept")
    fig.add_hline(y=0.0, line_color="#888")
    fig.update_layout(barmode="group", template=TEMPLATE, title="Repairs: four-part score (95% bootstrap intervals)",
                      yaxis_title="share", legend_title_text="part", margin={"t": 60})
    return fig


@register_figure("consolidation/repair", "Repairs: four-part score", width=1000, height=520)
def _repair(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.results.capability import load_matrix
    from aclarena.results.comparison import repair_scores

    if reader is None:
        return []
    matrix = load_matrix(reader, manifest)
    rows = repair_scores(reader, matrix, manifest) if matrix.cells else []
    return [("", repair_score_bars(rows))] if rows else []


@register_figure("router/accuracy", "Routing accuracy per context type", width=1000, height=520)
def _router_accuracy(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.results.routing import read_reports

    reports = read_reports(reader)
    return [("", router_accuracy(reports))] if reports else []


@register_figure("router/confusion", "Routing confusion matrix", width=560, height=480)
def _router_confusion(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.results.routing import read_reports

    return [(name, confusion_heatmap(name, rep)) for name, rep in read_reports(reader).items()]
