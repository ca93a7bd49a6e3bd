"""`aclarena-diag monitor --lead-time` on a tiny curriculum: one command, a stored table, read back on a rerun."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import REPO, cli_env, run_train, small_config

pytestmark = pytest.mark.slow

PREDICTORS = ["kl_high", "flip_high", "kl_all", "fkl", "razor_fkl", "loss"]


def cli(run: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aclarena", "monitor", "--run", str(run), *argv], cwd=REPO,
                          env=cli_env(), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lead-time")
    cfg = root / "cfg.toml"
    cfg.write_text(small_config(("math", "search", "ecom")), encoding="utf-8")
    out = root / "run"
    proc = run_train(cfg, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_lead_time_one_command(run):
    proc = cli(run, "--lead-time", "--stage", "ecom", "-n", "6", "--eval-every", "2", "--every", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["stage"] == "ecom" and res["phases"] == ["seq-ecom-sft", "seq-ecom"]
    steps = res["steps"]
    assert steps == 3 + 2  # the SFT and RL phases of the small recipe, end to end
    table = res["table"]
    assert [(r["domain"], r["metric"]) for r in table] == [(d, m) for d in ("math", "search") for m in PREDICTORS]
    for r in table:
        assert r["warn_step"] is None or 0 <= r["warn_step"] <= steps
        if r["warn_step"] is not None and r["drop_step"] is not None:
            assert r["lead"] == r["drop_step"] - r["warn_step"]
        else:
            assert r["lead"] is None
    for d in ("math", "search"):
        pts = res["ground_truth"][d]
        # each phase evaluated at its start, every 2 steps and its end (the RL phase's step 0 is the SFT
        # phase's last step, 3): SFT 0, 2, 3; RL 3, 5
        assert sorted({p["step"] for p in pts}) == [0, 2, 3, 5]
        assert pts[0]["pvalue"] == 1.0 and pts[0]["lost"] == 0 and pts[0]["adjusted"] == 1.0
        drop = next((p["step"] for p in pts[1:] if p["significant"]), None)
        assert all(r["drop_step"] == drop for r in table if r["domain"] == d)
        assert res["series"][d]["step"] == [float(s) for s in range(steps + 1)]
    assert res["series"]["train"]["step"]  # the training loss was recorded
    assert all(v["tests"] == 3 for v in res["drop_test"]["domains"].values())
    cost = res["cost"]
    assert cost["monitor_checks_s"] > 0 and cost["ground_truth_s"] > 0 and res["time_s"] > 0
    # the scratch retraining left no checkpoint behind, and the run's own checkpoints are untouched
    assert not (run / "work" / "lead-time").exists()
    from aclarena.results.lead_time import lead_time_key, read_lead_time
    from aclarena.store import ResultsStore

    with ResultsStore(run).reader() as r:
        stored = read_lead_time(r, lead_time_key("ecom"))
    assert stored.result["table"] == table and stored.stage == "ecom"
    assert stored.table["lead"] == [-1 if row["lead"] is None else row["lead"] for row in table]

    # the same settings: read back from results.h5, not measured again; the table prints
    again = cli(run, "--lead-time", "--stage", "ecom", "-n", "6", "--eval-every", "2", "--every", "1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "lead time of each warning, ecom stage" in again.stdout
    assert f"took {res['time_s']:.1f} s" in again.stdout  # the stored measurement, not a new one
    for word in ("token drift at high-entropy positions", "whole-sequence KL", "forward KL", "training loss"):
        assert word in again.stdout


def test_lead_time_refuses_items_that_cannot_reach_significance(run):
    """4 items over 3 Holm-corrected evaluations: even losing all 4 gives p = 1/16 > 0.05 / 3 (refused before training)."""
    proc = cli(run, "--lead-time", "--stage", "ecom", "-n", "4", "--eval-every", "2", "--every", "1")
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert "-n 4 items can never show a significant drop" in err and "use -n 6 or more" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (run / "work" / "lead-time").exists()


@pytest.mark.parametrize(("stage", "match"), [("math", "first stage"), ("if", "no 'if' stage")])
def test_lead_time_bad_stage(run, stage, match):
    proc = cli(run, "--lead-time", "--stage", stage)
    assert proc.returncode == 1
    assert match in proc.stderr and "Traceback" not in proc.stderr


def test_strict_refuses_a_stage_start_that_cannot_drop_before_training(run):
    """The tiny model solves none of the math items: with --strict no drop could be significant, one line, nothing trained."""
    proc = cli(run, "--lead-time", "--stage", "search", "-n", "8", "--dense", "2", "--every", "1", "--strict")
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert "math/id: the stage start solves 0 of 8 ground-truth items" in err and "use more items (-n" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    from aclarena.store import ResultsStore
    from aclarena.store.series import read_series

    assert not ResultsStore(run).has("monitor/lead-time/search")
    if (run / "series.h5").is_file():  # no phase of the search stage was retrained (no series at all: nothing was)
        from aclarena.results.monitor_series import monitor_labels

        with read_series(run) as r:
            assert not [x for x in monitor_labels(r) if "seq-search" in x]
    assert not (run / "work" / "lead-time").exists()


def test_same_domain_rl_only_continues_the_stage_on_the_dense_schedule(run):
    """A negative control: the math stage's GRPO phase again, from the math stage's end, monitored on math."""
    proc = cli(run, "--lead-time", "--stage", "math", "--same-domain", "--phases", "rl", "-n", "8", "--dense", "1",
               "--every", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["phases"] == ["cont-seq-math"] and res["parent"] == "seq-math" and res["steps"] == 2
    assert set(res["ground_truth"]) == {"math"}
    # the dense schedule of a 2-step phase with dense 1: steps 0, 1, 2 (every step)
    assert [p["step"] for p in res["ground_truth"]["math"]] == [0, 1, 2]
    assert res["settings"]["dense"] == 1 and res["cost"]["ground_truth_evaluations"] == 3
    assert {r["domain"] for r in res["table"]} == {"math"}
    bad = cli(run, "--lead-time", "--stage", "math", "--same-domain", "--phases", "dpo")
    assert bad.returncode == 1 and "--phases dpo: name phase kinds among sft, rl" in bad.stderr
