"""Monitor: the drift monitor's series of a training run, live (refreshed from series.h5 on an interval).

A training run with a drift monitor appends to ``series.h5`` under SWMR; on each tick this
page looks at the file's modification time and size and rereads it only when they changed
(a fresh handle: a writer that adds series replaces the file); it draws one panel per metric
with the thresholds dashed and the warnings marked, and lists the warnings. The plot keeps
its zoom between ticks (``uirevision``). It opens on the phase with the most checks. When no
writer holds ``series.h5.lock`` (the training run finished; read from /proc/locks, never by
taking the lock) the page stops polling.

Every metric that a rule watches or a warning names gets a panel. Each phase is listed once:
a phase that ``monitor --lead-time`` retrained (label ``lead-time/<phase>``) is drawn with its
retrain dotted in the same panels. Under the warnings, the lead-time tables and figures that
``monitor --lead-time`` stored in results.h5, or the command that makes one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from aclarena.dashboard.data import current_run

PAGE = {"path": "/monitor", "name": "Monitor", "order": 60}
REFRESH_MS = 2000
EVENT_COLUMNS = ("step", "series", "metric", "value", "rule", "limit", "action")


def phases(run_dir: Path) -> dict[str, list[str]]:
    """The monitored phases in the run's series.h5, each once with the labels that record it
    (a phase that ``monitor --lead-time`` retrained has two); {} when there is none yet."""
    from aclarena.errors import AclarenaError
    from aclarena.results.monitor_series import monitor_phases
    from aclarena.store import SERIES_NAME
    from aclarena.store.series import read_series

    if not (run_dir / SERIES_NAME).is_file():
        return {}
    try:
        with read_series(run_dir) as r:
            return monitor_phases(r)
    except AclarenaError:
        return {}


def labels(run_dir: Path) -> list[str]:
    """The monitored phases, one entry each (the most recent last)."""
    return list(phases(run_dir))


def series_version(run_dir: Path) -> str | None:
    """The modification time and size of series.h5 (None when there is none): a tick whose version
    did not change has nothing new to read."""
    from aclarena.store import SERIES_NAME

    try:
        st = (run_dir / SERIES_NAME).stat()
    except OSError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}"


def writer_active(run_dir: Path, locks: str = "/proc/locks") -> bool | None:
    """Whether a process holds series.h5.lock (a training run is writing); None when unknown
    (no /proc/locks). Reads the kernel's lock table: taking the lock, even shared, could make a
    starting writer fail."""
    from aclarena.store import SERIES_NAME

    try:
        st = (run_dir / (SERIES_NAME + ".lock")).stat()
    except OSError:
        return False
    try:
        table = Path(locks).read_text()
    except OSError:
        return None
    # match the inode only: on overlay filesystems stat's device differs from the lock table's, and a
    # chance match on another device only keeps the page polling
    want = f":{st.st_ino}"
    return any(len(f) > 5 and f[1] == "FLOCK" and f[5].endswith(want) and f[5].count(":") == 2
               for f in (line.split() for line in table.splitlines()))


def _checks(v: Any) -> int:
    return sum(len(c.get("step", [])) for c in v.probes.values())


def busiest(run_dir: Path, names: list[str] | dict[str, list[str]]) -> str | None:
    """The phase with the most checks (the latest among equals)."""
    known = names if isinstance(names, dict) else None
    names = list(names)
    best, most = (names[-1] if names else None), -1
    for n in names:
        vs = view(run_dir, n, known.get(n) if known else None)
        checks = sum(_checks(v) for v in vs) if vs else -1
        if checks >= most:
            best, most = n, checks
    return best


def view(run_dir: Path, phase: str, labels_of: list[str] | None = None) -> list[Any] | None:
    """Every recording of ``phase`` (the training run first, then a lead-time retrain); None when
    series.h5 cannot be read right now."""
    from aclarena.errors import AclarenaError
    from aclarena.results.monitor_series import load_monitor, monitor_phases
    from aclarena.store.series import read_series

    try:
        with read_series(run_dir) as r:
            found = labels_of if labels_of is not None else monitor_phases(r).get(phase, [phase])
            return [load_monitor(r, lab) for lab in found]
    except (AclarenaError, KeyError):
        return None


def refresh(run_dir: Path, label: str | None) -> tuple[Any, list[dict[str, Any]], str, list[dict[str, str]], str | None]:
    """Figure, warning rows, status line, phase options and the chosen phase, read anew."""
    from aclarena.figures.monitor import series_figure
    from aclarena.results.monitor_series import LEAD_LABEL_PREFIX

    found = phases(run_dir)
    options = [{"label": p + (" (and its lead-time retrain)" if len(labs) > 1 else ""), "value": p}
               for p, labs in found.items()]
    if not found:
        return {}, [], "no drift-monitor series yet: train with a [monitor] section or a DriftMonitorCallback", [], None
    if label is None or label not in found:
        label = busiest(run_dir, found)
        assert label is not None  # found has phases, and busiest names one of them
    vs = view(run_dir, label, found[label])
    if not vs:
        return {}, [], f"{label}: cannot be read right now (being rewritten); retrying", options, label
    rows = []
    for v in vs:
        run = "lead-time retrain" if v.label.startswith(LEAD_LABEL_PREFIX) else "training"
        rows += [{"run": run, **{c: (f"{e[c]:.4g}" if isinstance(e[c], float) else e[c]) for c in EVENT_COLUMNS}}
                 for e in v.events]
    parts = []
    for v in vs:
        what = f"{label}: " if not v.label.startswith(LEAD_LABEL_PREFIX) else "lead-time retrain: "
        parts.append(f"{what}{_checks(v)} checks, last step {v.last_step if v.last_step is not None else '-'}, "
                     f"{len(v.events)} warnings")
    status = "; ".join(parts) + f"; read at {time.strftime('%H:%M:%S')}"
    return series_figure(vs), rows, status, options, label


def _table(rows: list[dict[str, Any]]) -> Any:
    if not rows:
        return html.P("No warnings.", className="note")
    cols = (("run",) if any(r["run"] != "training" for r in rows) else ()) + EVENT_COLUMNS
    return html.Table([html.Tr([html.Th(c) for c in cols])]
                      + [html.Tr([html.Td(str(r[c])) for c in cols]) for r in rows], className="simple")


def lead_time_section(run_dir: Path, phase: str | None = None) -> list[Any]:
    """The stored ``monitor --lead-time`` tables and figures (results.h5), or the command that makes one."""
    from aclarena.dashboard.data import manifest, reader
    from aclarena.figures.monitor import LEAD_COLUMNS, lead_time_caption, lead_time_figure, lead_time_rows
    from aclarena.results.lead_time import lead_time_results

    with reader(run_dir) as r:
        results = lead_time_results(r)
    if not results:
        from aclarena.errors import AclarenaError

        stage = "<domain>"
        try:
            m = manifest(run_dir)
            if phase is not None and phase in m and m.resolve(phase).domain:
                stage = str(m.resolve(phase).domain)  # the monitored stage's domain
        except AclarenaError:
            pass
        return [html.P(["no lead-time result yet: run ",
                        html.Code(f"aclarena-diag monitor --run {run_dir} --lead-time --stage {stage}")],
                       className="note", id="monitor-lead-empty")]
    out: list[Any] = []
    for stage, result in results.items():
        rows = lead_time_rows(result)
        out += [
            html.P(lead_time_caption(result), className="note"),
            html.Table([html.Tr([html.Th(h, title=tip) for _, h, tip in LEAD_COLUMNS])]
                       + [html.Tr([html.Td(str(row[k])) for k, _, _ in LEAD_COLUMNS]) for row in rows],
                       className="simple", id=f"monitor-lead-table-{stage}"),
            dcc.Graph(id=f"monitor-lead-graph-{stage}", figure=lead_time_figure(result)),
        ]
    return out


def layout(**query: Any) -> html.Div:
    run_dir = current_run()
    fig, rows, status, options, label = refresh(run_dir, query.get("phase"))
    return html.Div([
        html.H2("Drift monitor"),
        html.P("Probe sets of earlier capabilities scored teacher-forced during training: KL and flip rate at the "
               "reference's high-entropy positions, whole-sequence KL (against the checkpoint that generated the "
               "probe), and the forward KL to the stage-start policy. Dashed lines: thresholds; crosses: warnings.",
               className="note"),
        html.Div([html.Label("phase"), dcc.Dropdown(id="monitor-label", options=options, value=label, clearable=False,
                                                    style={"minWidth": "260px"})], className="controls"),
        dcc.Store(id="monitor-url"),
        html.P(status, id="monitor-status", className="note"),
        dcc.Graph(id="monitor-graph", figure=fig),
        html.H3("Warnings"),
        html.Div(_table(rows), id="monitor-events"),
        html.H3("Lead time of the warnings"),
        html.P("How many steps before a significant drop of an earlier skill each predictor first warned, on a "
               "stage retrained with the monitor and a ground-truth evaluation (docs/monitor.md).", className="note"),
        html.Div(lead_time_section(run_dir, label), id="monitor-lead"),
        dcc.Interval(id="monitor-interval", interval=REFRESH_MS, n_intervals=0,
                     disabled=writer_active(run_dir) is False),
        dcc.Store(id="monitor-version", data=series_version(run_dir)),
        html.P(_polling_note(writer_active(run_dir)), id="monitor-polling", className="note"),
    ])


def _polling_note(active: bool | None) -> str:
    if active is False:
        return "No training run is writing series.h5: not refreshing (reload when one starts)."
    return f"Refreshing every {REFRESH_MS // 1000} s while series.h5 changes."


def register_callbacks(app: Dash, run_dir: Path) -> None:
    from aclarena.dashboard.urlstate import keep_in_url

    keep_in_url(app, "monitor-url", {"phase": ("monitor-label", "value")})

    @app.callback(
        Output("monitor-graph", "figure"), Output("monitor-events", "children"), Output("monitor-status", "children"),
        Output("monitor-label", "options"), Output("monitor-label", "value"), Output("monitor-version", "data"),
        Output("monitor-interval", "disabled"), Output("monitor-polling", "children"),
        Input("monitor-interval", "n_intervals"), Input("monitor-label", "value"), State("monitor-version", "data"),
        prevent_initial_call=True,
    )
    def _tick(_n: int, label: str | None, seen: str | None) -> tuple[Any, ...]:
        return tick(run_dir, label, seen, from_timer=ctx.triggered_id == "monitor-interval")


def tick(run_dir: Path, label: str | None, seen: str | None, *, from_timer: bool) -> tuple[Any, ...]:
    """One refresh: nothing is read when the timer fired and series.h5 is unchanged; polling stops
    when no writer holds the lock."""
    version = series_version(run_dir)
    active = writer_active(run_dir)
    stop = active is False
    if from_timer and version == seen:
        return (no_update,) * 5 + (no_update, stop, _polling_note(active))
    fig, rows, status, options, chosen = refresh(run_dir, label)
    return fig, _table(rows), status, options, chosen, version, stop, _polling_note(active)
