"""Drift-monitor figures: the early-warning series of a training run and the lead-time table.

``monitor/series`` (one figure per monitored phase): one panel per metric (token drift and
flip rate at high-entropy positions, whole-sequence KL, forward KL to the stage start, every
other metric a rule watches or a warning names, and the training loss), a line per probe set
against the training step, the absolute thresholds as dashed lines and every warning as a
marker; a phase that ``monitor --lead-time`` retrained is one figure with both recordings
(the retrain dotted). ``monitor/lead-time``: the ground-truth accuracy of the earlier domains
along the measured stage, with each predictor's first warning and each domain's first
significant drop marked; :func:`lead_time_rows` is its table as ``monitor --lead-time`` prints it.

The series come from ``series.h5`` (read under SWMR, so a live run can be drawn); the
lead-time result from results.h5.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from aclarena.diagnostics.early_warning import drop_label, drop_reachable_in
from aclarena.figures import register_figure
from aclarena.figures.palette import SERIES, TEMPLATE

if TYPE_CHECKING:
    from aclarena.results.monitor_series import MonitorView
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

#: Panel titles of the monitor's metrics; the first four are always drawn, the loss comes last.
PANEL_TITLES = {
    "kl_high": "KL at high-entropy positions (nats)",
    "flip_high": "flip rate at high-entropy positions",
    "kl_all": "whole-sequence KL (nats)",
    "fkl": "forward KL to the stage start (nats)",
    "fkl_high": "forward KL to the stage start at high-entropy positions (nats)",
    "kl_low": "KL at the other positions (nats)",
    "kl_share_high": "share of the KL at high-entropy positions",
    "flip_all": "flip rate at all positions",
    "loss": "training loss",
}
DEFAULT_PANELS = ("kl_high", "flip_high", "kl_all", "fkl")
PALETTE = list(SERIES)
#: Line style of each recording of a phase: the training run itself, then a lead-time retrain.
DASHES = ("solid", "dot", "dashdot", "longdash")


def _finite(values: Any) -> list[float | None]:
    return [float(v) if v is not None and math.isfinite(float(v)) else None for v in values]


def _views(view: MonitorView | list[MonitorView]) -> list[MonitorView]:
    return list(view) if isinstance(view, list | tuple) else [view]


def panel_metrics(view: MonitorView | list[MonitorView]) -> list[str]:
    """The metrics drawn, one panel each: the default four, then every other metric that an active
    rule watches or a warning names (in the order met), then the training loss."""
    out = list(DEFAULT_PANELS)
    for v in _views(view):
        rules = (v.settings or {}).get("rules") or {}
        named = [m for m, r in rules.items() if isinstance(r, dict) and (r.get("threshold") is not None
                                                                         or r.get("trend"))]
        named += [e["metric"] for e in v.events]
        out += [m for m in dict.fromkeys(named) if m not in out and m != "loss"]
    return [*out, "loss"]


def _panel_title(metric: str) -> str:
    if metric in PANEL_TITLES:
        return PANEL_TITLES[metric]
    from aclarena.diagnostics.monitor_metrics import METRICS

    return METRICS.get(metric, metric)


def _run_name(view: MonitorView) -> str:
    from aclarena.results.monitor_series import LEAD_LABEL_PREFIX

    return "lead-time retrain" if view.label.startswith(LEAD_LABEL_PREFIX) else ""


def series_figure(view: MonitorView | list[MonitorView]) -> go.Figure:
    """The monitor's series of one phase: a panel per metric, thresholds dashed, warnings marked.

    ``view`` may be several recordings of the same phase (the training run and a lead-time retrain):
    they share the panels, each in its own line style, named "(lead-time retrain)" after the probe.
    """
    views = _views(view)
    metrics = panel_metrics(views)
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.16 / len(metrics),
                        subplot_titles=[_panel_title(m) for m in metrics])
    probes = list(dict.fromkeys(p for v in views for p in v.probes))
    drawn_thresholds: set[tuple[int, float]] = set()
    for row, metric in enumerate(metrics, start=1):
        for vi, v in enumerate(views):
            dash = DASHES[vi % len(DASHES)]
            run = _run_name(v)
            suffix = f" ({run})" if run else ""
            if metric == "loss":
                tr = v.train
                if len(tr.get("step", [])):
                    fig.add_trace(go.Scatter(
                        x=tr["step"].tolist(), y=_finite(tr["loss"].tolist()), mode="lines+markers",
                        name="loss" + suffix, line=dict(color="#444", dash=dash), marker=dict(size=4),
                        legendgroup="loss" + suffix, hovertemplate=f"step %{{x}}<br>loss %{{y:.4g}}{suffix}<extra></extra>"),
                        row=row, col=1)
            else:
                for probe, cols in v.probes.items():
                    if metric not in cols:
                        continue
                    k = probes.index(probe)
                    fig.add_trace(go.Scatter(
                        x=cols["step"].tolist(), y=_finite(cols[metric].tolist()), mode="lines+markers",
                        name=probe + suffix, legendgroup=probe + suffix, showlegend=row == 1,
                        line=dict(color=PALETTE[k % len(PALETTE)], dash=dash), marker=dict(size=6),
                        hovertemplate=f"{probe}{suffix}<br>step %{{x}}<br>{metric} %{{y:.4g}}<extra></extra>"),
                        row=row, col=1)
            rule = ((v.settings or {}).get("rules") or {}).get(metric) or {}
            if rule.get("threshold") is not None and (row, float(rule["threshold"])) not in drawn_thresholds:
                drawn_thresholds.add((row, float(rule["threshold"])))
                fig.add_hline(y=float(rule["threshold"]), line=dict(color="#d62728", dash="dash", width=1),
                              annotation_text=f"threshold {rule['threshold']:g}", annotation_position="top left",
                              row=row, col=1)
            ev = [e for e in v.events if e["metric"] == metric]
            if ev:
                name = "warning" + suffix
                fig.add_trace(go.Scatter(
                    x=[e["step"] for e in ev], y=[e["value"] for e in ev], mode="markers", name=name,
                    legendgroup=name, showlegend=not any(t.name == name for t in fig.data),
                    marker=dict(symbol="x" if not run else "x-thin", size=13, color="#d62728", line=dict(width=2)),
                    customdata=[[e["series"], e["rule"], e["limit"], e["action"]] for e in ev],
                    hovertemplate=f"WARNING{suffix} %{{customdata[0]}}<br>step %{{x}}<br>value %{{y:.4g}}<br>rule "
                                  "%{customdata[1]}, limit %{customdata[2]:.4g}<br>action %{customdata[3]}"
                                  "<extra></extra>"), row=row, col=1)
    main = views[0]
    n_checks = sum(len(c.get("step", [])) for c in main.probes.values())
    n_events = sum(len(v.events) for v in views)
    from aclarena.results.monitor_series import phase_of

    fig.update_layout(
        title=f"Drift monitor: {phase_of(main.label)} ({n_checks} checks, {n_events} warnings"
              + ("; with its lead-time retrain, dotted" if len(views) > 1 else "") + ")",
        template=TEMPLATE, height=170 * len(metrics) + 120,
        # beside the panels, top-aligned: above them, a legend of several probes wrapped onto the first panel's title
        legend=dict(orientation="v", x=1.01, xanchor="left", y=1, yanchor="top"),
        uirevision=phase_of(main.label), margin=dict(t=80),
    )
    fig.update_xaxes(title_text="training step", row=len(metrics), col=1)
    return fig


#: The lead-time table's columns: (key, header, what it means).
LEAD_COLUMNS = (
    ("domain", "domain", "the earlier domain whose forgetting is predicted"),
    ("predictor", "predictor", "the warning signal (a monitor metric on that domain's probe, RL's Razor, or the loss)"),
    ("metric", "metric", "the series the predictor's rule watches"),
    ("warned", "first warning (step)", "first step at which the predictor's rule fired ('never' if it did not)"),
    ("drop", "significant drop (step)", "first evaluation whose one-sided McNemar test against the stage start is "
                                        "significant after Holm's correction ('none' if no drop; 'unreachable' if too "
                                        "few items were solved at the start for any drop to be significant)"),
    ("lead", "lead (steps)", "drop step - warning step: > 0 warned before the drop (good), < 0 warned late"),
)


def lead_time_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a stored lead-time result as ``monitor --lead-time`` prints them."""
    return [{"domain": r["domain"], "predictor": r["predictor"], "metric": r["metric"],
             "warned": "never" if r["warn_step"] is None else r["warn_step"],
             "drop": drop_label(r["drop_step"], drop_reachable_in(result, r["domain"])),
             "lead": "-" if r["lead"] is None else r["lead"]} for r in result.get("table", [])]


def lead_time_caption(result: dict[str, Any]) -> str:
    """One line: the stage, its steps and the ground truth's settings."""
    st = result.get("settings") or {}
    return (f"{result.get('stage', '?')} stage retrained with the monitor ({result.get('steps', '?')} steps); ground "
            f"truth every {st.get('eval_every', '?')} steps on {st.get('n', '?')} fixed items per domain, "
            f"alpha {st.get('alpha', '?')}")


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
    fig.update_layout(title=f"Lead time of the warnings, {result.get('stage', '?')} stage", template=TEMPLATE,
                      xaxis_title="training step of the stage", yaxis_title="accuracy on fixed items",
                      yaxis=dict(range=[-0.3, 1.05]))
    return fig


@register_figure("monitor/series", "Drift monitor series", width=900, height=1140)
def _series(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.errors import AclarenaError
    from aclarena.results.monitor_series import load_monitor, monitor_phases
    from aclarena.store import SERIES_NAME
    from aclarena.store.series import read_series

    if reader is None:
        return []
    run_dir = Path(reader.path).parent
    if not (run_dir / SERIES_NAME).is_file():
        return []
    try:
        with read_series(run_dir) as r:
            phases = {p: [load_monitor(r, lab) for lab in labels] for p, labels in monitor_phases(r).items()}
    except AclarenaError:
        return []
    return [(p.replace("/", "-"), series_figure(vs)) for p, vs in phases.items() if any(v.probes for v in vs)]


@register_figure("monitor/lead-time", "Lead time of the drift warnings", width=900, height=520)
def _lead(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.results.lead_time import lead_time_results

    return [(stage, lead_time_figure(result)) for stage, result in lead_time_results(reader).items()]
