"""Continual-learning metrics against hand-computed small matrices."""

from __future__ import annotations

import numpy as np
import pytest

from aclarena.diagnostics.cl_metrics import (
    average_accuracy,
    average_incremental_accuracy,
    backward_transfer,
    cl_report,
    forgetting_first_last,
    forgetting_max,
    forward_transfer,
    peak_drop,
    retention,
    sample_transitions,
)

# rows: after stage 0, 1, 2; columns: task 0, 1, 2
R = np.array([[0.8, 0.1, 0.2],
              [0.5, 0.9, 0.3],
              [0.3, 0.6, 0.7]])
BASE = np.array([0.1, 0.05, 0.1])

# task 0 peaks after stage 1 (0.9), above its just-learned 0.4: the two forgetting definitions differ
R_PEAK = np.array([[0.4, 0.1, 0.0],
                   [0.9, 0.5, 0.1],
                   [0.2, 0.6, 0.8]])


def test_gem_metrics_by_hand():
    assert average_accuracy(R) == pytest.approx((0.3 + 0.6 + 0.7) / 3)
    assert backward_transfer(R) == pytest.approx(((0.3 - 0.8) + (0.6 - 0.9)) / 2)  # -0.4
    assert forward_transfer(R, BASE) == pytest.approx(((0.1 - 0.05) + (0.3 - 0.1)) / 2)  # 0.125
    np.testing.assert_allclose(forgetting_max(R), [0.5, 0.3])
    np.testing.assert_allclose(forgetting_first_last(R), [0.5, 0.3])
    assert average_incremental_accuracy(R) == pytest.approx((0.8 + (0.5 + 0.9) / 2 + (0.3 + 0.6 + 0.7) / 3) / 3)


def test_forgetting_definitions_differ_when_a_task_peaks_later():
    np.testing.assert_allclose(forgetting_max(R_PEAK), [0.9 - 0.2, 0.5 - 0.6])  # [0.7, -0.1]
    np.testing.assert_allclose(forgetting_first_last(R_PEAK), [0.4 - 0.2, 0.5 - 0.6])  # [0.2, -0.1]
    report = cl_report(R_PEAK, ["a", "b", "c"])
    s = report.summary()
    assert s["forgetting_max"] == pytest.approx(0.3)
    assert s["forgetting_first_last"] == pytest.approx(0.05)
    assert s["backward_transfer"] == pytest.approx(-0.05)
    # first-minus-last is minus BWT, task by task
    assert s["forgetting_first_last"] == pytest.approx(-s["backward_transfer"])


def test_retention_against_oracles():
    np.testing.assert_allclose(retention([0.3, 0.6, 0.7], [0.6, 0.6, 0.0]), [0.5, 1.0, np.nan])
    report = cl_report(R, ["a", "b", "c"], oracle=[0.6, 1.2, 0.7])
    np.testing.assert_allclose(report.retention, [0.5, 0.5, 1.0])
    assert report.summary()["retention_vs_oracle"] == pytest.approx(2 / 3)


def test_sample_transitions():
    before = np.array([1, 1, 1, 0, 0, 1.0])
    after = np.array([1, 0, 0, 1, 0, 1.0])
    tr = sample_transitions(before, after)
    assert (tr.n_items, tr.forgotten, tr.gained, tr.correct_before) == (6, 2, 1, 4)
    assert tr.forgetting == pytest.approx(2 / 6) and tr.backward_transfer == pytest.approx(1 / 6)
    assert tr.forgetting_of_correct == pytest.approx(0.5)
    # avg@k scores: correct means > 0.5
    assert sample_transitions([0.75, 0.25], [0.25, 0.75]).forgotten == 1
    with pytest.raises(ValueError, match="same items"):
        sample_transitions([1, 0], [1])


def test_report_with_items_and_single_stage():
    items = [[np.array([1, 1, 0, 0]), None, None],
             [np.array([1, 0, 0, 0]), np.array([1, 1, 1, 0]), None],
             [np.array([0, 1, 0, 1]), np.array([1, 0, 0, 0]), np.array([1, 1, 1, 1])]]
    report = cl_report(R, ["a", "b", "c"], base=BASE, items=items)
    # task a: stage 0 -> final: items 0 (1->0) forgotten, item 3 (0->1) gained
    np.testing.assert_allclose(report.sample_forgetting, [1 / 4, 2 / 4])
    np.testing.assert_allclose(report.sample_backward_transfer, [1 / 4, 0.0])
    assert report.summary()["forward_transfer"] == pytest.approx(0.125)
    one = cl_report([[0.4]], ["a"], base=[0.1])
    assert one.average_accuracy == pytest.approx(0.4)
    assert np.isnan(one.backward_transfer) and np.isnan(one.forward_transfer) and one.forgetting_max.size == 0
    assert np.isnan(one.summary()["forgetting_max"])


def test_missing_cells_propagate_nan():
    Rn = R.copy()
    Rn[2, 0] = np.nan
    assert np.isnan(backward_transfer(Rn)) and np.isnan(average_accuracy(Rn))
    assert forgetting_max(Rn)[1] == pytest.approx(0.3)


def test_peak_drop():
    assert peak_drop([0.2, 0.9, 0.4]) == pytest.approx(0.5)
    assert peak_drop([0.2, 0.3]) == pytest.approx(-0.1)
    assert np.isnan(peak_drop([0.5]))


@pytest.mark.parametrize("bad", [np.zeros((2, 3)), np.zeros(3), np.zeros((0, 0))])
def test_validation(bad):
    with pytest.raises(ValueError, match="square"):
        average_accuracy(bad)
    with pytest.raises(ValueError, match="one value per task"):
        forward_transfer(R, [0.1, 0.2])
    with pytest.raises(ValueError, match="name the 3 tasks"):
        cl_report(R, ["a"])


def test_retention_mean_skips_tasks_without_oracle():
    report = cl_report(R, ["a", "b", "c"], oracle=[0.6, np.nan, np.nan])
    assert report.summary()["retention_vs_oracle"] == pytest.approx(0.5)
    assert np.isnan(cl_report(R, ["a", "b", "c"], oracle=[np.nan] * 3).summary()["retention_vs_oracle"])


def test_chance_adjusted_transitions_remove_what_guessing_makes():
    import numpy as np

    from aclarena.diagnostics.cl_metrics import chance_adjusted, sample_transitions

    c = 0.25
    # a model that knows nothing and guesses both times: every flip is chance, F_true = BT_true = 0 in expectation
    rng = np.random.default_rng(0)
    n = 200_000
    before, after = rng.random(n) < c, rng.random(n) < c
    tr = sample_transitions(before.astype(float), after.astype(float))
    f, b = tr.chance_adjusted(c)
    assert tr.forgetting == pytest.approx(c * (1 - c), abs=0.005)
    assert abs(f) < 0.01 and abs(b) < 0.01
    # known before on 40% of items, 30% of them forgotten (12% of items), guesses elsewhere: F_true ~ 0.12
    known_before = rng.random(n) < 0.4
    forgot = known_before & (rng.random(n) < 0.3)
    known_after = known_before & ~forgot
    b_ok = known_before | (rng.random(n) < c)
    a_ok = known_after | (rng.random(n) < c)
    f, b = sample_transitions(b_ok.astype(float), a_ok.astype(float)).chance_adjusted(c)
    assert f == pytest.approx(0.12, abs=0.01) and abs(b) < 0.01
    # with no chance the adjustment is the plain share; counts must fit
    assert chance_adjusted(10, 5, 30, 100, 0.0) == (0.1, 0.05)
    # a checkpoint far below guessing (0 of 100 on four options) does not guess: undefined
    assert all(np.isnan(chance_adjusted(0, 0, 100, 100, 0.25)))
    assert not any(np.isnan(chance_adjusted(5, 5, 70, 100, 0.25)))  # 25 correct each time: at chance
    with pytest.raises(ValueError):
        chance_adjusted(60, 50, 10, 100, 0.25)
    with pytest.raises(ValueError):
        chance_adjusted(1, 1, 1, 10, 1.0)
