"""Monitor: the drift monitor's series of a training run, live (refreshed from series.h5 on an interval).

A training run with a drift monitor appends to ``series.h5`` under SWMR; this page reopens
the file on every tick (a few ms; a writer that adds series replaces the file, and a fresh
handle sees it), draws one panel per metric with the thresholds dashed and the warnings
marked, and lists the warnings. The plot keeps its zoom between ticks (``uirevision``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from aclarena.dashboard.data import current_run

PAGE = {"path": "/monitor", "name": "Monitor", "order": 60}
REFRESH_MS = 2000
EVENT_COLUMNS = ("step", "series", "metric", "value", "rule", "limit", "action")


def labels(run_dir: Path) -> list[str]:
    """The monitored phases in the run's series.h5 ([] when there is none yet)."""
    from aclarena.errors import AclarenaError
    from aclarena.store import SERIES_NAME
    from aclarena.store.monitor_series import monitor_labels
    from aclarena.store.series import read_series

    if not (run_dir / SERIES_NAME).is_file():
        return []
    try:
        with read_series(run_dir) as r:
            return monitor_labels(r)
    except AclarenaError:
        return []


def view(run_dir: Path, label: str) -> Any:
    from aclarena.errors import AclarenaError
    from aclarena.store.monitor_series import load_monitor
    from aclarena.store.series import read_series

    try:
        with read_series(run_dir) as r:
            return load_monitor(r, label)
    except (AclarenaError, KeyError):
        return None


def refresh(run_dir: Path, label: str | None) -> tuple[Any, list[dict[str, Any]], str, list[dict[str, str]], str | None]:
    """Figure, warning rows, status line, label options and the chosen label, read anew."""
    from aclarena.figures.monitor import series_figure

    names = labels(run_dir)
    options = [{"label": n, "value": n} for n in names]
    if not names:
        return {}, [], "no drift-monitor series yet: train with a [monitor] section or a DriftMonitorCallback", [], None
    if label not in names:
        label = names[-1]
    v = view(run_dir, label)
    if v is None:
        return {}, [], f"{label}: cannot be read right now (being rewritten); retrying", options, label
    rows = [{c: (f"{e[c]:.4g}" if isinstance(e[c], float) else e[c]) for c in EVENT_COLUMNS} for e in v.events]
    checks = sum(len(c.get("step", [])) for c in v.probes.values())
    status = (f"{label}: {checks} checks, last step {v.last_step if v.last_step is not None else '-'}, "
              f"{len(v.events)} warnings; read at {time.strftime('%H:%M:%S')}")
    return series_figure(v), rows, status, options, label


def _table(rows: list[dict[str, Any]]) -> Any:
    if not rows:
        return html.P("No warnings.", className="note")
    return html.Table([html.Tr([html.Th(c) for c in EVENT_COLUMNS])]
                      + [html.Tr([html.Td(str(r[c])) for c in EVENT_COLUMNS]) for r in rows], className="simple")


def layout(**_query: Any) -> html.Div:
    run_dir = current_run()
    fig, rows, status, options, label = refresh(run_dir, None)
    return html.Div([
        html.H2("Drift monitor"),
        html.P("Probe sets of earlier capabilities scored teacher-forced during training: KL and flip rate at the "
               "reference's high-entropy positions, whole-sequence KL (against the checkpoint that generated the "
               "probe), and the forward KL to the stage-start policy. Dashed lines: thresholds; crosses: warnings. "
               f"Refreshes every {REFRESH_MS // 1000} s.", className="note"),
        html.Div([html.Label("phase"), dcc.Dropdown(id="monitor-label", options=options, value=label, clearable=False,
                                                    style={"minWidth": "260px"})], className="controls"),
        html.P(status, id="monitor-status", className="note"),
        dcc.Graph(id="monitor-graph", figure=fig),
        html.H3("Warnings"),
        html.Div(_table(rows), id="monitor-events"),
        dcc.Interval(id="monitor-interval", interval=REFRESH_MS, n_intervals=0),
    ])


def register_callbacks(app: Dash, run_dir: Path) -> None:
    @app.callback(
        Output("monitor-graph", "figure"), Output("monitor-events", "children"), Output("monitor-status", "children"),
        Output("monitor-label", "options"), Output("monitor-label", "value"),
        Input("monitor-interval", "n_intervals"), Input("monitor-label", "value"), prevent_initial_call=True,
    )
    def _tick(_n: int, label: str | None) -> tuple[Any, Any, str, list[dict[str, str]], str | None]:
        fig, rows, status, options, chosen = refresh(run_dir, label)
        return fig, _table(rows), status, options, chosen
