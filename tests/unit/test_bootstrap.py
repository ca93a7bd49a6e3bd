"""Percentile bootstrap of a mean, against a naive loop and the normal approximation."""

import math

import numpy as np
import pytest

from aclarena.diagnostics.bootstrap import bootstrap_mean_ci


def naive(values, n_boot, level, seed):
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(n_boot):  # one resample at a time, the way the chunks draw them
        means.append(values[rng.integers(0, len(values), (1, len(values)))].mean())
    return tuple(np.quantile(means, [(1 - level) / 2, (1 + level) / 2]))


@pytest.mark.parametrize("n", [2, 7, 50, 300])
def test_matches_a_naive_resampling_loop(n):
    values = (np.random.default_rng(n).random(n) < 0.4).astype(float)
    lo, hi = bootstrap_mean_ci(values, n_boot=1000, level=0.9, seed=3)
    assert lo <= values.mean() <= hi
    nlo, nhi = naive(values, 1000, 0.9, 3)
    # chunks of resamples draw the same stream as one resample at a time: equal, not just close
    assert (lo, hi) == pytest.approx((nlo, nhi), abs=1e-12)


def test_width_follows_the_normal_approximation():
    values = np.r_[np.ones(25), np.zeros(25)]  # n = 50 at p = 0.5
    lo, hi = bootstrap_mean_ci(values, n_boot=4000, level=0.95)
    half = 1.96 * math.sqrt(0.25 / 50)  # 0.139
    assert (hi - lo) / 2 == pytest.approx(half, abs=0.02)


def test_edge_cases_and_validation():
    assert bootstrap_mean_ci(np.array([])) == (pytest.approx(math.nan, nan_ok=True),) * 2
    assert bootstrap_mean_ci(np.array([0.3, np.nan])) == (0.3, 0.3)
    assert bootstrap_mean_ci(np.zeros(40)) == (0.0, 0.0)
    assert bootstrap_mean_ci(np.arange(10.0), seed=1) == bootstrap_mean_ci(np.arange(10.0), seed=1)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_mean_ci(np.ones(3), n_boot=0)
    with pytest.raises(ValueError, match="level"):
        bootstrap_mean_ci(np.ones(3), level=1.0)
