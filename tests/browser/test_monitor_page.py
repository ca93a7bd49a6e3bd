"""The Monitor page in headless Chromium: new points appear while another process appends to series.h5; every
warned metric has a panel; a phase recorded twice (its lead-time retrain) is one entry; the lead-time table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser_helpers import wait_for_dash

from aclarena.diagnostics.monitor_metrics import default_rules

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
from aclarena.results.monitor_series import (EVENT_COLUMNS, SESSION_COLUMNS, TRAIN_COLUMNS, probe_columns,
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
        assert default_rules()["fkl"].threshold in first["shapes"]  # the default forward-KL threshold is drawn
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
        assert now["traces"]["loss@y6"] == [0, 2, 4]  # after the default rules' fkl_high panel (y5)
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


# --- every warned metric drawn, a phase recorded twice listed once, the lead-time table ----------------------

SUITE = "math/id"
N_ITEMS = 16


def _outcomes(step: int):
    import numpy as np

    ok = np.zeros(N_ITEMS, dtype=bool)
    ok[:14] = True
    ok[:{4: 10, 6: 12}.get(step, 0)] = False  # a forced drop from step 4
    return ok


def write_two_recordings(run: Path) -> None:
    """``seq-ecom-sft`` (6 checks, a warning on fkl_high and one on flip_all, a metric no default rule
    watches) and its lead-time retrain ``lead-time/seq-ecom-sft`` (4 checks, ground truth every 2 steps),
    through the monitor's own writer."""
    from aclarena.diagnostics.monitor_metrics import METRICS, default_rules, rules_to_json
    from aclarena.results.monitor_series import (
        BENCH_COLUMNS,
        EVENT_COLUMNS,
        SESSION_COLUMNS,
        TRAIN_COLUMNS,
        MonitorStore,
        probe_columns,
        settings_bytes,
    )

    store = MonitorStore(run)
    for label in (LABEL, f"lead-time/{LABEL}"):
        for name, cols in (("sessions", SESSION_COLUMNS), ("train", TRAIN_COLUMNS), ("events", EVENT_COLUMNS),
                           (f"probes/{PROBE}", probe_columns(METRICS)), ("bench", BENCH_COLUMNS)):
            store.declare(f"monitor/{label}/{name}", cols)
    assert store.acquire()
    settings = settings_bytes({"every_n_steps": 2, "rules": rules_to_json(default_rules())})
    for label, steps in ((LABEL, 6), (f"lead-time/{LABEL}", 4)):
        store.append(f"monitor/{label}/sessions", {"session": 0, "step": 0, "time": 1.0, "settings": settings})
        for step in range(0, steps * 2, 2):
            fkl = 0.02 * step
            store.append(f"monitor/{label}/probes/{PROBE}", {"session": 0, "step": step, "time": 1.0,
                                                              **{m: 0.01 for m in METRICS}, "fkl": fkl,
                                                              "fkl_high": 2 * fkl})
            store.append(f"monitor/{label}/train", {"session": 0, "step": step, "time": 1.0, "loss": 1.0})
            ok = _outcomes(step)
            store.append(f"monitor/{label}/bench", {
                "session": 0, "step": step, "time": 1.0, "suite": SUITE.encode(), "n": N_ITEMS,
                "correct": int(ok.sum()), "accuracy": float(ok.mean()),
                "outcomes": "".join("1" if x else "0" for x in ok).encode()})
    for label, step, metric, value, limit in ((LABEL, 8, "fkl_high", 0.32, 0.25), (LABEL, 10, "flip_all", 0.4, 0.3),
                                              (f"lead-time/{LABEL}", 4, "fkl", 0.08, 0.05)):
        store.append(f"monitor/{label}/events", {"session": 0, "step": step, "time": 2.0, "series": PROBE.encode(),
                                                 "metric": metric.encode(), "value": value, "rule": b"threshold",
                                                 "limit": limit, "score": value, "action": b"log"})
    store.release()


def store_lead_time(run: Path) -> dict:
    """The lead-time result of the retrain, computed and stored as ``monitor --lead-time`` does."""
    from aclarena.diagnostics.monitor_metrics import default_rules
    from aclarena.results.lead_time import LeadTimeData, lead_time_key, table_columns, write_lead_time
    from aclarena.train.lead_time import lead_time_table

    result = lead_time_table(run, [f"lead-time/{LABEL}"], offsets=[0], suites={SUITE: "math"}, rules=default_rules())
    result.update({"stage": "ecom", "phases": [LABEL], "steps": 6, "settings": {"eval_every": 2, "n": N_ITEMS,
                                                                                  "alpha": 0.05}})
    write_lead_time(run, lead_time_key("ecom"), LeadTimeData(stage="ecom", fingerprint="", result=result,
                                                             table=table_columns(result["table"])),
                    manifest_text=(run / "aclarena.toml").read_text(encoding="utf-8"))
    return result


def test_monitor_page_merges_a_phase_recorded_twice_and_draws_every_warned_metric(fixture_run, serve, page,
                                                                                 console_errors):
    write_two_recordings(fixture_run)
    url = serve(fixture_run)
    page.set_viewport_size({"width": 1300, "height": 1400})
    page.goto(url + "/monitor")
    wait_for_dash(page)
    page.wait_for_selector("#monitor-graph .main-svg")
    # one entry for the phase, although series.h5 holds it twice
    page.click("#monitor-label")
    page.get_by_role("option").first.wait_for()
    options = [t.strip() for t in page.get_by_role("option").all_inner_texts()]
    page.keyboard.press("Escape")
    assert options == [f"{LABEL} (and its lead-time retrain)"]
    status = page.inner_text("#monitor-status")
    assert f"{LABEL}: 6 checks, last step 10, 2 warnings" in status and "lead-time retrain: 4 checks" in status
    titles = page.eval_on_selector_all("#monitor-graph .annotation-text", "els => els.map(e => e.textContent)")
    assert "forward KL to the stage start at high-entropy positions (nats)" in titles  # a default rule's metric
    assert any("flip" in t and "all" in t for t in titles)  # named only by a warning
    drawn = plotted(page)["traces"]
    # each warning sits on its own metric's panel: fkl_high (y5), flip_all (y6); the retrain's fkl on y4
    assert drawn["warning@y5"] == [8] and drawn["warning@y6"] == [10]
    assert drawn["warning (lead-time retrain)@y4"] == [4]
    assert drawn[f"{PROBE}@y"] == [0, 2, 4, 6, 8, 10]
    assert drawn[f"{PROBE} (lead-time retrain)@y"] == [0, 2, 4, 6]
    assert "lead-time retrain" in page.inner_text("#monitor-events")
    assert "no lead-time result yet" in page.inner_text("#monitor-lead")
    assert "--lead-time --stage" in page.inner_text("#monitor-lead")
    assert console_errors == []


def test_monitor_page_shows_the_stored_lead_time_table(fixture_run, serve, page, console_errors):
    write_two_recordings(fixture_run)
    result = store_lead_time(fixture_run)
    fkl = next(r for r in result["table"] if r["metric"] == "fkl")
    assert fkl["drop_step"] == 4 and fkl["warn_step"] is not None  # what the page must show
    url = serve(fixture_run)
    page.goto(url + "/monitor")
    wait_for_dash(page)
    page.wait_for_selector("#monitor-lead-table-ecom")
    rows = page.eval_on_selector_all("#monitor-lead-table-ecom tr",
                                     "rows => rows.map(r => [...r.children].map(c => c.textContent))")
    assert rows[0] == ["domain", "predictor", "metric", "first warning (step)", "significant drop (step)",
                       "lead (steps)"]
    by_metric = {r[2]: r for r in rows[1:]}
    assert len(rows) - 1 == len(result["table"])
    assert by_metric["fkl"][3:] == [str(fkl["warn_step"]), "4", str(fkl["lead"])]
    assert "ecom stage retrained with the monitor (6 steps)" in page.inner_text("#monitor-lead")
    page.wait_for_selector("#monitor-lead-graph-ecom .main-svg")
    assert "Lead time of the warnings" in page.text_content("#monitor-lead-graph-ecom .gtitle")
    assert "no lead-time result yet" not in page.inner_text("#monitor-lead")
    assert console_errors == []
