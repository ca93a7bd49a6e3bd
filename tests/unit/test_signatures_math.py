"""Drift signatures of an update: point values against summarize_drift and naive loops, the weighted
bootstrap against explicitly expanded resamples, and two constructed updates whose answer is known."""

import math

import numpy as np
import pytest
import torch

from aclarena.diagnostics.signatures import (
    MEASURES,
    TooFewPositions,
    drift_signature,
    prepare,
    reply_index,
    resample_counts,
    weighted_stats,
)
from aclarena.diagnostics.token_drift import HighEntropy, pair_stats, summarize_drift


def random_positions(n_seq=30, seed=0, invalid=0.05):
    """Flat arrays of ``n_seq`` sequences with two replies each (a gap in the token index between them)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 25, n_seq)
    offsets = np.r_[0, np.cumsum(lengths)]
    n = int(offsets[-1])
    position = np.concatenate([np.r_[np.arange(10, 10 + ln // 2), np.arange(40, 40 + ln - ln // 2)] for ln in lengths])
    seq = np.repeat(np.arange(n_seq), lengths)
    h = rng.gamma(2.0, 1.0, n)
    lp_ref = -rng.gamma(1.0, 0.5, n)
    t1_ref = rng.integers(0, 5, n)
    kl = rng.gamma(1.0, 0.1, n) * (h / h.mean())
    lp = lp_ref + rng.normal(0, 0.08, n)
    t1 = np.where(rng.random(n) < 0.2, rng.integers(0, 5, n), t1_ref)
    valid = rng.random(n) > invalid
    kl[~valid] = np.nan
    return dict(h=h, lp_ref=lp_ref, t1_ref=t1_ref, kl=kl, lp=lp, t1=t1, seq=seq, position=position,
                offsets=offsets, valid=valid)


def naive_reply_index(position, offsets):
    out = []
    for s in range(len(offsets) - 1):
        i = 0
        for j in range(offsets[s], offsets[s + 1]):
            i = 0 if j == offsets[s] or position[j] != position[j - 1] + 1 else i + 1
            out.append(i)
    return np.array(out)


def test_reply_index_matches_a_loop():
    d = random_positions()
    got = reply_index(d["position"], d["offsets"])
    np.testing.assert_array_equal(got, naive_reply_index(d["position"], d["offsets"]))
    assert got[0] == 0 and set(np.unique(got[d["offsets"][:-1]])) == {0}
    with pytest.raises(ValueError, match="offsets"):
        reply_index(np.arange(4), np.array([0, 5]))


def summarize(d, idx, high, eps):
    """summarize_drift of the positions ``idx`` (an expanded resample when it repeats positions)."""
    return summarize_drift(d["h"][idx], d["lp_ref"][idx], d["t1_ref"][idx], d["kl"][idx], d["kl"][idx],
                           d["lp"][idx], d["t1"][idx], high=high, eps=eps, valid=d["valid"][idx])


def naive_first_k(d, idx, k):
    rep = naive_reply_index(d["position"], d["offsets"])[idx]
    ok = d["valid"][idx]
    kl = d["kl"][idx]
    return float(kl[ok & (rep < k)].sum() / kl[ok].sum())


@pytest.mark.parametrize("high", [HighEntropy(q=0.06), HighEntropy(q=0.2), HighEntropy(q=None, nats=3.0)])
def test_point_values_equal_summarize_drift_and_a_naive_first_k(high):
    d = random_positions(seed=1)
    rep = reply_index(d["position"], d["offsets"])
    p = prepare(d["h"], d["lp_ref"], d["t1_ref"], d["kl"], d["lp"], d["t1"], d["seq"], rep, valid=d["valid"],
                high=high, eps=0.05, first_k=4)
    got = {k: float(v[0]) for k, v in weighted_stats(p, np.ones((1, 30))).items()}
    want = summarize(d, np.arange(len(d["h"])), high, 0.05)
    for m in ("kl_share_high", "barely_moved_low", "flip_rate_high", "flip_rate_low", "concentration_area", "kl_mean"):
        assert got[m] == pytest.approx(getattr(want, m), rel=1e-9, abs=1e-12), m
    assert got["kl_share_first_k"] == pytest.approx(naive_first_k(d, np.arange(len(d["h"])), 4), rel=1e-9)


@pytest.mark.parametrize("q", [0.06, 0.3])
def test_each_bootstrap_replicate_equals_the_expanded_resample(q):
    d = random_positions(seed=2)
    rep = reply_index(d["position"], d["offsets"])
    high = HighEntropy(q=q)
    p = prepare(d["h"], d["lp_ref"], d["t1_ref"], d["kl"], d["lp"], d["t1"], d["seq"], rep, valid=d["valid"],
                high=high, eps=0.05, first_k=3)
    counts = resample_counts(30, 6, seed=5)
    stats = weighted_stats(p, counts)
    for b in range(6):
        # sequence s repeated counts[b, s] times, in sequence order: the resample written out
        idx = np.concatenate([np.arange(d["offsets"][s], d["offsets"][s + 1]) for s in range(30)
                              for _ in range(int(counts[b, s]))])
        want = summarize(d, idx, high, 0.05)
        for m in ("kl_share_high", "barely_moved_low", "flip_rate_high", "flip_rate_low", "concentration_area",
                  "kl_mean"):
            assert stats[m][b] == pytest.approx(getattr(want, m), rel=1e-9, abs=1e-12), (b, m)
        assert stats["kl_share_first_k"][b] == pytest.approx(naive_first_k(d, idx, 3), rel=1e-9)


def test_intervals_hold_the_value_and_are_seeded():
    d = random_positions(seed=3)
    rep = reply_index(d["position"], d["offsets"])
    args = (d["h"], d["lp_ref"], d["t1_ref"], d["kl"], d["lp"], d["t1"], d["seq"], rep)
    s = drift_signature(*args, valid=d["valid"], n_boot=400, seed=1)
    for m in MEASURES:
        assert s.low[m] <= s.values[m] <= s.high[m], m
        assert all(math.isfinite(x) for x in (s.low[m], s.values[m], s.high[m]))
    assert s.low["kl_share_high"] < s.high["kl_share_high"]  # random data: a real spread
    assert drift_signature(*args, valid=d["valid"], n_boot=400, seed=1) == s
    assert s.n_sequences == 30 and s.n_valid == int(d["valid"].sum())


def test_too_few_sequences_or_no_drift_is_refused():
    d = random_positions(n_seq=5, seed=4)
    rep = reply_index(d["position"], d["offsets"])
    with pytest.raises(TooFewPositions, match="5 sequences"):
        drift_signature(d["h"], d["lp_ref"], d["t1_ref"], d["kl"], d["lp"], d["t1"], d["seq"], rep, valid=d["valid"])
    d = random_positions(seed=4)
    rep = reply_index(d["position"], d["offsets"])
    with pytest.raises(TooFewPositions, match="KL 0"):
        drift_signature(d["h"], d["lp_ref"], d["t1_ref"], np.zeros_like(d["h"]), d["lp_ref"], d["t1_ref"], d["seq"],
                        rep)
    with pytest.raises(ValueError, match="first_k"):
        drift_signature(d["h"], d["lp_ref"], d["t1_ref"], d["kl"], d["lp"], d["t1"], d["seq"], rep, first_k=0)


# --- constructed updates: logits of a parent, and a child that differs only where we say ------------


def parent_logits(n_seq, length, vocab=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    temp = torch.rand(n_seq, length, 1, generator=g) * 4 + 0.2  # some positions decided, some not
    return torch.randn(n_seq, length, vocab, generator=g, dtype=torch.float64) / temp


def signature_of(ref, child, *, first_k=12, reply_len=None, q=0.06):
    """Score ``child`` against ``ref`` with the exact per-position measures, then sign the update."""
    n_seq, length, _ = ref.shape
    targets = ref.argmax(-1)
    ps = pair_stats(ref, child, targets)
    step = reply_len or length
    position = np.tile(np.r_[[t + 3 * (t // step) for t in range(length)]], n_seq)  # a gap between replies
    offsets = np.arange(n_seq + 1) * length
    flat = [x.reshape(-1).numpy() for x in (ps.ref.entropy, ps.ref.logprob, ps.ref.top1, ps.kl, ps.ckpt.logprob,
                                            ps.ckpt.top1)]
    seq = np.repeat(np.arange(n_seq), length)
    return drift_signature(*flat, seq, reply_index(position, offsets), high=HighEntropy(q=q), first_k=first_k,
                           n_boot=500), ps


def test_an_update_at_the_top_entropy_positions_only():
    ref = parent_logits(40, 25)
    child = ref.clone()
    ent = pair_stats(ref, ref).ref.entropy.reshape(-1)
    top = torch.argsort(ent, descending=True, stable=True)[:round(0.06 * ent.numel())]
    flat = child.view(-1, child.shape[-1])
    g = torch.Generator().manual_seed(7)
    flat[top] = torch.randn(len(top), child.shape[-1], generator=g, dtype=torch.float64) * 3  # rewritten decisions
    s, ps = signature_of(ref, child)
    assert s.values["kl_share_high"] == 1.0  # unchanged logits give KL exactly 0
    assert s.values["barely_moved_low"] == 1.0 and s.values["flip_rate_low"] == 0.0
    assert s.values["flip_rate_high"] == pytest.approx(
        float(ps.flips.reshape(-1)[top].double().mean()), abs=1e-12)
    assert s.values["concentration_area"] == pytest.approx(1 - 0.06 / 2, abs=0.01)  # all mass in the top 6%
    assert s.high_share == pytest.approx(0.06, abs=1e-3) and s.high["kl_share_high"] == 1.0
    # resamples re-choose the top set, so some rewritten positions fall below it; the interval stays far above chance
    assert s.low["kl_share_high"] > 5 * s.high_share


def test_an_update_at_the_first_reply_token_only():
    ref = parent_logits(30, 24, seed=1)
    child = ref.clone()
    g = torch.Generator().manual_seed(8)
    child[:, [0, 12], :] = torch.randn(30, 2, ref.shape[-1], generator=g, dtype=torch.float64) * 3  # replies' first tokens
    s, ps = signature_of(ref, child, first_k=1, reply_len=12)
    assert s.values["kl_share_first_k"] == 1.0
    assert s.first_k_share == pytest.approx(2 / 24) and s.n_first_k == 60
    assert s.low["kl_share_first_k"] == 1.0  # every resample: all KL at reply starts
    # and its share at the top-entropy positions is whatever those first tokens hold there, computed naively
    kl = ps.kl.reshape(-1).numpy()
    ent = ps.ref.entropy.reshape(-1).numpy()
    top = np.argsort(-ent, kind="stable")[:round(0.06 * ent.size)]
    assert s.values["kl_share_high"] == pytest.approx(kl[top].sum() / kl.sum(), rel=1e-9)
    s12, _ = signature_of(ref, child, first_k=12, reply_len=12)
    assert s12.values["kl_share_first_k"] == 1.0 and s12.first_k_share == 1.0  # k covers every reply: no contrast


def test_the_verb_help_states_the_library_defaults():
    """The verb's options default to None (its --help imports no torch); its help text names the defaults."""
    from aclarena.analysis.signatures import DEFAULT_MAX_NEW_TOKENS, DEFAULT_N
    from aclarena.cli import build_parser
    from aclarena.diagnostics.signatures import DEFAULT_FIRST_K, DEFAULT_N_BOOT

    sub = build_parser()._subparsers._group_actions[0].choices["signatures"]
    helps = {a.dest: a.help for a in sub._actions}
    for dest, value in (("n", DEFAULT_N), ("max_new_tokens", DEFAULT_MAX_NEW_TOKENS), ("first_k", DEFAULT_FIRST_K),
                        ("n_boot", DEFAULT_N_BOOT)):
        assert f"(default {value}" in helps[dest], dest
