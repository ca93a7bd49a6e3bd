"""The repair maths against independent float64 numpy references, on updates with a known spectrum."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aclarena.diagnostics import repair as R


def _known(m: int, n: int, s: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """OLD, NEW = OLD + U diag(s) Vᵀ with orthonormal U (m×k), V (n×k) drawn by QR, and U, V."""
    rng = np.random.default_rng(seed)
    k = len(s)
    u, _ = np.linalg.qr(rng.standard_normal((m, k)))
    v, _ = np.linalg.qr(rng.standard_normal((n, k)))
    old = rng.standard_normal((m, n))
    return old, old + (u * s) @ v.T, u, v


def _ref_restore(old: np.ndarray, new: np.ndarray, percent: float) -> np.ndarray:
    u, s, vt = np.linalg.svd(new - old, full_matrices=False)
    k = max(1, math.ceil(round(percent / 100 * len(s), 9)))
    return new - (u[:, :k] * s[:k]) @ vt[:k]


def _ref_dg(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    u, s, vt = np.linalg.svd(new - old, full_matrices=False)
    beta = min(old.shape) / max(old.shape)
    tau = (0.56 * beta**3 - 0.95 * beta**2 + 1.82 * beta + 1.43) * float(np.median(s))
    keep = s > tau
    return old + (u[:, keep] * s[keep]) @ vt[keep]


@pytest.mark.parametrize(("m", "n"), [(12, 8), (8, 12), (10, 10)])
@pytest.mark.parametrize("percent", [10, 25, 50, 100])
def test_svd_restore_matches_float64_reference(m, n, percent):
    s = np.array([9.0, 7.0, 5.0, 3.0, 2.0, 1.5, 1.0, 0.5])
    old, new, u, v = _known(m, n, s, seed=m * n + percent)
    got = R.svd_restore(torch.tensor(old), torch.tensor(new), percent, compute_dtype=torch.float64)
    want = _ref_restore(old, new, percent)
    np.testing.assert_allclose(got.tensor.numpy(), want, atol=1e-10)
    # the known spectrum: restoring k directions removes exactly the top-k σ_i u_i v_iᵀ
    k = max(1, math.ceil(percent / 100 * min(m, n)))
    k_known = min(k, len(s))
    known = old + (u[:, k_known:] * s[k_known:]) @ v[:, k_known:].T
    np.testing.assert_allclose(got.tensor.numpy(), known, atol=1e-10)
    assert got.kept == min(m, n) - k
    assert got.energy_removed == pytest.approx(float((s[:k_known] ** 2).sum() / (s**2).sum()))


def test_svd_restore_float32_and_full_rank_gives_old():
    s = np.array([4.0, 2.0, 1.0])
    old, new, _, _ = _known(9, 6, s, seed=1)
    got = R.svd_restore(torch.tensor(old, dtype=torch.float32), torch.tensor(new, dtype=torch.float32), 100)
    np.testing.assert_allclose(got.tensor.double().numpy(), old, atol=1e-5)
    got = R.svd_restore(torch.tensor(old, dtype=torch.float32), torch.tensor(new, dtype=torch.float32), 25)
    np.testing.assert_allclose(got.tensor.double().numpy(), _ref_restore(old, new, 25), atol=1e-5)


def test_dg_hard_keeps_spikes_above_the_bulk():
    # three spikes on top of a noise bulk: DG keeps exactly the spikes
    rng = np.random.default_rng(0)
    m, n = 60, 40
    spikes = np.array([40.0, 30.0, 20.0])
    old, signal_new, u, v = _known(m, n, spikes, seed=3)
    noise = rng.standard_normal((m, n)) * 0.1
    new = signal_new + noise
    got = R.dg_hard(torch.tensor(old), torch.tensor(new), compute_dtype=torch.float64)
    np.testing.assert_allclose(got.tensor.numpy(), _ref_dg(old, new), atol=1e-10)
    assert got.kept == 3 and got.n == 40
    s = np.linalg.svd(new - old, compute_uv=False)
    assert got.threshold == pytest.approx(R.dg_omega(40 / 60) * float(np.median(s)))
    # the repaired update is the rank-3 part: much closer to the clean signal than NEW
    err_rep = np.linalg.norm(got.tensor.numpy() - signal_new)
    err_new = np.linalg.norm(new - signal_new)
    assert err_rep < 0.6 * err_new


@pytest.mark.parametrize(("m", "n"), [(16, 9), (9, 16), (11, 11)])
def test_dg_hard_matches_reference_on_a_known_spectrum(m, n):
    s = np.geomspace(10, 0.01, min(m, n))
    old, new, _, _ = _known(m, n, s, seed=m + n)
    got = R.dg_hard(torch.tensor(old), torch.tensor(new), compute_dtype=torch.float64)
    want = _ref_dg(old, new)
    np.testing.assert_allclose(got.tensor.numpy(), want, atol=1e-10)
    beta = min(m, n) / max(m, n)
    tau = R.dg_omega(beta) * float(np.median(s))
    assert got.kept == int((s > tau).sum())


def test_dg_omega_and_median():
    assert R.dg_omega(1.0) == pytest.approx(2.86)
    assert R.dg_omega(0.5) == pytest.approx(0.56 / 8 - 0.95 / 4 + 0.91 + 1.43)
    # even count: mean of the two middle values
    assert R.dg_threshold(torch.tensor([4.0, 1.0, 3.0, 2.0]), (4, 4)) == pytest.approx(2.86 * 2.5)
    with pytest.raises(ValueError):
        R.dg_omega(0.0)


def test_vectors_take_new_and_higher_rank_tensors_are_matrices():
    old, new = torch.zeros(5), torch.arange(5.0)
    assert torch.equal(R.svd_restore(old, new, 50).tensor, new)
    assert torch.equal(R.dg_hard(old, new).tensor, new)
    old3 = torch.randn(4, 3, 2, dtype=torch.float64)
    new3 = old3 + torch.randn(4, 3, 2, dtype=torch.float64)
    got = R.svd_restore(old3, new3, 50, compute_dtype=torch.float64).tensor
    want = _ref_restore(old3.reshape(4, 6).numpy(), new3.reshape(4, 6).numpy(), 50).reshape(4, 3, 2)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-10)


@pytest.mark.parametrize("bad", [0, -5, 100.5, float("nan"), float("inf")])
def test_percent_outside_range_is_refused(bad):
    with pytest.raises(ValueError, match=r"\(0, 100\]"):
        R.svd_restore(torch.zeros(3, 3), torch.ones(3, 3), bad)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="shape"):
        R.dg_hard(torch.zeros(3, 3), torch.zeros(3, 4))


def test_rank_of_percent():
    assert R.rank_of_percent(25, 8) == 2
    assert R.rank_of_percent(10, 8) == 1
    assert R.rank_of_percent(100, 8) == 8
    assert R.rank_of_percent(0.1, 8) == 1


def _stats(values: dict[str, tuple[float, float]]) -> dict[str, R.GroupStats]:
    """Per group: (displacement², cosine) made from 2-entry vectors."""
    out = {}
    for g, (norm, cos) in values.items():
        st = R.GroupStats()
        delta = torch.tensor([norm, 0.0], dtype=torch.float64)
        oracle = torch.tensor([cos, math.sqrt(max(0.0, 1 - cos * cos))], dtype=torch.float64)
        st.add(torch.zeros(2, dtype=torch.float64), delta, oracle)
        out[g] = st
    return out


def test_select_groups_by_displacement_cosine_and_first():
    stats = _stats({"embed": (100.0, -1.0), "layer.0": (1.0, 0.9), "layer.1": (5.0, 0.1), "layer.2": (3.0, -0.5),
                    "layer.3": (0.5, 0.2), "final": (50.0, 0.0)})
    assert stats["layer.2"].cosine == pytest.approx(-0.5)
    assert stats["layer.1"].displacement == pytest.approx(5.0)
    assert R.select_groups(stats, "displacement", count=2) == ["layer.1", "layer.2"]
    assert R.select_groups(stats, "cosine", count=2) == ["layer.1", "layer.2"]
    assert R.select_groups(stats, "cosine", count=1) == ["layer.2"]
    assert R.select_groups(stats, "first") == ["layer.0"]  # ceil(0.25 · 4)
    assert R.select_groups(stats, "first", fraction=0.5) == ["layer.0", "layer.1"]
    with pytest.raises(ValueError):
        R.select_groups(stats, "largest")
    with pytest.raises(ValueError, match="no layer"):
        R.select_groups({"embed": stats["embed"]}, "first")


def test_rank_of_a_low_rank_update_and_what_was_kept_within_it():
    """Issue 49: 25% of min(m, n) directions of a rank-4 update restores all of it; the result says so."""
    g = torch.Generator().manual_seed(0)
    old = torch.randn(64, 48, generator=g)
    new = old + torch.randn(64, 4, generator=g) @ torch.randn(4, 48, generator=g) * 0.1
    got = R.svd_restore(old, new, 25.0)
    assert (got.rank, got.restored, got.kept_in_rank) == (4, 12, 0)
    torch.testing.assert_close(got.tensor, old, rtol=0, atol=1e-5)  # OLD again: a full rollback
    part = R.svd_restore(old, new, 2.0)  # k = 1 of rank 4
    assert (part.rank, part.restored, part.kept_in_rank) == (4, 1, 3)
    bf = R.svd_restore(old.bfloat16(), (old + (new - old)).bfloat16(), 25.0)  # rounding noise is not rank
    assert bf.rank == 4
    note = R.over_rank_note(25.0, 7, 7, (12, 4))
    assert note is not None and "7 of 7" in note and "full rollback" in note and "\n" not in note
    assert R.over_rank_note(25.0, 7, 0, None) is None


# --- issue 45: the repairs of a low-rank (LoRA) update on its factors, against the dense float64 repair ---------


def _factors(m: int, n: int, r: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, r, generator=g, dtype=torch.float64), torch.randn(r, n, generator=g, dtype=torch.float64)


def _dense(old: torch.Tensor, res: R.LowRankRepair) -> torch.Tensor:
    return old + res.P @ res.Q


@pytest.mark.parametrize(("m", "n", "r"), [(40, 24, 4), (24, 40, 6), (16, 16, 12), (8, 30, 10)])
def test_factored_svd_is_the_svd_of_the_product(m, n, r):
    p, q = _factors(m, n, r, seed=m + n + r)
    u, s, vh = R.factored_svd(p, q)
    dense = torch.linalg.svdvals(p @ q)
    k = s.numel()
    assert k == min(m, n, r)
    torch.testing.assert_close(s, dense[:k], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close((u * s) @ vh, p @ q, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(u.T @ u, torch.eye(k, dtype=torch.float64), rtol=0, atol=1e-10)
    torch.testing.assert_close(vh @ vh.T, torch.eye(k, dtype=torch.float64), rtol=0, atol=1e-10)


@pytest.mark.parametrize(("m", "n", "r"), [(40, 24, 4), (24, 40, 6), (16, 16, 12)])
@pytest.mark.parametrize("percent", [5, 10, 25, 100])
def test_svd_restore_on_factors_is_the_dense_repair(m, n, r, percent):
    p, q = _factors(m, n, r, seed=7 * m + n)
    old = torch.randn(m, n, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    new = old + p @ q
    dense = R.svd_restore(old, new, percent, compute_dtype=torch.float64)
    low = R.svd_restore_lowrank(p, q, percent, compute_dtype=torch.float64)
    torch.testing.assert_close(_dense(old, low), dense.tensor, rtol=0, atol=1e-9)
    assert (low.n, low.kept) == (dense.n, dense.kept)
    assert low.energy_removed == pytest.approx(dense.energy_removed, abs=1e-12)
    assert low.P.shape[1] == max(0, r - R.rank_of_percent(percent, min(m, n)))  # the kept directions only


@pytest.mark.parametrize(("m", "n", "r"), [(40, 24, 4), (16, 16, 12), (12, 20, 9)])
def test_dg_hard_on_factors_is_the_dense_repair(m, n, r):
    """Rank under half the singular values (median 0: everything kept) and above it (a real threshold)."""
    p, q = _factors(m, n, r, seed=11 * m + n)
    # a spread spectrum, so that the threshold falls between singular values when the median is not zero
    p = p * torch.logspace(0, -2, r, dtype=torch.float64)
    old = torch.randn(m, n, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    new = old + p @ q
    dense = R.dg_hard(old, new, compute_dtype=torch.float64)
    low = R.dg_hard_lowrank(p, q, compute_dtype=torch.float64)
    torch.testing.assert_close(_dense(old, low), dense.tensor, rtol=0, atol=1e-9)
    # the dense SVD's zero singular values are rounding noise (~1e-15), of which it keeps those above
    # ω · median(noise); in exact arithmetic, as on the factors, they are 0 and never kept
    real = torch.linalg.svdvals(new - old) > max(dense.threshold or 0.0, 1e-9)
    assert (low.n, low.kept) == (dense.n, int(real.sum()))
    assert low.energy_removed == pytest.approx(dense.energy_removed, abs=1e-12)
    assert low.threshold == pytest.approx(dense.threshold, abs=1e-9)
    if 2 * r <= min(m, n):
        assert low.kept == r and low.threshold == 0.0
    else:
        assert 0 < low.kept < r


# --- row blocks: a tall matrix repaired from its Gram matrix, without an m × n intermediate ---------------


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
@pytest.mark.parametrize("percent", [10, 25, 100])
def test_row_blocked_svd_restore_is_the_float64_reference(block, percent):
    s = np.array([9.0, 7.0, 5.0, 3.0, 2.0, 1.5, 1.0, 0.5])
    old, new, _, _ = _known(300, 12, s, seed=block + percent)
    old3, new3 = old.reshape(300, 3, 4), new.reshape(300, 3, 4)  # higher-rank tensors are (shape[0], -1) matrices
    for o, w in ((old, new), (old3, new3)):
        got = R.svd_restore(torch.tensor(o), torch.tensor(w), percent, compute_dtype=torch.float64, block_rows=block)
        np.testing.assert_allclose(got.tensor.numpy().reshape(300, 12), _ref_restore(old, new, percent), atol=1e-9)
        whole = R.svd_restore(torch.tensor(o), torch.tensor(w), percent, compute_dtype=torch.float64)
        assert (got.n, got.kept, got.rank, got.kept_in_rank, got.restored) == (
            whole.n, whole.kept, whole.rank, whole.kept_in_rank, whole.restored)
        assert got.energy_removed == pytest.approx(whole.energy_removed, rel=1e-9)


@pytest.mark.parametrize("block", [5, 50])
def test_row_blocked_dg_hard_is_the_float64_reference(block):
    rng = np.random.default_rng(block)
    old, signal_new, _, _ = _known(400, 30, np.array([40.0, 30.0, 20.0]), seed=block)
    new = signal_new + rng.standard_normal((400, 30)) * 0.1
    o, w = torch.tensor(old), torch.tensor(new)
    o0, w0 = o.clone(), w.clone()
    got = R.dg_hard(o, w, compute_dtype=torch.float64, block_rows=block)
    np.testing.assert_allclose(got.tensor.numpy(), _ref_dg(old, new), atol=1e-9)
    assert got.kept == 3 and got.threshold == pytest.approx(R.dg_hard(o, w, compute_dtype=torch.float64).threshold)
    assert torch.equal(o, o0) and torch.equal(w, w0)  # the projection is added to a copy, never to OLD or NEW


def test_row_blocks_in_float32_agree_with_the_whole_svd_and_leave_wide_matrices_alone():
    old, new, _, _ = _known(2000, 16, np.geomspace(5, 0.05, 16), seed=9)
    o, w = torch.tensor(old, dtype=torch.float32), torch.tensor(new, dtype=torch.float32)
    blocked = R.svd_restore(o, w, 25, block_rows=128)
    np.testing.assert_allclose(blocked.tensor.double().numpy(), _ref_restore(old, new, 25), atol=2e-5)
    assert blocked.rank == R.svd_restore(o, w, 25).rank == 16
    wide = R.svd_restore(o.T.contiguous(), w.T.contiguous(), 25, block_rows=128)  # more columns than rows: whole SVD
    np.testing.assert_allclose(wide.tensor.double().numpy(), _ref_restore(old.T, new.T, 25), atol=2e-5)


def test_block_rows_only_for_large_matrices():
    from aclarena.consolidate.repair import ROW_BLOCK_BYTES, ROW_BLOCK_MIN_BYTES, block_rows

    assert block_rows(torch.zeros(64, 64)) is None and block_rows(torch.zeros(4096)) is None
    big = torch.empty(ROW_BLOCK_MIN_BYTES // (4 * 640) + 1, 640)
    assert block_rows(big) == ROW_BLOCK_BYTES // (8 * 640)
