"""Merge maths against naive element-by-element formulas (numpy, Python loops)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aclarena.consolidate import merging as M

SHAPES = [(7,), (5, 6), (3, 4, 5), (1, 1)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _models(shape, k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=g).to(dtype)
    models = [(base.float() + 0.1 * torch.randn(shape, generator=g)).to(dtype) for _ in range(k)]
    return base, models


def _np(t):
    return t.float().numpy().astype(np.float64)


def naive_ties(base, models, density, lam):
    b = _np(base).ravel()
    taus = [(_np(m).ravel() - b) for m in models]
    n = b.size
    k = max(1, int(density * n)) if density < 1 else n
    trimmed = []
    for tau in taus:
        order = sorted(range(n), key=lambda i: -abs(tau[i]))
        keep = set(order[:k])
        trimmed.append(np.array([tau[i] if i in keep else 0.0 for i in range(n)]))
    out = np.empty(n)
    for p in range(n):
        s = float(sum(t[p] for t in trimmed))
        sign = int(s > 0) - int(s < 0)
        agree = [float(t[p]) for t in trimmed if t[p] != 0 and int(t[p] > 0) - int(t[p] < 0) == sign]
        out[p] = b[p] + lam * (sum(agree) / len(agree) if agree else 0.0)
    return out.reshape(tuple(base.shape))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 3])
def test_uniform_and_task_arithmetic(shape, dtype, k):
    base, models = _models(shape, k, dtype)
    want_u = np.mean([_np(m) for m in models], axis=0)
    torch.testing.assert_close(M.uniform(models), torch.from_numpy(want_u).float(), rtol=1e-6, atol=1e-6)
    for lam in (0.0, 0.3, 1.0, -0.5):
        want = _np(base) + lam * sum(_np(m) - _np(base) for m in models)
        torch.testing.assert_close(M.task_arithmetic(base, models, lam), torch.from_numpy(want).float(),
                                   rtol=1e-5, atol=1e-5)
    # uniform is task arithmetic with λ = 1/K
    torch.testing.assert_close(M.task_arithmetic(base, models, 1.0 / k), M.uniform(models), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("density", [0.1, 0.2, 0.5, 1.0])
def test_ties_equals_naive(shape, dtype, density):
    base, models = _models(shape, 3, dtype, seed=3)
    for lam in (1.0, 0.7):
        got = M.ties(base, models, density=density, lam=lam)
        want = torch.from_numpy(naive_ties(base, models, density, lam)).float()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_ties_steps():
    tau = torch.tensor([0.5, -3.0, 0.1, 2.0, -0.2])
    torch.testing.assert_close(M.trim(tau, 0.4), torch.tensor([0.0, -3.0, 0.0, 2.0, 0.0]))
    assert M.trim(tau, 0.0).abs().sum() == 0
    torch.testing.assert_close(M.trim(tau, 0.01), torch.tensor([0.0, -3.0, 0.0, 0.0, 0.0]))  # at least one
    trimmed = [torch.tensor([1.0, -1.0, 0.0, 2.0]), torch.tensor([-3.0, -1.0, 0.0, 0.0]), torch.tensor([1.0, 2.0, 0.0, 0.0])]
    sign = M.elect_sign(trimmed)
    torch.testing.assert_close(sign, torch.tensor([-1.0, 0.0, 0.0, 1.0]))
    # entry 0: only -3 agrees; entry 1: sign 0 -> nothing agrees; entry 2: all zero; entry 3: only 2
    torch.testing.assert_close(M.disjoint_mean(trimmed, sign), torch.tensor([-3.0, 0.0, 0.0, 2.0]))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("p", [0.0, 0.3, 0.9])
def test_dare_equals_formula_with_its_masks(shape, p):
    base, models = _models(shape, 3, torch.float32, seed=5)
    got = M.dare(base, models, p=p, lam=0.5, seed=11, tensor="w")
    want = _np(base).copy()
    for i, m in enumerate(models):
        keep = M.dare_mask(shape, p, M.dare_seed(11, "w", i)).numpy()
        want += 0.5 * np.where(keep, _np(m) - _np(base), 0.0) / (1 - p)
    torch.testing.assert_close(got, torch.from_numpy(want).float(), rtol=1e-5, atol=1e-5)


def test_dare_masks_are_seeded_and_unbiased():
    base, models = _models((200, 300), 2, torch.float32, seed=7)
    a = M.dare(base, models, p=0.9, seed=1, tensor="x")
    torch.testing.assert_close(a, M.dare(base, models, p=0.9, seed=1, tensor="x"), rtol=0, atol=0)
    assert not torch.equal(a, M.dare(base, models, p=0.9, seed=2, tensor="x"))
    assert not torch.equal(a, M.dare(base, models, p=0.9, seed=1, tensor="y"))
    keep = M.dare_mask((200, 300), 0.9, 123)
    assert abs(keep.float().mean().item() - 0.1) < 0.01
    # the rescaling keeps the expectation: averaged over seeds DARE approaches task arithmetic
    mean = torch.stack([M.dare(base[:40], [m[:40] for m in models], p=0.5, seed=s, tensor="x") for s in range(200)]).mean(0)
    base, models = base[:40], [m[:40] for m in models]
    ta = M.task_arithmetic(base, models, 1.0)
    assert (mean - ta).abs().mean() < 0.2 * (ta - base).abs().mean()


def test_p_zero_dare_is_task_arithmetic():
    base, models = _models((4, 5), 3, torch.float32)
    torch.testing.assert_close(M.dare(base, models, p=0.0, lam=0.4), M.task_arithmetic(base, models, 0.4))


@pytest.mark.parametrize("bad", [
    lambda b, ms: M.ties(b, ms, density=1.5),
    lambda b, ms: M.dare(b, ms, p=1.0),
    lambda b, ms: M.task_arithmetic(b, ms, float("nan")),
    lambda b, ms: M.task_arithmetic(b[:1], ms),
    lambda b, ms: M.uniform([]),
])
def test_bad_arguments(bad):
    base, models = _models((3, 4), 2, torch.float32)
    with pytest.raises(ValueError):
        bad(base, models)


def test_stage_updates_of_a_chain_are_not_cumulative():
    """Stage ends of one chain merge their own updates θ_i − θ_(i−1), not θ_i − θ_base (issue 15)."""
    g = torch.Generator().manual_seed(4)
    base = torch.randn(6, 5, generator=g)
    deltas = [torch.randn(6, 5, generator=g) for _ in range(4)]
    ends, theta = [], base
    for d in deltas:
        theta = theta + d
        ends.append(theta)
    starts = [base, *ends[:-1]]
    # task arithmetic of the stage updates at λ = 1 is the end point, at λ the interpolation to it
    torch.testing.assert_close(M.task_arithmetic(base, ends, 1.0, starts=starts), ends[-1])
    torch.testing.assert_close(M.task_arithmetic(base, ends, 0.5, starts=starts), base + 0.5 * (ends[-1] - base))
    # from the base they would be cumulative: base + 4 δ_1 + 3 δ_2 + 2 δ_3 + δ_4
    cumulative = base + 4 * deltas[0] + 3 * deltas[1] + 2 * deltas[2] + deltas[3]
    torch.testing.assert_close(M.task_arithmetic(base, ends, 1.0), cumulative)
    # TIES and DARE take the same stage updates
    torch.testing.assert_close(M.ties(base, ends, density=0.4, starts=starts),
                               M.ties(torch.zeros_like(base), deltas, density=0.4) + base)
    torch.testing.assert_close(M.dare(base, ends, p=0.3, seed=2, tensor="w", starts=starts),
                               M.dare(torch.zeros_like(base), deltas, p=0.3, seed=2, tensor="w") + base)
    with pytest.raises(ValueError, match="one tensor per model"):
        M.task_vectors(base, ends, starts[:2])
