"""Held-out validation of the early warning on synthetic series with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aclarena.diagnostics.warning_validation import (
    WarningSeries,
    fit_threshold,
    outcomes,
    r_squared,
    validate,
)

STEPS = [0, 10, 20, 30, 40]


def series(seed, domain, good, noise, drop_step):
    drop = [0.0, 0.0, 0.0, 0.0, 0.0] if drop_step is None else [0.0 if s < drop_step else 0.3 for s in STEPS]
    return WarningSeries(seed=seed, domain=domain, steps=STEPS, predictors={"good": good, "noise": noise},
                         drop=drop, drop_step=drop_step)


SERIES = [
    # seed 0 (fit): the good predictor rises to 1.0 ten steps before each drop; stays at 0.1 without one
    series(0, "math", [0.0, 0.2, 1.0, 1.2, 1.3], [0.5, 0.1, 0.9, 0.2, 0.3], 30),
    series(0, "search", [0.0, 0.1, 0.9, 0.1, 0.1], [0.9, 0.1, 0.1, 0.8, 0.2], None),
    # seeds 1, 2 (held out)
    series(1, "math", [0.0, 1.1, 1.2, 1.3, 1.4], [0.2, 0.3, 0.1, 0.9, 0.1], 20),   # warns at 10: lead 10
    series(1, "search", [0.0, 0.1, 0.2, 0.1, 0.1], [0.1, 0.95, 0.1, 0.1, 0.1], None),
    series(2, "math", [0.0, 0.1, 0.2, 0.3, 1.5], [0.1, 0.1, 0.1, 0.1, 0.1], 20),   # warns at 40, after: a miss
    series(2, "search", [0.0, 0.2, 1.0, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1, 0.1], None),  # a false alarm
]


def test_threshold_is_fitted_on_the_fit_seed_only():
    fit = [s for s in SERIES if s.seed == 0]
    # 0.9 would alarm on search; 1.2 warns only at the drop (lead 0); 1.0 warns ten steps ahead
    assert fit_threshold(fit, "good") == 1.0
    assert outcomes(fit, "good", 1.0) == ([10], 1, 0, 0)
    assert outcomes(fit, "good", 1.2) == ([0], 1, 0, 0)
    # the held-out seeds would pull it elsewhere (seed 2's search alarms at 1.0): they are not looked at
    assert fit_threshold(SERIES, "good") != 1.0


def test_held_out_report_counts_leads_false_alarms_and_misses():
    reports = {r.predictor: r for r in validate(SERIES, ["good", "noise"], fit_seeds=[0])}
    good = reports["good"]
    assert good.threshold == 1.0
    assert good.leads == [10] and good.detected == 1 and good.misses == 1 and good.false_alarms == 1
    assert good.lead_mean == 10.0
    xs = [x for s in SERIES for x in s.predictors["good"]]
    ys = [y for s in SERIES for y in s.drop]
    assert good.r2 == pytest.approx(np.corrcoef(xs, ys)[0, 1] ** 2)
    assert good.r2 > reports["noise"].r2
    d = good.to_dict()
    assert d["threshold"] == 1.0 and d["lead_mean"] == 10.0


def test_no_drop_to_fit_on_means_no_threshold_and_every_drop_missed():
    quiet = [series(0, "math", [0, 1, 2, 3, 4], [0] * 5, None), series(1, "math", [0, 1, 2, 3, 4], [0] * 5, 20)]
    (r,) = validate(quiet, ["good"], fit_seeds=[0])
    assert r.threshold is None and r.misses == 1 and r.detected == 0 and r.false_alarms == 0


def test_r_squared_edge_cases():
    assert r_squared([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert r_squared([1, 2], [1, 2]) is None
    assert r_squared([1, 1, 1], [1, 2, 3]) is None
    assert r_squared([1, 2, 3, math.nan], [1, 2, 4, 5]) == pytest.approx(np.corrcoef([1, 2, 3], [1, 2, 4])[0, 1] ** 2)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="predictor 'good' has 2 values for 5 steps"):
        WarningSeries(seed=0, domain="math", steps=STEPS, predictors={"good": [0, 1]}, drop=[0] * 5, drop_step=None)
    with pytest.raises(ValueError, match="no held-out series"):
        validate([s for s in SERIES if s.seed == 0], ["good"], fit_seeds=[0])


def test_as_of_takes_the_latest_value_at_or_before_each_step():
    from aclarena.diagnostics.warning_validation import as_of

    # monitor at 0, 5, 10 (10 not finite), 15; benchmark at 0, 4, 10, 12, 20
    got = as_of([5, 0, 10, 15], [0.5, 0.1, math.nan, 1.5], [0, 4, 10, 12, 20])
    assert got == [0.1, 0.1, 0.5, 0.5, 1.5]
    assert all(math.isnan(x) for x in as_of([3], [1.0], [0, 2]))  # nothing known yet: NaN, never a guess
    assert math.isnan(as_of([], [], [1])[0])
    with pytest.raises(ValueError, match="2 entries for 1 values"):
        as_of([1, 2], [1.0], [1])


def test_the_stage_start_is_the_baseline_and_never_warns():
    # forward KL is 0 at the stage start: a threshold at 0 must not "warn" before any training
    s = WarningSeries(seed=0, domain="math", steps=[0, 10, 20], predictors={"fkl": [5.0, 0.0, 6.0], "flat": [0, 0, 0]},
                      drop=[0, 0, 0.4], drop_step=20)
    assert s.warn_step("fkl", 5.0) == 20
    assert s.warn_step("flat", 0.0) == 10
    assert outcomes([s], "fkl", 5.0) == ([0], 1, 0, 0)


# --- issue 44: the dense ground-truth schedule, the held-out comparison, the baselines ----------

from aclarena.diagnostics.warning_validation import (  # noqa: E402
    FIRST_CHECK,
    compare,
    dense_schedule,
    evaluations_before,
    judge,
    warn_at_first_check,
)


def test_dense_schedule_is_every_step_at_the_start_then_sparser():
    assert dense_schedule(60) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 19, 24, 30, 38, 48, 60]
    assert dense_schedule(7) == list(range(8))  # shorter than the dense part: every step
    assert dense_schedule(20, dense=3, growth=2) == [0, 1, 2, 3, 6, 12, 20]  # the last step always
    s = dense_schedule(200)
    gaps = np.diff(s)
    assert (gaps >= 1).all() and gaps[:10].max() == 1 and s[-1] == 200
    # a drop at step 8 has 7 evaluations before it (1..7), one at 30 has 14
    assert evaluations_before(s, 8) == 7 and evaluations_before(s, 30) == 14
    for bad in ({"length": 0}, {"length": 10, "dense": -1}, {"length": 10, "growth": 1.0}, {"length": True}):
        with pytest.raises(ValueError):
            dense_schedule(**({"length": 10} | bad))


def grid(run, drop_step, good, loss_fall, n=8):
    steps = list(range(n))
    drop = [0.0 if drop_step is None or s < drop_step else 0.3 for s in steps]
    return WarningSeries(seed=run, domain="math", steps=steps, predictors={"good": good, "loss_fall": loss_fall},
                         drop=drop, drop_step=drop_step)


#           steps:  0    1    2    3    4    5    6    7
FIT = [grid(0, 5, [0.0, 0.1, 0.2, 0.6, 0.9, 1.0, 1.0, 1.0], [0, 1, 2, 3, 3, 3, 3, 3]),  # good crosses 0.6 at 3
       grid(1, None, [0.0, 0.1, 0.2, 0.3, 0.2, 0.3, 0.2, 0.3], [0, 1, 2, 3, 3, 3, 3, 3])]
HELD = [grid(2, 6, [0.0, 0.1, 0.1, 0.2, 0.7, 0.8, 0.9, 1.0], [0, 1, 2, 3, 3, 3, 3, 3]),  # warns at 4: lead 2
        grid(3, 4, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.9, 1.0], [0, 1, 2, 3, 3, 3, 3, 3]),  # warns at 6: late
        grid(4, None, [0.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], [0, 1, 2, 3, 3, 3, 3, 3]),
        # held out, no drop, and the predictor rises: were thresholds fitted here, 0.6 would not be chosen
        grid(5, None, [0.0, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7], [0, 1, 2, 3, 3, 3, 3, 3])]


def test_compare_fits_on_the_fit_runs_and_judges_the_held_out_ones():
    out = compare(FIT + HELD, ["good", FIRST_CHECK, "loss_fall"], fit_runs=[0, 1])
    row = next(r for r in out["rows"] if r["predictor"] == "good")
    assert row["threshold"] == 0.6  # the lowest value that warns before run 0's drop and never on run 1
    h = row["held_out"]
    assert (h["drops"], h["without_drop"], h["detected"], h["late"], h["missed"], h["false_alarms"]) == (2, 2, 1, 1, 0, 1)
    assert h["leads"] == [2] and h["lead_median"] == 2 and h["lead_range"] == [2, 2]
    assert h["detection_rate"] == 0.5 and h["false_alarm_rate"] == 0.5 and h["score"] == 0.0
    lo, hi = h["detection_ci"]
    assert 0 < lo < 0.5 < hi < 1
    assert out["held_out"] == {"runs": [2, 3, 4, 5], "series": 4, "drops": 2, "without_drop": 2}
    assert out["fit"] == {"runs": [0, 1], "series": 2, "drops": 1}
    # moving a held-out run into the fit set changes the threshold: the split is what decides it
    refit = compare(FIT + HELD, ["good"], fit_runs=[0, 1, 5])
    assert next(r for r in refit["rows"] if r["predictor"] == "good")["threshold"] > 0.7


def test_the_baselines_first_check_and_the_loss():
    out = compare(FIT + HELD, ["good", FIRST_CHECK, "loss_fall"], fit_runs=[0, 1])
    first, loss = out["baselines"]
    assert first["predictor"] == FIRST_CHECK and first["threshold"] is None
    h = first["held_out"]  # warns at step 1 everywhere: every drop detected at the longest lead, every quiet run alarmed
    assert h["leads"] == [5, 3] and h["detected"] == 2 and h["false_alarms"] == 2 and h["score"] == 0.0
    assert warn_at_first_check(HELD[0]) == 1
    # the loss falls the same way whether or not the stage forgets: it cannot tell them apart
    assert loss["predictor"] == "loss_fall" and loss["held_out"]["score"] <= 0.0
    # "good" scores 0 too on these held-out runs: it does not beat the baselines, and `beats` says so
    assert out["beats"] == []
    better = compare(FIT + HELD[:1] + HELD[2:3], ["good", FIRST_CHECK, "loss_fall"], fit_runs=[0, 1])
    assert better["beats"] == ["good"]  # held out: one timely detection, no false alarm (score 1 > 0)


def test_judge_counts_and_compare_refuses_an_empty_split():
    j = judge(HELD, lambda s: None)  # a rule that never warns
    assert (j["detected"], j["missed"], j["false_alarms"], j["score"]) == (0, 2, 0, 0.0)
    assert j["lead_median"] is None and j["lead_range"] is None
    with pytest.raises(ValueError, match="no held-out series"):
        compare(FIT, ["good"], fit_runs=[0, 1])
    with pytest.raises(ValueError, match="no series of the fit runs"):
        compare(HELD, ["good"], fit_runs=[0])
