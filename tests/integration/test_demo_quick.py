"""Issue 42: the default demo (the quick curriculum, from the shipped mini base) end to end at toy size:
every phase trains a few steps, every analysis runs, the summary names each finding (shown, not shown or
not measured, never left out), and a rerun reads everything back."""

from __future__ import annotations

import json

import pytest
from train_helpers import marker_mtimes

pytestmark = pytest.mark.slow

TOY = ("--trl", "sft.max_steps=2", "--trl", "rl.max_steps=1", "-n", "4")


def test_quick_demo_at_toy_size_names_every_finding(tmp_path, cli):
    out = tmp_path / "demo"
    code, stdout, err = cli("demo", "--out", str(out), *TOY, "--json")
    assert code == 0, err
    s = json.loads(stdout)["summary"]
    assert s["preset"] == "quick" and s["seed"] == 0 and s["eval_tasks_per_suite"] == 4
    # the command it records makes this run again: the --trl overrides too
    assert s["made_by"]["command"] == ("aclarena-diag demo --preset quick --seed 0 -n 4 --trl sft.max_steps=2 "
                                       "--trl rl.max_steps=1")
    assert [r["stage"] for r in s["stages"]] == ["seq-math", "seq-search"]
    # the curriculum's own suites only: no e-commerce or IF evaluation in a run that trains neither
    assert s["comparison"]["in_domain"] == ["math/id", "search/id"]
    keys = [f["finding"] for f in s["findings"]]
    assert keys == ["forgetting", "rl_drift_concentrated", "sft_moves_more", "oracle_alignment", "consolidation",
                    "repair"]
    assert all(isinstance(f["line"], str) and f["line"] for f in s["findings"])
    # the search stage's effect on math, paired item by item
    (effect,) = s["stage_effects"]
    assert (effect["stage"], effect["before"], effect["suite"], effect["n"]) == ("seq-search", "seq-math", "math/id", 4)
    # the repair of the stage that forgot most, scored in four parts; one merge at least in the comparison
    (rep,) = s["repairs"]
    assert rep["checkpoint"] == "repair-seq-search" and (rep["from"], rep["to"]) == ("seq-math", "seq-search")
    assert any(r.get("method") == "merge-uniform" for r in s["comparison"]["rows"])
    # the stage update against the search oracle's direction (the math oracle is the math stage itself)
    assert [(c["stage"], c["oracle"]) for c in s["oracle_cosines"]] == [("seq-search", "oracle-search")]
    assert -1 <= s["oracle_cosines"][0]["own"] <= 1
    # every SFT and RL phase signed, or named where it has no signature (a one-step GRPO phase of a toy run
    # earns no reward and does not move); the findings line then says so
    sigs = {u["update"]: u["kind"] for u in s["signatures"]["updates"]}
    failed = " ".join(s["signatures"]["failed"])
    for update, kind in (("seq-math-sft", "sft"), ("seq-math", "rl"), ("seq-search-sft", "sft"), ("seq-search", "rl")):
        assert sigs.get(update) == kind or update in failed, (update, sigs, failed)
    rl = next(f for f in s["findings"] if f["finding"] == "rl_drift_concentrated")
    if s["signatures"]["failed"]:
        assert rl["shown"] is not True and "no signature" in rl["line"] or "not measured" in rl["line"]
    assert not s["errors"], s["errors"]

    # the printed summary says what this run shows, its own numbers first and the study's labelled
    code, text, err = cli("demo", "--out", str(out), *TOY)
    assert code == 0, err
    assert "what this run shows (quick, seed 0, 4 tasks per suite):" in text
    assert text.count("    study (Qwen3-8B): ") >= 4

    # a rerun retrains nothing; another seed is refused in one line, nothing changed
    before = marker_mtimes(out)
    code, _, err = cli("demo", "--out", str(out), *TOY, "--seed", "1")
    assert code == 1 and "holds the demo of other settings" in err and len(err.strip().splitlines()) == 1
    assert marker_mtimes(out) == before
