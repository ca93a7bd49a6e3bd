"""The token-drift maths against naive float64 references, over shapes, dtypes and chunk sizes."""

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from aclarena.diagnostics.token_drift import (
    DriftSummary,
    HighEntropy,
    concentration_curve,
    default_chunk_size,
    dist_stats,
    entropy,
    high_entropy_mask,
    js_divergence,
    kl_divergence,
    log_probs,
    pair_stats,
    summarize_drift,
)

SHAPES = [(1,), (7,), (2, 5)]
VOCABS = [3, 97, 1000, 2048]  # 2048: the blocked dot products; the others: the fallback
DTYPES = [torch.float32, torch.bfloat16, torch.float64]
CHUNKS = [1, 3, 16, None]


def naive(ref: torch.Tensor, ckpt: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The textbook way, in float64, on full tensors."""
    lr = ref.double().log_softmax(-1)
    lc = ckpt.double().log_softmax(-1)
    pr, pc = lr.exp(), lc.exp()
    m = 0.5 * (pr + pc)
    lm = m.log()
    return {
        "h_ref": -(pr * lr).sum(-1),
        "h_ckpt": -(pc * lc).sum(-1),
        "lp_ref": lr.gather(-1, targets.unsqueeze(-1)).squeeze(-1),
        "lp_ckpt": lc.gather(-1, targets.unsqueeze(-1)).squeeze(-1),
        "kl": (pr * (lr - lc)).sum(-1),
        "kl_rev": (pc * (lc - lr)).sum(-1),
        "js": 0.5 * (pr * (lr - lm)).sum(-1) + 0.5 * (pc * (lc - lm)).sum(-1),
        "lse_ref": torch.logsumexp(ref.double(), -1),
        "lc": lc,
        "lr": lr,
    }


def make_logits(shape, vocab, dtype, *, scale, noise, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(*shape, vocab, generator=g, dtype=torch.float64) * scale
    ckpt = ref + torch.randn(*shape, vocab, generator=g, dtype=torch.float64) * noise
    # one row far from zero: the max shift must keep exp() finite
    ref.view(-1, vocab)[0] += 500.0
    ckpt.view(-1, vocab)[0] += 480.0
    targets = torch.randint(0, vocab, shape, generator=g)
    return ref.to(dtype), ckpt.to(dtype), targets


def tol(dtype):
    # bf16 inputs are upcast and computed in float32: float32 tolerances apply to the maths
    return {"atol": 1e-10, "rtol": 1e-9} if dtype == torch.float64 else {"atol": 3e-5, "rtol": 2e-4}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_pair_stats_match_naive(shape, vocab, dtype, chunk):
    for scale, noise in ((0.5, 0.01), (4.0, 1.0), (8.0, 3.0)):
        ref, ckpt, targets = make_logits(shape, vocab, dtype, scale=scale, noise=noise, seed=vocab + len(shape))
        want = naive(ref, ckpt, targets)
        k = min(4, vocab)
        got = pair_stats(ref, ckpt, targets, topk=k, chunk_size=chunk, sub_rows=2 if vocab == 97 else None)
        out_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        assert got.kl.dtype == out_dtype and got.kl.shape == shape
        t = tol(dtype)
        assert_close(got.kl.double(), want["kl"], **t)
        assert_close(got.kl_reverse.double(), want["kl_rev"], **t)
        assert_close(got.js.double(), want["js"], **t)
        assert_close(got.ref.entropy.double(), want["h_ref"], **t)
        assert_close(got.ckpt.entropy.double(), want["h_ckpt"], **t)
        assert_close(got.ref.logprob.double(), want["lp_ref"], **t)
        assert_close(got.ckpt.logprob.double(), want["lp_ckpt"], **t)
        assert_close(got.ref.lse.double(), want["lse_ref"], **t)
        # top-k: values are the k largest log-probs, in order, and each id carries its value
        # (ids themselves may differ between tied tokens, which bf16 makes common)
        top_want = want["lc"].topk(k, -1).values
        assert got.ckpt.topk_ids.shape == (*shape, k)
        assert_close(got.ckpt.topk_logprobs.double(), top_want, **t)
        assert_close(want["lc"].gather(-1, got.ckpt.topk_ids), top_want, **t)
        assert_close(want["lr"].gather(-1, got.ref.top1.unsqueeze(-1)).squeeze(-1), want["lr"].amax(-1), **t)
        assert bool((got.js <= math.log(2) + 1e-7).all())


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_single_model_functions_match_naive(vocab, dtype, chunk):
    ref, ckpt, targets = make_logits((3, 4), vocab, dtype, scale=3.0, noise=0.5, seed=vocab)
    want = naive(ref, ckpt, targets)
    t = tol(dtype)
    assert_close(entropy(ref, chunk_size=chunk).double(), want["h_ref"], **t)
    assert_close(log_probs(ckpt, targets, chunk_size=chunk).double(), want["lp_ckpt"], **t)
    assert_close(kl_divergence(ref, ckpt, chunk_size=chunk).double(), want["kl"], **t)
    assert_close(js_divergence(ref, ckpt, chunk_size=chunk).double(), want["js"], **t)
    k = min(3, vocab)
    ds = dist_stats(ckpt, targets, topk=k, chunk_size=chunk, sub_rows=2)
    assert_close(ds.topk_logprobs.double(), want["lc"].topk(k, -1).values, **t)
    assert_close(ds.lse.double(), torch.logsumexp(ckpt.double(), -1), **t)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk", [1, 5, None])
def test_identical_logits_give_exact_zero_and_no_flips(dtype, chunk):
    ref, _, targets = make_logits((4, 6), 257, dtype, scale=5.0, noise=0.0)
    got = pair_stats(ref, ref.clone(), targets, topk=3, chunk_size=chunk)
    assert torch.count_nonzero(got.kl) == 0
    assert torch.count_nonzero(got.kl_reverse) == 0
    assert torch.count_nonzero(got.js) == 0
    assert not bool(got.flips.any())
    assert torch.equal(got.ref.entropy, got.ckpt.entropy)
    assert torch.equal(got.ref.logprob, got.ckpt.logprob)


def test_small_drift_is_positive_and_second_order():
    # KL of q = p perturbed by δ scales like δ²: checks precision far below the values themselves
    ref, _, _ = make_logits((8,), 500, torch.float32, scale=2.0, noise=0.0)
    direction = torch.randn(8, 500, generator=torch.Generator().manual_seed(3))
    kls = []
    for delta in (1e-1, 3e-2):
        kls.append(kl_divergence(ref, ref + delta * direction).double())
    ratio = (kls[0] / kls[1]).median().item()
    assert 9.0 < ratio < 12.5, ratio  # (1e-1 / 3e-2)² ≈ 11.1


def test_non_finite_rows_are_flagged_not_clamped():
    ref, ckpt, targets = make_logits((5,), 50, torch.float32, scale=2.0, noise=0.5)
    ckpt[1, 7] = float("nan")
    ckpt[3, 2] = float("inf")
    ref[4, 0] = float("-inf")
    got = pair_stats(ref, ckpt, targets, topk=2)
    bad = ~torch.isfinite(got.kl)
    assert bad.tolist() == [False, True, False, True, True]
    assert (~torch.isfinite(got.js)).tolist() == bad.tolist()
    want = naive(ref, ckpt, targets)
    assert_close(got.kl[[0, 2]].double(), want["kl"][[0, 2]], atol=3e-5, rtol=2e-4)


def test_chunking_bounds_memory_and_validates():
    assert default_chunk_size(151_936) >= 256 and default_chunk_size(151_936) * 2 * 151_936 * 4 <= 640 * 2**20
    assert default_chunk_size(10) > 1000
    ref, ckpt, targets = make_logits((3,), 10, torch.float32, scale=1.0, noise=0.1)
    with pytest.raises(ValueError, match="same shape"):
        pair_stats(ref, ckpt[:2])
    with pytest.raises(ValueError, match="topk"):
        pair_stats(ref, ckpt, topk=11)
    with pytest.raises(ValueError, match="chunk_size"):
        pair_stats(ref, ckpt, chunk_size=0)
    with pytest.raises(ValueError, match="targets"):
        pair_stats(ref, ckpt, torch.tensor([0, 1, 10]))
    with pytest.raises(ValueError, match="floating"):
        entropy(torch.ones(3, 4, dtype=torch.long))
    empty = pair_stats(ref[:0], ckpt[:0], targets[:0], topk=2)
    assert empty.kl.shape == (0,) and empty.ckpt.topk_ids.shape == (0, 2)


# --- stratification and summaries -----------------------------------------------------------


def test_high_entropy_spec_parse_and_validate():
    assert HighEntropy.parse("q=0.06") == HighEntropy(q=0.06)
    assert HighEntropy.parse("nats=1.5") == HighEntropy(q=None, nats=1.5)
    assert str(HighEntropy.parse(" Q = 0.1")) == "q=0.1"
    for bad in ("0.06", "q=1.5", "q=0", "nats=-1", "nats=abc", "top=3"):
        with pytest.raises(ValueError):
            HighEntropy.parse(bad)
    with pytest.raises(ValueError, match="exactly one"):
        HighEntropy(q=0.1, nats=1.0)


@pytest.mark.parametrize("n", [1, 10, 17, 100, 1000])
@pytest.mark.parametrize("q", [0.06, 0.5])
def test_high_entropy_mask_matches_naive(n, q):
    rng = np.random.default_rng(n)
    h = rng.random(n).round(2)  # rounding makes ties
    mask, threshold = high_entropy_mask(h, HighEntropy(q=q))
    k = max(1, math.floor(q * n + 0.5))
    ranked = sorted(range(n), key=lambda i: (-h[i], i))
    assert sorted(np.flatnonzero(mask).tolist()) == sorted(ranked[:k])
    assert threshold == h[ranked[k - 1]]
    mask2, thr2 = high_entropy_mask(h, HighEntropy(q=None, nats=0.5))
    assert mask2.tolist() == [x > 0.5 for x in h] and thr2 == 0.5


def naive_curve(h, d):
    order = sorted(range(len(h)), key=lambda i: (-h[i], i))
    total = sum(d)
    ys = [0.0]
    for i in order:
        ys.append(ys[-1] + d[i] / total)
    area = sum((ys[i] + ys[i + 1]) / 2 for i in range(len(h))) / len(h)
    return ys, area


@pytest.mark.parametrize("n", [1, 2, 50, 333])
def test_concentration_curve_matches_naive(n):
    rng = np.random.default_rng(n)
    h = rng.random(n)
    d = rng.random(n) ** 3
    x, y, area = concentration_curve(h, d, n_points=11)
    ys, area_want = naive_curve(h.tolist(), d.tolist())
    assert area == pytest.approx(area_want, rel=1e-12)
    assert y[0] == 0.0 and y[-1] == pytest.approx(1.0)
    for xi, yi in zip(x, y, strict=True):  # interpolation on the exact curve
        pos = xi * n
        lo = int(math.floor(pos))
        hi = min(lo + 1, n)
        want = ys[lo] + (pos - lo) * (ys[hi] - ys[lo]) if hi != lo else ys[lo]
        assert yi == pytest.approx(want, abs=1e-12)
    # all drift at the single highest-entropy position: the area is 1 - 1/(2n)
    d2 = np.zeros(n)
    d2[int(np.argmax(h))] = 1.0
    assert concentration_curve(h, d2)[2] == pytest.approx(1 - 1 / (2 * n))
    # no drift at all: undefined, not 0
    assert math.isnan(concentration_curve(h, np.zeros(n))[2])


def test_uniform_drift_gives_half():
    h = np.linspace(0, 5, 1000)
    assert concentration_curve(h, np.ones(1000))[2] == pytest.approx(0.5, abs=1e-3)


def test_summarize_drift_matches_naive_and_excludes_invalid():
    rng = np.random.default_rng(0)
    n = 200
    h_ref = rng.random(n) * 3
    lp_ref = -rng.random(n)
    t1_ref = rng.integers(0, 5, n)
    kl = rng.random(n) * h_ref
    js = kl / 5
    lp = lp_ref + rng.normal(0, 0.05, n)
    t1 = np.where(rng.random(n) < 0.2, (t1_ref + 1) % 5, t1_ref)
    kl[3] = np.nan  # this checkpoint's position 3 is bad: excluded, counted
    s = summarize_drift(h_ref, lp_ref, t1_ref, kl, js, lp, t1, high=HighEntropy(q=0.1), eps=0.05)
    high_idx = sorted(range(n), key=lambda i: (-h_ref[i], i))[:20]
    ok = [i for i in range(n) if i != 3]
    hi = [i for i in ok if i in high_idx]
    lo = [i for i in ok if i not in high_idx]
    assert (s.n_positions, s.n_valid, s.n_invalid) == (n, n - 1, 1)
    assert s.n_high == len(hi) and s.n_low == len(lo)
    assert s.kl_mean == pytest.approx(np.mean(kl[ok]))
    assert s.kl_mean_high == pytest.approx(np.mean(kl[hi]))
    assert s.kl_mean_low == pytest.approx(np.mean(kl[lo]))
    assert s.kl_share_high == pytest.approx(kl[hi].sum() / kl[ok].sum())
    assert s.js_mean_high == pytest.approx(np.mean(js[hi]))
    assert s.flip_rate_high == pytest.approx(np.mean(t1[hi] != t1_ref[hi]))
    assert s.flip_rate_low == pytest.approx(np.mean(t1[lo] != t1_ref[lo]))
    assert s.barely_moved == pytest.approx(np.mean(np.abs(lp[ok] - lp_ref[ok]) < 0.05))
    assert s.barely_moved_low == pytest.approx(np.mean(np.abs(lp[lo] - lp_ref[lo]) < 0.05))
    assert s.concentration_area == pytest.approx(naive_curve(h_ref[ok].tolist(), kl[ok].tolist())[1])
    assert len(s.curve_x) == 101
    back = DriftSummary.from_dict(s.to_dict())
    assert back.kl_mean == s.kl_mean and back.curve_y == s.curve_y
    # identical checkpoint: zero KL, no flips, every position barely moves, share undefined
    z = summarize_drift(h_ref, lp_ref, t1_ref, np.zeros(n), np.zeros(n), lp_ref, t1_ref)
    assert z.kl_mean == 0 and z.flip_rate == 0 and z.barely_moved == 1
    assert math.isnan(z.kl_share_high) and z.to_dict()["kl_share_high"] is None
    with pytest.raises(ValueError, match="eps"):
        summarize_drift(h_ref, lp_ref, t1_ref, kl, js, lp, t1, eps=0)
    with pytest.raises(ValueError, match="equal length"):
        summarize_drift(h_ref, lp_ref, t1_ref, kl[:5], js, lp, t1)
