"""Issue 44: a lead-time result as series on the monitor's grid, and the validation's cell curricula."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from train_helpers import load_benchmark

from aclarena.analysis.study_validation import monitor_grid_series
from aclarena.diagnostics.warning_validation import FIRST_CHECK, compare

REPO = Path(__file__).resolve().parents[2]


def lead(drop_at: int | None, fkl_rise_at: int, steps: int = 12) -> dict:
    """A lead-time result: ground truth on the dense schedule, the monitor at every step."""
    gt_steps = [0, 1, 2, 3, 4, 5, 6, 8, 10, 12]
    pts = [{"step": s, "accuracy": 0.4 if drop_at is None or s < drop_at else 0.1,
            "significant": drop_at is not None and s >= drop_at} for s in gt_steps]
    mon = list(range(steps + 1))
    return {"ground_truth": {"math": pts},
            "series": {"math": {"step": [float(s) for s in mon],
                                "fkl": [0.0 if s < fkl_rise_at else 0.5 for s in mon],
                                "kl_high": [float("nan")] * len(mon)},
                       "razor": {"step": [float(s) for s in mon], "fkl": [0.1 * s for s in mon]},
                       "train": {"step": [float(s) for s in mon[1:]], "loss": [2.0 - 0.1 * s for s in mon[1:]]}}}


def test_series_on_the_monitor_grid():
    (s,) = monitor_grid_series(7, lead(drop_at=6, fkl_rise_at=3))
    assert s.seed == 7 and s.domain == "math" and s.steps == list(range(13))
    assert s.drop_step == 6
    assert s.warn_step("fkl", 0.5) == 3  # the check where it crosses, not the next ground-truth evaluation
    # the drop as of each step: the ground truth's latest evaluation at or before it
    assert s.drop[5] == 0.0 and s.drop[7] == pytest.approx(0.3)
    # loss_fall: the first logged loss (step 1) minus the loss as of the step; NaN before anything was logged
    assert math.isnan(s.predictors["loss_fall"][0]) and s.predictors["loss_fall"][1] == 0.0
    assert s.predictors["loss_fall"][11] == pytest.approx(1.0)
    assert s.predictors["razor_fkl"][4] == pytest.approx(0.4)


def test_cells_with_and_without_drops_go_through_the_comparison():
    fit = monitor_grid_series(0, lead(6, 3)) + monitor_grid_series(1, lead(None, 99))
    held = (monitor_grid_series(2, lead(5, 2)) + monitor_grid_series(3, lead(8, 4))
            + monitor_grid_series(4, lead(None, 99)) + monitor_grid_series(5, lead(None, 4)))
    out = compare(fit + held, ["fkl", FIRST_CHECK, "loss_fall"], fit_runs=[0, 1])
    fkl = out["rows"][0]
    assert fkl["threshold"] == 0.5
    assert fkl["held_out"]["leads"] == [3, 4] and fkl["held_out"]["false_alarms"] == 1
    loss = out["baselines"][1]["held_out"]  # the loss falls the same way in every cell
    assert loss["false_alarms"] + loss["missed"] + loss["late"] >= 2


def _bench():
    return load_benchmark("warning_validation")


def test_cell_curricula_change_only_what_the_condition_says(tmp_path):
    from aclarena.train.config import load_config

    bench = _bench()
    text = (REPO / "aclarena" / "train" / "presets" / "quick.toml").read_text(encoding="utf-8")
    for condition in bench.CONDITIONS:
        path = tmp_path / f"{condition}.toml"
        path.write_text(bench.cell_curriculum(text, condition, 3, 60, 20), encoding="utf-8")
        cfg = load_config(path)  # a valid curriculum
        assert cfg.seed == 3
        math_stage, search = cfg.stages
        assert math_stage.phases[0].trl["max_steps"] == 300  # the math SFT the parent was trained with
        if condition == "math-rl":
            assert math_stage.phases[1].trl["max_steps"] == 20 and search.phases[0].trl["max_steps"] == 200
        else:
            assert search.phases[0].trl["max_steps"] == 60 and math_stage.phases[1].trl["max_steps"] == 30
            lr = search.phases[0].trl["learning_rate"]
            assert lr == pytest.approx(1.6e-3 if condition == "search-sft" else 8e-5)
    with pytest.raises(SystemExit, match="no ecom stage"):
        bench.stage_block(text, "ecom")
    assert bench.finite({"a": [float("nan"), 1.0, {"b": float("inf")}]}) == {"a": [None, 1.0, {"b": None}]}


def test_the_docs_tables_render_the_comparison():
    from tools.docs_results import warning_validation, warning_validation_line

    fit = monitor_grid_series(0, lead(6, 3)) + monitor_grid_series(1, lead(None, 99))
    held = (monitor_grid_series(2, lead(5, 2)) + monitor_grid_series(3, lead(8, 4))
            + monitor_grid_series(4, lead(None, 99)) + monitor_grid_series(5, lead(None, 4)))
    v = compare(fit + held, ["fkl", FIRST_CHECK, "loss_fall"], fit_runs=[0, 1])
    names = {0: "search-sft-s0", 1: "math-rl-s0", 2: "search-sft-s1", 3: "search-sft-s2", 4: "math-rl-s1", 5: "math-rl-s2"}
    for part in ("fit", "held_out"):
        v[part]["cells"] = [names[i] for i in v[part].pop("runs")]
    v["cells"] = [{"cell": names[s.seed], "seed": s.seed, "fit": s.seed < 2, "domain": s.domain, "drop_step": s.drop_step}
                  for s in fit + held]
    data = {"validation": v, "settings": {"n": 10}, "cells": {},
            "costs": {"cells": 6, "ground_truth_s": {"median": 30.0, "min": 20.0, "max": 40.0}}}
    table = warning_validation(data)
    assert "| forward KL to the stage start **(beats both baselines)** | 0.5 | 2/2 [0.34, 1.00] | 3.5 [3, 4] | 0 / 0 | 1/2 [" in table
    # the first check: every drop at the longest lead, a false alarm on every stage without a drop
    assert "| baseline: warn at the first check | - | 2/2 [0.34, 1.00] | 5.5 [4, 7] | 0 / 0 | 2/2 [0.34, 1.00] | 0.00 |" in table
    assert "judged on search-sft-s1, search-sft-s2, math-rl-s1, math-rl-s2 (2 with a significant drop, 2 without)" in table
    assert "| search-sft-s1 | held out |" in table and "| math-rl-s1 | held out |" in table
    assert "ground truth 30 s [20, 40]" in table
    line = warning_validation_line(data)
    assert line.startswith("- **The early warning, held out with negative controls**")
    assert "2 held-out stages with a significant drop and 2 without" in line
    assert "best forward KL to the stage start: 2/2 drops warned in time, lead 3.5 steps [3, 4], 1/2 false alarms" in line
    assert "baselines warn at the first check: 2/2 drops warned in time, lead 5.5 steps [4, 7], 2/2 false alarms" in line
    assert v["beats"] == ["fkl"] and line.rstrip().endswith("`warning_validation.json`).")
