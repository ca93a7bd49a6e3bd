"""The fused CPU kernel of token scoring against the float64 reference and the torch path (issue 18)."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

from aclarena.diagnostics import fused_cpu
from aclarena.diagnostics.token_drift import Workspace, dist_stats, pair_stats

HAVE_CC = shutil.which("cc") is not None or shutil.which("gcc") is not None


@pytest.fixture(autouse=True)
def _kernel_on(monkeypatch):
    monkeypatch.delenv("ACLARENA_FUSED_CPU", raising=False)


def reference64(ref: torch.Tensor, ckpt: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    lr, lc = ref.double().log_softmax(-1), ckpt.double().log_softmax(-1)
    pr, pc = lr.exp(), lc.exp()
    lm = ((pr + pc) / 2).log()
    return {
        "h_ref": -(pr * lr).sum(-1), "h_ckpt": -(pc * lc).sum(-1),
        "lp_ref": lr.gather(-1, targets[:, None])[:, 0], "lp_ckpt": lc.gather(-1, targets[:, None])[:, 0],
        "kl": (pr * (lr - lc)).sum(-1), "kl_rev": (pc * (lc - lr)).sum(-1),
        "js": 0.5 * (pr * (lr - lm)).sum(-1) + 0.5 * (pc * (lc - lm)).sum(-1),
        "lse_ref": ref.double().logsumexp(-1), "lse_ckpt": ckpt.double().logsumexp(-1), "lr": lr, "lc": lc,
    }


def assert_close64(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Within 1e-5 of the float64 value, relative where |value| > 1 (the issue's bar)."""
    assert got.shape == want.shape, what
    if want.numel() == 0:
        return
    err = ((got.double() - want).abs() / want.abs().clamp_min(1.0)).max()
    assert float(err) <= 1e-5, f"{what}: error {float(err):.2e}"


def make(n: int, vocab: int, *, scale: float, noise: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, vocab, generator=g, dtype=torch.float64) * scale
    ckpt = ref + torch.randn(n, vocab, generator=g, dtype=torch.float64) * noise
    if n:
        ref[0] += 300.0  # far from zero: the max shift must keep exp() finite
        ckpt[0] += 290.0
    return ref.float(), ckpt.float(), torch.randint(0, vocab, (n,), generator=g)


needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler: the kernel cannot be built here")


@needs_cc
def test_kernel_builds_and_is_used():
    assert fused_cpu.available(), fused_cpu._STATE.reason
    z = torch.randn(3, 100)
    assert fused_cpu.pair_sums(z.clone(), z.clone(), None, 2) is not None
    assert fused_cpu.usable(z) and not fused_cpu.usable(z.double()) and not fused_cpu.usable(z.t())


@needs_cc
@pytest.mark.parametrize("vocab", [1, 2, 15, 16, 17, 64, 65, 511, 512, 513, 1000, 4099])
@pytest.mark.parametrize("n", [1, 3, 9, 40])
@pytest.mark.parametrize("chunk", [1, 7, None])
def test_pair_stats_match_float64_over_a_grid(vocab, n, chunk):
    ref, ckpt, t = make(n, vocab, scale=4.0, noise=1.0, seed=vocab * 100 + n)
    k = min(5, vocab)
    got = pair_stats(ref, ckpt, t, topk=k, chunk_size=chunk)
    want = reference64(ref, ckpt, t)
    assert_close64(got.ref.entropy, want["h_ref"], "reference entropy")
    assert_close64(got.ckpt.entropy, want["h_ckpt"], "entropy")
    assert_close64(got.ref.logprob, want["lp_ref"], "reference log-prob")
    assert_close64(got.ckpt.logprob, want["lp_ckpt"], "log-prob")
    assert_close64(got.kl, want["kl"], "KL")
    assert_close64(got.kl_reverse, want["kl_rev"], "reverse KL")
    assert_close64(got.js, want["js"], "JS")
    assert_close64(got.ref.lse, want["lse_ref"], "reference log-normaliser")
    assert_close64(got.ckpt.lse, want["lse_ckpt"], "log-normaliser")
    for stats, full in ((got.ref, want["lr"]), (got.ckpt, want["lc"])):
        vals, ids = full.topk(k, dim=-1)
        assert torch.equal(stats.topk_ids, ids)  # continuous random logits: no ties
        assert_close64(stats.topk_logprobs, vals, "top-k log-probs")
        assert torch.equal(stats.top1, ids[:, 0])


@needs_cc
@pytest.mark.parametrize("vocab", [1, 33, 1000])
@pytest.mark.parametrize("topk", [0, 1, 4])
@pytest.mark.parametrize("chunk", [1, 5, None])
def test_dist_stats_match_float64(vocab, topk, chunk):
    _, z, t = make(11, vocab, scale=6.0, noise=2.0, seed=vocab + topk)
    k = min(topk, vocab)
    got = dist_stats(z, t, topk=k, chunk_size=chunk)
    lz = z.double().log_softmax(-1)
    assert_close64(got.entropy, -(lz.exp() * lz).sum(-1), "entropy")
    assert_close64(got.logprob, lz.gather(-1, t[:, None])[:, 0], "log-prob")
    assert_close64(got.lse, z.double().logsumexp(-1), "log-normaliser")
    vals, ids = lz.topk(max(k, 1), dim=-1)
    assert torch.equal(got.top1, ids[:, 0])
    assert torch.equal(got.topk_ids, ids[:, :k])
    assert_close64(got.topk_logprobs, vals[:, :k], "top-k log-probs")


@needs_cc
@pytest.mark.parametrize("ref_topk", [True, False])
def test_kernel_equals_torch_path(monkeypatch, ref_topk):
    ref, ckpt, t = make(37, 3001, scale=3.0, noise=0.5, seed=7)

    def run() -> object:
        ws = Workspace(37, 3001, torch.float32, "cpu", sub_rows=8)
        ws.zr.copy_(ref)
        ws.zc.copy_(ckpt)
        return ws.pair_stats(37, t, 5, ref_topk=ref_topk)

    fused = run()
    monkeypatch.setenv("ACLARENA_FUSED_CPU", "0")
    assert not fused_cpu.available()
    plain = run()
    for a, b in ((fused.ref, plain.ref), (fused.ckpt, plain.ckpt)):
        for name in ("entropy", "lse", "logprob", "topk_logprobs"):
            torch.testing.assert_close(getattr(a, name), getattr(b, name), atol=2e-5, rtol=1e-5)
        for name in ("top1", "topk_ids"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None) == (y is None) and (x is None or torch.equal(x, y))
    for name in ("kl", "kl_reverse", "js"):
        torch.testing.assert_close(getattr(fused, name), getattr(plain, name), atol=2e-5, rtol=1e-5)
    assert fused.kl.dtype == plain.kl.dtype == torch.float32


@needs_cc
def test_identical_rows_give_exact_zero_through_the_kernel():
    ref, _, t = make(25, 2048, scale=8.0, noise=0.0)
    s = fused_cpu.pair_sums(ref.clone(), ref.clone(), t, 3)
    assert s is not None and not bool(s.bad.any())
    got = pair_stats(ref, ref.clone(), t, topk=3)
    assert torch.count_nonzero(got.kl) == 0 and torch.count_nonzero(got.js) == 0
    assert torch.count_nonzero(got.kl_reverse) == 0
    assert not bool(got.flips.any())


@needs_cc
def test_non_finite_rows_give_what_the_torch_path_gives(monkeypatch):
    ref, ckpt, t = make(9, 700, scale=2.0, noise=0.3)
    ref[1, 5] = float("nan")
    ckpt[3, 9] = float("inf")
    ckpt[4, 0] = float("-inf")
    ref[6] = float("-inf")
    s = fused_cpu.pair_sums(ref.clone(), ckpt.clone(), t, 2)
    assert s is not None and s.bad.tolist() == [i in (1, 3, 4, 6) for i in range(9)]
    fused = pair_stats(ref, ckpt, t, topk=2)
    monkeypatch.setenv("ACLARENA_FUSED_CPU", "0")
    plain = pair_stats(ref, ckpt, t, topk=2)
    for name in ("kl", "js", "kl_reverse"):
        torch.testing.assert_close(getattr(fused, name), getattr(plain, name), equal_nan=True, atol=2e-5, rtol=1e-5)
    for a, b in ((fused.ref, plain.ref), (fused.ckpt, plain.ckpt)):
        for name in ("entropy", "lse", "logprob"):
            torch.testing.assert_close(getattr(a, name), getattr(b, name), equal_nan=True, atol=2e-5, rtol=1e-5)
    assert bool(torch.isnan(fused.kl[[1, 3, 4, 6]]).all()) and bool(torch.isfinite(fused.kl[[0, 2, 5, 7, 8]]).all())


@needs_cc
def test_top_k_with_ties_returns_the_largest_values():
    z = torch.zeros(4, 300)
    z[:, 10] = z[:, 200] = z[:, 250] = 3.0  # three-way tie at the top
    z[1] = torch.arange(300.0) % 7  # many ties
    got = dist_stats(z, topk=5)
    want = z.topk(5, dim=-1).values
    assert torch.equal(z.gather(1, got.topk_ids), want)
    assert all(len(set(r.tolist())) == 5 for r in got.topk_ids)
    assert got.topk_ids[0].tolist()[:3] == [10, 200, 250]  # equal values: lower index first


def test_failed_build_falls_back_with_one_warning(monkeypatch, tmp_path):
    monkeypatch.setattr(fused_cpu, "_STATE", fused_cpu._State())
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.setenv("ACLARENA_CACHE", str(tmp_path))
    ref, ckpt, t = make(6, 300, scale=3.0, noise=1.0)
    with pytest.warns(RuntimeWarning, match="falls back to torch"):
        got = pair_stats(ref, ckpt, t, topk=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pair_stats(ref, ckpt, t, topk=2)  # said once
    assert not fused_cpu.available() and "failed" in fused_cpu._STATE.reason
    assert_close64(got.kl, reference64(ref, ckpt, t)["kl"], "KL (torch path)")
