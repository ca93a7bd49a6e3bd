"""Drift-monitor figures: the early-warning series of a training run and the lead-time table.

``monitor/series`` (one figure per monitored phase): one panel per metric (token drift and
flip rate at high-entropy positions, whole-sequence KL, forward KL to the stage start, and
the training loss), a line per probe set against the training step, the absolute
thresholds as dashed lines and every warning as a marker. ``monitor/lead-time``: the
ground-truth accuracy of the earlier domains along the measured stage, with each
predictor's first warning and each domain's first significant drop marked.

The series come from ``series.h5`` (read under SWMR, so a live run can be drawn); the
lead-time result from results.h5.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from aclarena.figures import register_figure

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.monitor_series import MonitorView
    from aclarena.store.results import StoreReader

PANELS = (
    ("kl_high", "KL at high-entropy positions (nats)"),
    ("flip_high", "flip rate at high-entropy positions"),
    ("kl_all", "whole-sequence KL (nats)"),
    ("fkl", "forward KL to the stage start (nats)"),
    ("loss", "training loss"),
)
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _finite(values: Any) -> list[float | None]:
    return [float(v) if v is not None and math.isfinite(float(v)) else None for v in values]


def series_figure(view: MonitorView) -> go.Figure:
    """The monitor's series of one phase: a panel per metric, thresholds dashed, warnings marked."""
    rules = (view.settings or {}).get("rules") or {}
    fig = make_subplots(rows=len(PANELS), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[t for _, t in PANELS])
    for row, (metric, _) in enumerate(PANELS, start=1):
        if metric == "loss":
            tr = view.train
            if len(tr.get("step", [])):
                fig.add_trace(go.Scatter(x=tr["step"].tolist(), y=_finite(tr["loss"].tolist()), mode="lines+markers",
                                         name="loss", line=dict(color="#444"), marker=dict(size=4),
                                         legendgroup="loss", hovertemplate="step %{x}<br>loss %{y:.4g}<extra></extra>"),
                              row=row, col=1)
        else:
            for k, (probe, cols) in enumerate(view.probes.items()):
                if metric not in cols:
                    continue
                fig.add_trace(go.Scatter(
                    x=cols["step"].tolist(), y=_finite(cols[metric].tolist()), mode="lines+markers", name=probe,
                    legendgroup=probe, showlegend=row == 1, line=dict(color=PALETTE[k % len(PALETTE)]),
                    marker=dict(size=6),
                    hovertemplate=f"{probe}<br>step %{{x}}<br>{metric} %{{y:.4g}}<extra></extra>"), row=row, col=1)
        rule = rules.get(metric) or {}
        if rule.get("threshold") is not None:
            fig.add_hline(y=float(rule["threshold"]), line=dict(color="#d62728", dash="dash", width=1),
                          annotation_text=f"threshold {rule['threshold']:g}", annotation_position="top left",
                          row=row, col=1)
        ev = [e for e in view.events if e["metric"] == metric]
        if ev:
            fig.add_trace(go.Scatter(
                x=[e["step"] for e in ev], y=[e["value"] for e in ev], mode="markers", name="warning",
                legendgroup="warning", showlegend=not any(t.name == "warning" for t in fig.data),
                marker=dict(symbol="x", size=13, color="#d62728", line=dict(width=2)),
                customdata=[[e["series"], e["rule"], e["limit"], e["action"]] for e in ev],
                hovertemplate="WARNING %{customdata[0]}<br>step %{x}<br>value %{y:.4g}<br>rule %{customdata[1]}, "
                              "limit %{customdata[2]:.4g}<br>action %{customdata[3]}<extra></extra>"), row=row, col=1)
    n_checks = sum(len(c.get("step", [])) for c in view.probes.values())
    fig.update_layout(
        title=f"Drift monitor: {view.label} ({n_checks} checks, {len(view.events)} warnings)",
        template="plotly_white", height=170 * len(PANELS) + 120, legend=dict(orientation="h", y=1.04, x=0),
        uirevision=view.label, margin=dict(t=110),
    )
    fig.update_xaxes(title_text="training step", row=len(PANELS), col=1)
    return fig


def lead_time_figure(result: dict[str, Any]) -> go.Figure:
    """Ground-truth accuracy per earlier domain along the stage; first drops and first warnings marked."""
    fig = go.Figure()
    for k, (domain, pts) in enumerate(result.get("ground_truth", {}).items()):
        color = PALETTE[k % len(PALETTE)]
        fig.add_trace(go.Scatter(x=[p["step"] for p in pts], y=[p["accuracy"] for p in pts], mode="lines+markers",
                                 name=f"{domain} accuracy", line=dict(color=color),
                                 customdata=[[p["lost"], p["gained"], p["pvalue"]] for p in pts],
                                 hovertemplate=f"{domain}<br>step %{{x}}<br>accuracy %{{y:.2f}}<br>lost %{{customdata[0]}}, "
                                               "gained %{customdata[1]}<br>p %{customdata[2]:.3g}<extra></extra>"))
        drop = next((r["drop_step"] for r in result["table"] if r["domain"] == domain), None)
        if drop is not None:
            fig.add_vline(x=drop, line=dict(color=color, dash="dash"), annotation_text=f"{domain} drop")
    rows = [r for r in result.get("table", []) if r["warn_step"] is not None]
    if rows:
        fig.add_trace(go.Scatter(
            x=[r["warn_step"] for r in rows], y=[-0.05 - 0.04 * (i % 5) for i, _ in enumerate(rows)], mode="markers",
            name="first warning", marker=dict(symbol="triangle-up", size=11, color="#d62728"),
            customdata=[[r["domain"], r["predictor"], "-" if r["lead"] is None else r["lead"]] for r in rows],
            hovertemplate="%{customdata[1]} (%{customdata[0]})<br>first warning at step %{x}<br>lead "
                          "%{customdata[2]} steps<extra></extra>"))
    fig.update_layout(title=f"Lead time of the warnings, {result.get('stage', '?')} stage", template="plotly_white",
                      xaxis_title="training step of the stage", yaxis_title="accuracy on fixed items",
                      yaxis=dict(range=[-0.3, 1.05]))
    return fig


@register_figure("monitor/series", "Drift monitor series", width=900, height=970)
def _series(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.errors import AclarenaError
    from aclarena.store import SERIES_NAME
    from aclarena.store.monitor_series import load_monitor, monitor_labels
    from aclarena.store.series import read_series

    if reader is None:
        return []
    run_dir = Path(reader.path).parent
    if not (run_dir / SERIES_NAME).is_file():
        return []
    try:
        with read_series(run_dir) as r:
            views = [load_monitor(r, lab) for lab in monitor_labels(r)]
    except AclarenaError:
        return []
    return [(v.label.replace("/", "-"), series_figure(v)) for v in views if v.probes]


@register_figure("monitor/lead-time", "Lead time of the drift warnings", width=900, height=520)
def _lead(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.store.monitor_series import LEAD_KEY

    if reader is None or not reader.has(LEAD_KEY):
        return []
    return [(stage, lead_time_figure(reader.read(f"{LEAD_KEY}/{stage}/result"))) for stage in reader.keys(LEAD_KEY)]
