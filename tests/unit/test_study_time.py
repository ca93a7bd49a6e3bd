"""benchmarks/study_time.py: the side-by-side driver's ledger (segments, kills, resume, refused roots).

The studies themselves are replaced by small Python processes that print the study's part lines: what is
tested here is the accounting of wall time and parts over interrupted invocations, not the study."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_helpers import load_benchmark

REPO = Path(__file__).resolve().parents[2]


def _bench():
    return load_benchmark("study_time")


def _job(marker: Path, seconds: float, rc: int = 0) -> list[str]:
    """A process that prints two part lines; the second run after ``marker`` exists finishes faster."""
    code = (f"import sys, time, pathlib; m = pathlib.Path({str(marker)!r}); again = m.exists(); m.touch(); "
            f"print('  study: train ...', file=sys.stderr, flush=True); time.sleep({seconds} / (4 if again else 1)); "
            f"print('  study: train 1.5 s', file=sys.stderr, flush=True); "
            f"print('  study: eval 0.5 s', file=sys.stderr, flush=True); sys.exit({rc})")
    return [sys.executable, "-c", code]


def test_parts_of_reads_the_study_lines(tmp_path):
    bench = _bench()
    log = tmp_path / "x.log"
    log.write_text("  study: train ...\n  study: train 12.5 s\n  study: sdft --start base 3 s\nnoise 4 s\n"
                   "  study: eval 44.8 s\n", encoding="utf-8")
    assert bench.parts_of(log) == {"train": 12.5, "sdft --start base": 3.0, "eval": 44.8}


def test_both_jobs_run_at_once_and_the_ratio_is_of_their_wall_times(tmp_path):
    bench = _bench()
    t0 = time.monotonic()
    data = bench.side_by_side({"old": _job(tmp_path / "o", 1.2), "new": _job(tmp_path / "n", 0.6)}, tmp_path / "r",
                              {"k": 1})
    took = time.monotonic() - t0
    s = bench.summary(data)
    old, new = s["jobs"]["old"], s["jobs"]["new"]
    assert old["done"] and new["done"]
    assert took < old["wall_s"] + new["wall_s"]  # side by side, not one after the other
    assert old["parts_s"] == {"train": 1.5, "eval": 0.5}
    assert old["wall_s"] >= 1.2 and 0.6 <= new["wall_s"] < old["wall_s"]
    assert s["ratio_new_old"] == pytest.approx(new["wall_s"] / old["wall_s"])


def test_a_killed_benchmark_resumes_and_adds_its_segments(tmp_path):
    """The driver killed mid-run (as at a session's end): the ledger keeps the time the heartbeat saw; a rerun
    starts a second segment of the unfinished job only, and the wall time is the sum."""
    root = tmp_path / "r"
    script = (f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import study_time as b; "
              f"b.side_by_side({{'old': {_job(tmp_path / 'o', 6.0)!r}, 'new': {_job(tmp_path / 'n', 0.2)!r}}}, "
              f"__import__('pathlib').Path({str(root)!r}), {{'k': 1}}, heartbeat_s=0.3)")
    p = subprocess.Popen([sys.executable, "-c", script])
    ledger = root / "ledger.json"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if ledger.exists():
            jobs = json.loads(ledger.read_text())["jobs"]
            if jobs.get("new", {}).get("done") and jobs["old"]["segments"][0]["wall_s"] >= 1.0:
                break
    p.send_signal(signal.SIGKILL)  # no handler runs: what the heartbeat wrote is what is kept
    p.wait()
    pid = json.loads(ledger.read_text())["jobs"]["old"]["segments"][0]["pid"]
    bench = _bench()
    deadline = time.monotonic() + 10
    while bench._alive(pid) and time.monotonic() < deadline:  # the study dies with the benchmark (PDEATHSIG)
        time.sleep(0.05)
    assert not bench._alive(pid)
    first = json.loads(ledger.read_text())["jobs"]["old"]["segments"][0]["wall_s"]
    assert first >= 1.0

    data = bench.side_by_side({"old": _job(tmp_path / "o", 6.0), "new": _job(tmp_path / "n", 0.2)}, root, {"k": 1})
    s = bench.summary(data)
    old = s["jobs"]["old"]
    assert [g["status"] for g in old["segments"]] == ["killed", "finished"]
    assert len(s["jobs"]["new"]["segments"]) == 1  # done: not rerun
    assert old["wall_s"] == pytest.approx(first + old["segments"][1]["wall_s"])
    assert old["parts_s"] == {"train": 1.5, "eval": 0.5}  # the killed segment printed no finished part
    assert (root / "old-0.log").exists() and (root / "old-1.log").exists()


def test_a_failed_study_is_not_done_and_other_settings_are_refused(tmp_path):
    bench = _bench()
    root = tmp_path / "r"
    data = bench.side_by_side({"old": _job(tmp_path / "o", 0.1), "new": _job(tmp_path / "n", 0.1, rc=3)}, root,
                              {"seeds": 3})
    s = bench.summary(data)
    assert not s["jobs"]["new"]["done"] and s["jobs"]["new"]["segments"][0]["rc"] == 3
    assert "ratio_new_old" not in s
    with pytest.raises(SystemExit, match="other settings \\(seeds\\)"):
        bench.side_by_side({"old": ["true"], "new": ["true"]}, root, {"seeds": 2})


def test_a_rerun_beside_a_study_still_running_is_refused(tmp_path):
    """Two writers in one run folder: a segment whose process still runs stops the rerun, in one line."""
    import os

    bench = _bench()
    root = tmp_path / "r"
    root.mkdir()
    (root / "ledger.json").write_text(json.dumps({"settings": {"k": 1}, "jobs": {"old": {"done": False, "segments": [
        {"segment": 0, "wall_s": 3.0, "rc": None, "status": "running", "pid": os.getpid()}]}}}))
    with pytest.raises(SystemExit, match="old study of an earlier invocation is still running"):
        bench.side_by_side({"old": ["true"]}, root, {"k": 1})


def test_one_seed_says_the_validation_is_left_out():
    bench = _bench()
    assert any("no validation" in line for line in bench.caveats(1))
    assert bench.caveats(3) == []


def _ledger(root: Path, old: tuple[float, bool], new: tuple[float, bool]) -> None:
    root.mkdir(parents=True)
    jobs = {label: {"done": done, "segments": [{"segment": 0, "wall_s": wall, "status": "finished" if done else "killed",
                                                "parts_s": {"train": wall / 2}}]}
            for label, (wall, done) in {"old": old, "new": new}.items()}
    (root / "ledger.json").write_text(json.dumps({"settings": {"k": 1}, "jobs": jobs}))


def test_status_reads_the_ledger_and_bounds_the_ratio_while_one_study_runs(tmp_path, capsys):
    """The new study done, the old one not: the old can only take longer, so the ratio so far is an upper bound
    (and a lower bound the other way round); --status starts nothing."""
    bench = _bench()
    _ledger(tmp_path / "a", old=(250.0, False), new=(100.0, True))
    ledger = json.loads((tmp_path / "a" / "ledger.json").read_text())  # the old study still running: parts in its log
    ledger["jobs"]["old"]["segments"][0] = {"segment": 0, "wall_s": 250.0, "status": "running", "log": "old-0.log"}
    (tmp_path / "a" / "ledger.json").write_text(json.dumps(ledger))
    (tmp_path / "a" / "old-0.log").write_text("  study: train ...\n  study: train 125.0 s\n  study: eval ...\n")
    assert bench.main(["--root", str(tmp_path / "a"), "--status"]) == 0
    out = capsys.readouterr().out
    assert "old: NOT DONE, 250 s over 1 segment(s); train 125 s" in out
    assert "new / old wall time: at most 0.40 so far" in out
    assert not (tmp_path / "a" / "old-src").exists()

    _ledger(tmp_path / "b", old=(200.0, True), new=(150.0, False))
    s = bench.summary(json.loads((tmp_path / "b" / "ledger.json").read_text()))
    assert s["ratio_new_old_at_least"] == pytest.approx(0.75) and "ratio_new_old" not in s
    _ledger(tmp_path / "c", old=(200.0, True), new=(90.0, True))
    s = bench.summary(json.loads((tmp_path / "c" / "ledger.json").read_text()))
    assert s["ratio_new_old"] == pytest.approx(0.45) and "ratio_new_old_at_most" not in s


def test_status_of_a_root_without_a_ledger_is_one_line_exit_1(tmp_path, capsys):
    assert _bench().main(["--root", str(tmp_path), "--status"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such ledger" in err


def test_first_seed_writes_a_copy_of_the_config_with_its_run_seed(tmp_path):
    bench = _bench()
    (tmp_path / "examples").mkdir()
    text = (REPO / "examples" / "mini-half.toml").read_text(encoding="utf-8")
    (tmp_path / "examples" / "mini-half.toml").write_text(text, encoding="utf-8")
    rel = bench.seeded(tmp_path, "examples/mini-half.toml", 2)
    assert rel == "examples/mini-half.seed2.toml"  # beside the original: what it names relative to itself resolves
    import tomllib

    copy = tomllib.loads((tmp_path / rel).read_text(encoding="utf-8"))
    orig = tomllib.loads(text)
    assert copy["run"]["seed"] == 2 and orig["run"]["seed"] == 0
    assert {**copy, "run": {**copy["run"], "seed": 0}} == orig  # nothing else changed
    (tmp_path / "examples" / "x.toml").write_text('[run]\nname = "x"\n[train]\nseed = 3\n', encoding="utf-8")
    with pytest.raises(SystemExit, match=r"no `seed = N` line in its \[run\] table"):
        bench.seeded(tmp_path, "examples/x.toml", 1)  # another table's seed is not the run's
