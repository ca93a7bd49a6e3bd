"""The pure maths of `flips` against naive references (diagnostics/flips.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from aclarena.diagnostics import flips as F


def test_first_divergence_and_below():
    tok = np.array([5, 6, 7, 8, 9])
    assert F.first_divergence(tok, np.array([5, 6, 1, 8, 2])) == 2
    assert F.first_divergence(tok, tok.copy()) == -1
    # an invalid (non-finite) position is skipped
    assert F.first_divergence(tok, np.array([5, 6, 1, 8, 2]), valid=np.array([1, 1, 0, 1, 1], bool)) == 4
    assert F.first_below(np.array([-0.1, np.nan, -3.0, -5.0]), -2.0) == 2
    assert F.first_below(np.array([-0.1, -0.2]), -2.0) == -1
    with pytest.raises(ValueError):
        F.first_below(np.array([0.0]), 1.0)
    with pytest.raises(ValueError):
        F.first_divergence(tok, tok[:3])


@pytest.mark.parametrize("seed", range(5))
def test_percentile_and_top_fraction_match_naive(seed):
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 6, size=37).astype(float)  # many ties
    v[rng.integers(0, 37, size=3)] = np.nan
    finite = [x for x in v if not math.isnan(x)]
    for j in range(len(v)):
        got = F.percentile_rank(v, j)
        if math.isnan(v[j]):
            assert math.isnan(got)
        else:
            assert got == pytest.approx(100 * sum(x <= v[j] for x in finite) / len(finite))
    for q in (0.06, 0.2, 0.5, 0.99):
        mask = F.top_fraction(v, q)
        k = math.ceil(q * len(finite))
        naive = sorted((i for i in range(len(v)) if not math.isnan(v[i])), key=lambda i: (-v[i], i))[:k]
        assert set(np.flatnonzero(mask)) == set(naive)


def test_wilson_known_values():
    # Wilson (1927) 95% interval of 0/10 and 5/10 (textbook values)
    lo, hi = F.wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = F.wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    assert F._z(0.95) == pytest.approx(1.959963985, abs=1e-8)
    assert all(math.isnan(x) for x in F.wilson(0, 0))


@pytest.mark.parametrize("n", [1, 4, 7])
def test_poisson_binomial_matches_enumeration(n):
    rng = np.random.default_rng(n)
    p = rng.uniform(0, 1, size=n)
    want = np.zeros(n + 1)
    for bits in itertools.product([0, 1], repeat=n):
        want[sum(bits)] += np.prod([pi if b else 1 - pi for pi, b in zip(p, bits, strict=True)])
    np.testing.assert_allclose(F.poisson_binomial(p.tolist()), want, atol=1e-12)


def test_chance_share():
    hits = np.array([1, 1, 1, 0], bool)
    p = np.array([0.1, 0.1, 0.1, 0.1])
    c = F.chance_share(hits, p)
    assert (c.n, c.hits, c.share, c.chance) == (4, 3, 0.75, pytest.approx(0.1))
    # P(Binomial(4, 0.1) >= 3) = 4 * 0.1^3 * 0.9 + 0.1^4
    assert c.p_value == pytest.approx(4 * 0.001 * 0.9 + 0.0001)
    assert c.share_low < c.share < c.share_high
    assert c.chance_low <= c.chance <= c.chance_high
    assert c.chance_high == 0.5  # 2 of 4 is the 97.5% quantile of Binomial(4, 0.1)
    assert F.chance_share(np.zeros(0, bool), np.zeros(0)).n == 0


def test_budget_count_and_threshold():
    assert F.budget_count(0.5, 20) == 1
    assert F.budget_count(20, 20) == 4
    assert F.budget_count(100, 7) == 7
    assert F.budget_count(5, 0) == 0
    with pytest.raises(ValueError):
        F.budget_count(0, 10)
    kl = np.array([0.1, 5.0, 0.3, 2.0, 9.0])
    dis = np.array([0, 1, 1, 1, 0], bool)
    assert F.swap_threshold(kl, dis, 1) == 5.0
    assert F.swap_threshold(kl, dis, 2) == 2.0
    assert F.swap_threshold(kl, dis, 10) == 0.3  # more than there are: every disagreeing position
    assert F.swap_threshold(kl, dis, 0) == math.inf
    rng = np.random.default_rng(0)
    r = F.random_ordinals(5, 3, rng)
    assert len(r) == 3 and r <= set(range(5))
    assert F.random_ordinals(2, 5, rng) == frozenset({0, 1})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_step_divergence_matches_naive(dtype):
    g = torch.Generator().manual_seed(0)
    p = (torch.randn(6, 50, generator=g) * 3).to(dtype)
    q = (torch.randn(6, 50, generator=g) * 3).to(dtype)
    tp, tq, kl = F.step_divergence(p, q)
    pp = torch.softmax(p.double(), -1)
    want = (pp * (pp.log() - torch.log_softmax(q.double(), -1))).sum(-1)
    torch.testing.assert_close(kl.double(), want, atol=1e-5, rtol=1e-5)
    assert torch.equal(tp, p.argmax(-1)) and torch.equal(tq, q.argmax(-1))
    _, _, zero = F.step_divergence(p, p.clone())
    assert float(zero.abs().max()) < 1e-6


def test_recovery_curve():
    o = np.array([[1, 1, -1], [0, 1, 1], [0, 0, 1]])
    c = F.recovery_curve(o)
    assert c["share"] == [pytest.approx(1 / 3), pytest.approx(2 / 3), 1.0]
    assert c["n"] == [3, 3, 2]
