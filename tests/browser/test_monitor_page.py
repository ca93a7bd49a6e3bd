"""The Monitor page in headless Chromium: new points appear while another process appends to series.h5."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser_helpers import wait_for_dash

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
LABEL = "seq-ecom-sft"
PROBE = "monitor-math"

# A writer process with the drift monitor's exact layout (aclarena.train.callbacks), driven line by line
# from stdin: "check STEP FKL", "warn STEP FKL" or "quit"; it answers "ok" once the rows are flushed.
WRITER = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from aclarena.store import SeriesWriter
from aclarena.diagnostics.monitor_metrics import METRICS, default_rules, rules_to_json
from aclarena.store.monitor_series import (EVENT_COLUMNS, SESSION_COLUMNS, TRAIN_COLUMNS, probe_columns,
                                           series_names)
names = series_names({label!r}, [{probe!r}])
schema = {{names["sessions"]: SESSION_COLUMNS, names["train"]: TRAIN_COLUMNS, names["events"]: EVENT_COLUMNS,
          names["probe:" + {probe!r}]: probe_columns(METRICS)}}
settings = {{"every_n_steps": 2, "rules": rules_to_json(default_rules()), "metrics": list(METRICS)}}
with SeriesWriter({run!r}, schema) as w:
    w.append(names["sessions"], {{"session": 0, "step": 0, "time": time.time(), "settings": json.dumps(settings).encode()}})
    print("ok", flush=True)
    for line in sys.stdin:
        cmd, *rest = line.split()
        if cmd == "quit":
            break
        step, fkl = int(rest[0]), float(rest[1])
        if cmd == "check":
            w.append(names["probe:" + {probe!r}], {{"session": 0, "step": step, "time": time.time(),
                **{{m: fkl * (k + 1) for k, m in enumerate(METRICS)}}, "fkl": fkl}})
            w.append(names["train"], {{"session": 0, "step": step, "time": time.time(), "loss": 2.0 - 0.01 * step}})
        else:
            w.append(names["events"], {{"session": 0, "step": step, "time": time.time(), "series": {probe!r}.encode(),
                "metric": b"fkl", "value": fkl, "rule": b"threshold", "limit": 0.05, "score": fkl, "action": b"log"}})
        print("ok", flush=True)
"""


class Writer:
    def __init__(self, run: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
        code = WRITER.format(root=str(ROOT), run=str(run), label=LABEL, probe=PROBE)
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=ROOT)
        self._ack()

    def _ack(self) -> None:
        line = self.proc.stdout.readline()
        assert line.strip() == "ok", f"writer failed: {line!r}"

    def send(self, cmd: str, step: int, fkl: float) -> None:
        self.proc.stdin.write(f"{cmd} {step} {fkl}\n")
        self.proc.stdin.flush()
        self._ack()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)


def plotted(page) -> dict:
    """What the monitor graph draws now: x values per (trace name, axis), and the dashed threshold lines."""
    return page.evaluate("""() => {
        const el = document.querySelector('#monitor-graph .js-plotly-plot');
        const out = {traces: {}, shapes: (el.layout.shapes || []).map(s => s.y0)};
        for (const t of el.data) out.traces[t.name + '@' + (t.yaxis || 'y')] = t.x;
        return out;
    }""")


def points(page) -> int:
    return page.eval_on_selector_all("#monitor-graph .scatterlayer path.point", "els => els.length")


def test_monitor_page_shows_points_as_a_writer_appends(fixture_run, serve, page, console_errors):
    writer = Writer(fixture_run)
    try:
        writer.send("check", 0, 0.0)
        url = serve(fixture_run)
        page.set_viewport_size({"width": 1300, "height": 1200})
        page.goto(url + "/monitor")
        wait_for_dash(page)
        page.wait_for_selector("#monitor-graph .main-svg")
        assert f"{LABEL}: 1 checks, last step 0, 0 warnings" in page.inner_text("#monitor-status")
        first = plotted(page)
        assert first["traces"][f"{PROBE}@y"] == [0]  # the first panel (KL at high-entropy positions)
        assert 0.05 in first["shapes"]  # the default forward-KL threshold is drawn
        n0 = points(page)
        assert n0 >= 4  # one point in each metric panel
        page.evaluate("() => { window.__sameDocument = true; }")  # the page must update in place, not reload

        for step, fkl in ((2, 0.01), (4, 0.03)):
            writer.send("check", step, fkl)
        page.wait_for_function(
            "() => document.querySelector('#monitor-status').textContent.includes('3 checks, last step 4')",
            timeout=60_000)
        wait_for_dash(page)
        now = plotted(page)
        assert now["traces"][f"{PROBE}@y"] == [0, 2, 4]
        assert now["traces"][f"{PROBE}@y4"] == [0, 2, 4]  # the forward-KL panel
        assert now["traces"]["loss@y5"] == [0, 2, 4]
        assert points(page) > n0
        assert "No warnings." in page.inner_text("#monitor-events")

        writer.send("check", 6, 0.08)
        writer.send("warn", 6, 0.08)
        page.wait_for_function(
            "() => document.querySelector('#monitor-status').textContent.includes('4 checks, last step 6, 1 warnings')",
            timeout=60_000)
        wait_for_dash(page)
        events = page.inner_text("#monitor-events")
        assert "fkl" in events and "threshold" in events and PROBE in events and "0.08" in events
        marks = plotted(page)["traces"]
        assert marks["warning@y4"] == [6]  # the warning is marked on the forward-KL panel
        assert page.evaluate("() => window.__sameDocument === true")
        assert "Refreshing every" in page.inner_text("#monitor-polling")
    finally:
        writer.close()
    assert writer.proc.returncode == 0
    # the writer is gone (its lock released): the page stops polling
    page.wait_for_function(
        "() => document.querySelector('#monitor-polling').textContent.includes('not refreshing')", timeout=60_000)
    assert console_errors == []


def test_monitor_page_without_series_says_so(fixture_run, serve, page, console_errors):
    url = serve(fixture_run)
    page.goto(url + "/monitor")
    wait_for_dash(page)
    assert "no drift-monitor series yet" in page.inner_text("#monitor-status")
    assert json.dumps(console_errors) == "[]"
