"""Token-level drift: next-token entropy, log-probs, exact KL and JS, and where drift concentrates.

The measurement follows the ACLArena study (arXiv 2609.23989, section on token-level
forgetting): a reference checkpoint's generation is frozen, every later checkpoint scores
it teacher-forced, and at every scored position ``t`` (the prediction of token ``t`` from
the tokens before it) we compare two next-token distributions over the whole vocabulary,
``p`` (reference) and ``q`` (checkpoint):

* **entropy** ``H(p) = -sum_v p_v log p_v`` (nats): how undecided the model is there.
  Low-entropy positions are forced continuations; high-entropy ones are decision points
  (which tool to call, what to search). The study found ~94% of positions low-entropy
  and barely moving, and forgetting concentrated at the ~6% highest-entropy ones.
* **log-prob** ``log q(y_t)`` of the reference token ``y_t``, and its change
  ``Δ = log q(y_t) - log p(y_t)``; a position *barely moves* when ``|Δ| < ε`` (ε = 0.05).
* **KL** ``KL(p ‖ q) = sum_v p_v (log p_v - log q_v)``, exact over the full vocabulary
  (Kullback & Leibler 1951), the drift measure the study ranks positions by.
* **JS** ``JS(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m)``, ``m = ½(p + q)`` (Lin 1991): symmetric
  and bounded by log 2.
* **flip**: the checkpoint's top-1 token differs from the reference's top-1 token.

Positions are stratified by reference entropy: the *high* set is the top ``q`` fraction
(default 0.06, the study's share) or every position above ``τ`` nats. Per checkpoint,
:func:`summarize_drift` reports mean KL and flip rate on high vs low positions, the share
of total KL mass that falls in the high set, the fraction of positions that barely move,
and the *concentration curve*: positions ranked by reference entropy (highest first),
``x`` = share of positions, ``y`` = cumulative share of KL; its area is 0.5 when drift is
unrelated to entropy and approaches 1 when all drift sits at the highest-entropy positions
(a Lorenz-style curve, Lorenz 1905).

Numerics. Logits are processed in chunks of positions so that peak memory is
``O(chunk × vocabulary)``, never ``O(sequence × vocabulary)`` (as trl's
``entropy_from_logits`` does); the fused pass runs over sub-chunks of a chunk. bf16/fp16
logits are upcast to float32 and every sum accumulates in float32 (float64 inputs stay
float64). On CPU, float32 chunks go through a fused C kernel
(:mod:`aclarena.diagnostics.fused_cpu`: three reads of each row while it is in cache, sums
in float32 over blocks of 512 and float64 across blocks); elsewhere, or when it cannot be
built, torch operators compute the same sums. Each model's log-normaliser is
computed once per chunk and every measure is a row-wise dot product against it:

* ``H(p) = log s_p - <e_p, z'_p> / s_p`` with ``z' = z - max z``, ``e = exp z'``, ``s = sum e``;
* ``KL(p ‖ q) = <e_p, z'_p - z'_q> / s_p - log s_p + log s_q``;
* ``JS = H(m) - ½(H(p) + H(q))`` with ``H(m) = log 2 - ½ <p + q, log(p + q)>``, clamped to
  ``[0, min(log 2, (KL(p‖q) + KL(q‖p)) / 4)]`` (both bounds hold exactly; the second
  makes identical distributions give exactly 0).

Identical logits give KL = 0 exactly and no flips. Absolute errors are ~1e-6 in float32
(the same floor as ``log_softmax`` in float32). A row with NaN or infinite logits yields
non-finite statistics; :func:`summarize_drift` keeps such positions out of every mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

LOG2 = math.log(2.0)

#: Default memory of the two ``chunk × vocabulary`` logits buffers. Chunks of a few hundred
#: positions keep the output-head matmul as fast as over a whole batch (128-row chunks were
#: seen 45% slower on CPU); the elementwise work then runs on sub-chunks that stay small.
DEFAULT_CHUNK_BYTES = 640 * 2**20
#: Memory of the two sub-chunk work buffers.
DEFAULT_SUB_BYTES = 64 * 2**20


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the statistics are computed in: float64 stays, everything else is float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def default_chunk_size(vocab_size: int, dtype: torch.dtype = torch.float32,
                       budget_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Positions per chunk so that the two logits buffers fit in ``budget_bytes``."""
    if vocab_size < 1:
        raise ValueError(f"`vocab_size` must be >= 1, got {vocab_size!r}")
    item = torch.tensor([], dtype=compute_dtype(dtype)).element_size()
    return max(1, int(budget_bytes // (2 * vocab_size * item)))


def default_sub_rows(vocab_size: int, dtype: torch.dtype = torch.float32) -> int:
    """Rows per sub-chunk of the elementwise pass (two work buffers of ``DEFAULT_SUB_BYTES``)."""
    item = torch.tensor([], dtype=compute_dtype(dtype)).element_size()
    return max(16, int(DEFAULT_SUB_BYTES // (2 * vocab_size * item)))


def _rowdot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise dot product of two contiguous ``[n, V]`` arrays, accurately and without
    materialising ``a * b`` when possible.

    A single BLAS dot over 151,936 terms accumulates sequentially per SIMD lane and was seen
    off by 3e-4 (relative); cutting each row into blocks of up to 256 and summing the block
    results with torch's cascade sum keeps the error near float32 precision, and is faster.
    """
    n, v = a.shape
    for bs in (256, 128, 64, 32):
        if v % bs == 0 and a.is_contiguous() and b.is_contiguous():
            return torch.bmm(a.view(-1, 1, bs), b.view(-1, bs, 1)).view(n, v // bs).sum(dim=-1)
    return (a * b).sum(dim=-1)


@dataclass(frozen=True)
class DistStats:
    """Per-position statistics of one model's next-token distribution.

    Attributes (``N`` positions, ``k`` alternatives):
        entropy: ``[N]`` entropy in nats.
        lse: ``[N]`` log-normaliser ``log sum_v exp z_v`` of the logits.
        logprob: ``[N]`` log-prob of the target token, or None without targets.
        top1: ``[N]`` the most probable token (None when not asked for).
        topk_ids: ``[N, k]`` the ``k`` most probable tokens, most probable first (None when not asked for).
        topk_logprobs: ``[N, k]`` their log-probs (None when not asked for).
    """

    entropy: torch.Tensor
    lse: torch.Tensor
    logprob: torch.Tensor | None
    top1: torch.Tensor | None
    topk_ids: torch.Tensor | None
    topk_logprobs: torch.Tensor | None


@dataclass(frozen=True)
class PairStats:
    """Statistics of a checkpoint's distribution against the reference's, per position.

    Attributes:
        ref: the reference's :class:`DistStats` (without top-1/top-k when those are cached).
        ckpt: the checkpoint's :class:`DistStats`.
        kl: ``[N]`` ``KL(p_ref ‖ p_ckpt)`` in nats.
        kl_reverse: ``[N]`` ``KL(p_ckpt ‖ p_ref)`` in nats.
        js: ``[N]`` Jensen-Shannon divergence in nats (at most log 2).
    """

    ref: DistStats
    ckpt: DistStats
    kl: torch.Tensor
    kl_reverse: torch.Tensor
    js: torch.Tensor

    @property
    def flips(self) -> torch.Tensor:
        """``[N]`` bool: the checkpoint's top-1 token differs from the reference's."""
        if self.ref.top1 is None or self.ckpt.top1 is None:
            raise ValueError("the reference's top-1 was not computed (ref_topk=False); compare with the cached one")
        return self.ckpt.top1 != self.ref.top1


class Workspace:
    """Buffers reused by every chunk (fresh allocations of this size cost more than the
    arithmetic: their pages are zeroed on first touch).

    ``zr`` and ``zc`` (``rows × vocab``) receive the two models' logits of a chunk;
    ``b`` and ``e`` (``sub_rows × vocab``) are the work buffers of the fused pass, which
    runs over the chunk ``sub_rows`` rows at a time (:meth:`pair_stats`, :meth:`dist_stats`).
    """

    def __init__(self, rows: int, vocab: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", sub_rows: int | None = None) -> None:
        if rows < 1 or vocab < 1:
            raise ValueError(f"workspace needs rows >= 1 and vocab >= 1, got {rows} x {vocab}")
        self.rows = rows
        self.vocab = vocab
        self.dtype = compute_dtype(dtype)
        if sub_rows is not None and sub_rows < 1:
            raise ValueError(f"`sub_rows` must be at least 1, got {sub_rows}")
        self.sub_rows = min(rows, default_sub_rows(vocab, self.dtype) if sub_rows is None else sub_rows)
        self.sub_rows = max(1, self.sub_rows)
        self.zr = torch.empty(rows, vocab, dtype=self.dtype, device=device)
        self.zc = torch.empty(rows, vocab, dtype=self.dtype, device=device)
        self.b = torch.empty(self.sub_rows, vocab, dtype=self.dtype, device=device)
        self.e = torch.empty(self.sub_rows, vocab, dtype=self.dtype, device=device)

    @property
    def nbytes(self) -> int:
        return (2 * self.rows + 2 * self.sub_rows) * self.vocab * self.zr.element_size()

    def pair_stats(self, n: int, targets: torch.Tensor | None, topk: int, *, ref_topk: bool = True) -> PairStats:
        """:func:`pair_stats_` over the first ``n`` rows of ``zr`` and ``zc``, sub-chunk by sub-chunk
        (in one call when the fused kernel runs: it keeps each row in cache itself)."""
        fused = _fused_pair(self.zr[:n], self.zc[:n], targets, topk, self.b, self.e, ref_topk) if n else None
        if fused is not None:
            return fused
        parts = []
        for u in range(0, n, self.sub_rows):
            m = min(self.sub_rows, n - u)
            parts.append(pair_stats_(self.zr[u:u + m], self.zc[u:u + m],
                                     None if targets is None else targets[u:u + m], topk, self.b[:m], self.e[:m],
                                     ref_topk=ref_topk))
        return _cat_pairs(parts)

    def dist_stats(self, n: int, targets: torch.Tensor | None, topk: int) -> DistStats:
        """:func:`dist_stats_` over the first ``n`` rows of ``zr``, sub-chunk by sub-chunk (or in one
        call through the fused kernel)."""
        fused = _fused_dist(self.zr[:n], targets, topk, self.e) if n else None
        if fused is not None:
            return fused
        parts = []
        for u in range(0, n, self.sub_rows):
            m = min(self.sub_rows, n - u)
            parts.append(dist_stats_(self.zr[u:u + m], None if targets is None else targets[u:u + m], topk,
                                     self.e[:m]))
        return _cat_dist(parts, (sum(int(p.entropy.shape[0]) for p in parts),), topk)


def check_topk(topk: int, vocab: int, *, low: int = 0) -> None:
    """``topk`` must be an integer in ``[low, vocab]`` (0 keeps no alternatives); ValueError otherwise."""
    if not isinstance(topk, int) or isinstance(topk, bool) or topk < low:
        raise ValueError(f"`topk` must be an integer >= {low}, got {topk!r}")
    if topk > vocab:
        raise ValueError(f"`topk` must be at most the vocabulary size {vocab}, got {topk}")


def _topk(z: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    kk = max(k, 1)  # top-1 is always needed (flips)
    vals, ids = z.topk(kk, dim=-1)
    return vals, ids


def dist_stats_(z: torch.Tensor, targets: torch.Tensor | None, topk: int, work: torch.Tensor) -> DistStats:
    """Statistics of one chunk of logits ``z`` ``[n, V]`` (compute dtype, overwritten).

    ``work`` is an ``[n, V]`` buffer of the same dtype. Low level: :func:`dist_stats` is the
    safe entry point. float32 CPU chunks go through the fused kernel
    (:mod:`aclarena.diagnostics.fused_cpu`) when it is available.
    """
    fused = _fused_dist(z, targets, topk, work)
    if fused is not None:
        return fused
    return _dist_stats_torch(z, targets, topk, work)


def _dist_stats_torch(z: torch.Tensor, targets: torch.Tensor | None, topk: int, work: torch.Tensor) -> DistStats:
    vals, ids = _topk(z, topk)
    zt = z.gather(1, targets.view(-1, 1)).view(-1) if targets is not None else None
    m = z.amax(dim=-1, keepdim=True)
    z.sub_(m)
    torch.exp(z, out=work)
    s = work.sum(dim=-1)
    a = _rowdot(work, z)
    log_s = s.log()
    ent = (log_s - a / s).clamp_min_(0.0)
    lse = m.view(-1) + log_s
    return DistStats(
        entropy=ent,
        lse=lse,
        logprob=None if zt is None else zt - lse,
        top1=ids[:, 0],
        topk_ids=ids[:, :topk],
        topk_logprobs=vals[:, :topk] - lse.view(-1, 1),
    )


def pair_stats_(
    zr: torch.Tensor,
    zc: torch.Tensor,
    targets: torch.Tensor | None,
    topk: int,
    b: torch.Tensor,
    e: torch.Tensor,
    *,
    ref_topk: bool = True,
) -> PairStats:
    """Fused statistics of reference logits ``zr`` and checkpoint logits ``zc`` (``[n, V]``).

    ``zr``, ``zc``, ``b`` and ``e`` are ``[n, V]`` buffers of the compute dtype; all four
    are overwritten. ``ref_topk=False`` skips the reference's top-1 and top-k (when they
    are cached). Low level: :func:`pair_stats` is the safe entry point. float32 CPU chunks
    go through the fused kernel (:mod:`aclarena.diagnostics.fused_cpu`) when it is available.
    """
    fused = _fused_pair(zr, zc, targets, topk, b, e, ref_topk)
    if fused is not None:
        return fused
    return _pair_stats_torch(zr, zc, targets, topk, b, e, ref_topk=ref_topk)


def _pair_stats_torch(zr: torch.Tensor, zc: torch.Tensor, targets: torch.Tensor | None, topk: int,
                      b: torch.Tensor, e: torch.Tensor, *, ref_topk: bool = True) -> PairStats:
    vals_c, ids_c = _topk(zc, topk)
    vals_r, ids_r = _topk(zr, topk) if ref_topk else (None, None)
    zt_c = zc.gather(1, targets.view(-1, 1)).view(-1) if targets is not None else None
    zt_r = zr.gather(1, targets.view(-1, 1)).view(-1) if targets is not None else None
    # shift both by their max first: the difference of shifted logits carries no common
    # offset, so KL = <p, d> - (log s_r - log s_c) does not cancel large numbers
    mr = zr.amax(dim=-1, keepdim=True)
    zr.sub_(mr)
    mc = zc.amax(dim=-1, keepdim=True)
    zc.sub_(mc)
    torch.sub(zr, zc, out=b)  # d = z'_ref - z'_ckpt
    torch.exp(zr, out=e)
    sr = e.sum(dim=-1)
    a_r = _rowdot(e, zr)
    d_r = _rowdot(e, b)
    # checkpoint: its exponentials go to zr's buffer (z'_ref is no longer needed)
    torch.exp(zc, out=zr)
    sc = zr.sum(dim=-1)
    a_c = _rowdot(zr, zc)
    d_c = _rowdot(zr, b)
    log_sr, log_sc = sr.log(), sc.log()
    h_r = (log_sr - a_r / sr).clamp_min_(0.0)
    h_c = (log_sc - a_c / sc).clamp_min_(0.0)
    lse_r = mr.view(-1) + log_sr
    lse_c = mc.view(-1) + log_sc
    dlog = log_sr - log_sc
    kl = (d_r / sr - dlog).clamp_min_(0.0)
    kl_rev = (dlog - d_c / sc).clamp_min_(0.0)
    # JS through H(m): b = p_ref + p_ckpt (+ tiny, so that 0 log 0 reads as 0)
    tiny = torch.full((1, 1), torch.finfo(zr.dtype).tiny, dtype=zr.dtype, device=zr.device)
    torch.addcmul(tiny, e, sr.reciprocal().view(-1, 1), out=b)
    b.addcmul_(zr, sc.reciprocal().view(-1, 1))
    torch.log(b, out=zc)
    slogs = _rowdot(b, zc)
    js = LOG2 - 0.5 * slogs - 0.5 * (h_r + h_c)
    js = torch.minimum(js.clamp_min_(0.0), ((kl + kl_rev) * 0.25).clamp_max_(LOG2))
    # a row with non-finite logits must stay visible as non-finite, not clamped to 0
    bad = ~(torch.isfinite(lse_r) & torch.isfinite(lse_c) & torch.isfinite(a_r) & torch.isfinite(a_c)
            & torch.isfinite(slogs))
    if bool(bad.any()):
        nan = torch.tensor(float("nan"), dtype=zr.dtype, device=zr.device)
        kl = torch.where(bad, nan, kl)
        kl_rev = torch.where(bad, nan, kl_rev)
        js = torch.where(bad, nan, js)
        h_c = torch.where(bad, nan, h_c)
        h_r = torch.where(bad, nan, h_r)
    ref = DistStats(
        entropy=h_r, lse=lse_r, logprob=None if zt_r is None else zt_r - lse_r,
        top1=None if ids_r is None else ids_r[:, 0],
        topk_ids=None if ids_r is None else ids_r[:, :topk],
        topk_logprobs=None if vals_r is None else vals_r[:, :topk] - lse_r.view(-1, 1),
    )
    ckpt = DistStats(
        entropy=h_c, lse=lse_c, logprob=None if zt_c is None else zt_c - lse_c, top1=ids_c[:, 0],
        topk_ids=ids_c[:, :topk], topk_logprobs=vals_c[:, :topk] - lse_c.view(-1, 1),
    )
    return PairStats(ref=ref, ckpt=ckpt, kl=kl, kl_reverse=kl_rev, js=js)


# --- the fused CPU kernel's sums turned into statistics -------------------------------------------


def _fill_rows(dst: list[torch.Tensor | None], src: list[torch.Tensor | None], rows: torch.Tensor) -> None:
    for d, x in zip(dst, src, strict=True):
        if d is not None and x is not None:
            d[rows] = x.to(d.dtype)


def _fused_dist(z: torch.Tensor, targets: torch.Tensor | None, topk: int, work: torch.Tensor) -> DistStats | None:
    from aclarena.diagnostics import fused_cpu

    kk = max(topk, 1)
    s = fused_cpu.dist_sums(z, targets, kk)
    if s is None:
        return None
    dt = z.dtype
    total, a = s.sums.unbind(1)
    log_s = total.log()
    ent = (log_s - a / total).clamp_min_(0.0).to(dt)
    lse64 = s.maxes[:, 0].double() + log_s
    lse = lse64.to(dt)
    logprob = None if targets is None else (s.targets[:, 0].double() - lse64).to(dt)
    assert s.topk_c is not None
    vals, ids = s.topk_c
    topk_lp = (vals[:, :topk].double() - lse64.view(-1, 1)).to(dt)
    out = DistStats(entropy=ent, lse=lse, logprob=logprob, top1=ids[:, 0], topk_ids=ids[:, :topk],
                    topk_logprobs=topk_lp)
    if bool(s.bad.any()):  # rows with a non-finite logit: the torch path says what they give
        rows = s.bad.nonzero().view(-1)
        for u in range(0, len(rows), work.shape[0]):
            r = rows[u:u + work.shape[0]]
            t = _dist_stats_torch(z[r], None if targets is None else targets[r], topk, work[:len(r)])
            _fill_rows([out.entropy, out.lse, out.logprob, out.top1, out.topk_ids, out.topk_logprobs],
                       [t.entropy, t.lse, t.logprob, t.top1, t.topk_ids, t.topk_logprobs], r)
    return out


def _fused_pair(zr: torch.Tensor, zc: torch.Tensor, targets: torch.Tensor | None, topk: int, b: torch.Tensor,
                e: torch.Tensor, ref_topk: bool) -> PairStats | None:
    from aclarena.diagnostics import fused_cpu

    kk = max(topk, 1)
    s = fused_cpu.pair_sums(zr, zc, targets, kk, ref_topk=ref_topk)
    if s is None:
        return None
    dt = zr.dtype
    sr, sc, a_r, a_c, d_r, d_c, slogs = s.sums.unbind(1)
    log_sr, log_sc = sr.log(), sc.log()
    h_r = (log_sr - a_r / sr).clamp_min_(0.0)
    h_c = (log_sc - a_c / sc).clamp_min_(0.0)
    lse_r = s.maxes[:, 0].double() + log_sr
    lse_c = s.maxes[:, 1].double() + log_sc
    dlog = log_sr - log_sc
    kl = (d_r / sr - dlog).clamp_min_(0.0)
    kl_rev = (dlog - d_c / sc).clamp_min_(0.0)
    js = LOG2 - 0.5 * slogs - 0.5 * (h_r + h_c)
    js = torch.minimum(js.clamp_min_(0.0), ((kl + kl_rev) * 0.25).clamp_max_(LOG2))

    def stats(lse: torch.Tensor, h: torch.Tensor, col: int, tk: tuple[torch.Tensor, torch.Tensor] | None) -> DistStats:
        return DistStats(
            entropy=h.to(dt), lse=lse.to(dt),
            logprob=None if targets is None else (s.targets[:, col].double() - lse).to(dt),
            top1=None if tk is None else tk[1][:, 0], topk_ids=None if tk is None else tk[1][:, :topk],
            topk_logprobs=None if tk is None else (tk[0][:, :topk].double() - lse.view(-1, 1)).to(dt))

    ref, ckpt = stats(lse_r, h_r, 0, s.topk_r), stats(lse_c, h_c, 1, s.topk_c)
    out = PairStats(ref=ref, ckpt=ckpt, kl=kl.to(dt), kl_reverse=kl_rev.to(dt), js=js.to(dt))
    if bool(s.bad.any()):  # rows with a non-finite logit (left untouched): the torch path says what they give
        rows = s.bad.nonzero().view(-1)
        for u in range(0, len(rows), b.shape[0]):
            r = rows[u:u + b.shape[0]]
            m = len(r)
            t = _pair_stats_torch(zr[r], zc[r], None if targets is None else targets[r], topk, b[:m], e[:m],
                                  ref_topk=ref_topk)
            for mine, theirs in ((out.ref, t.ref), (out.ckpt, t.ckpt)):
                _fill_rows([mine.entropy, mine.lse, mine.logprob, mine.top1, mine.topk_ids, mine.topk_logprobs],
                           [theirs.entropy, theirs.lse, theirs.logprob, theirs.top1, theirs.topk_ids,
                            theirs.topk_logprobs], r)
            _fill_rows([out.kl, out.kl_reverse, out.js], [t.kl, t.kl_reverse, t.js], r)
    return out


# --- safe entry points over whole logits tensors ------------------------------------------------


def _flatten(logits: torch.Tensor, name: str) -> tuple[torch.Tensor, tuple[int, ...]]:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(logits).__name__}")
    if logits.ndim < 1 or logits.shape[-1] < 1:
        raise ValueError(f"`{name}` must have a last (vocabulary) dimension of size >= 1, got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"`{name}` must be floating point, got {logits.dtype}")
    lead = tuple(logits.shape[:-1])
    return logits.reshape(-1, logits.shape[-1]), lead


def _targets(targets: torch.Tensor | None, lead: tuple[int, ...], vocab: int) -> torch.Tensor | None:
    if targets is None:
        return None
    if tuple(targets.shape) != lead:
        raise ValueError(f"`targets` must have shape {lead} (the logits without the vocabulary axis), got {tuple(targets.shape)}")
    t = targets.reshape(-1).long()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab):
        raise ValueError(f"`targets` must be token ids in [0, {vocab}), got values in [{int(t.min())}, {int(t.max())}]")
    return t


def chunk_rows(chunk_size: int | None, vocab: int, dtype: torch.dtype) -> int:
    """Rows per output-head chunk: ``chunk_size`` (an integer >= 1; ValueError otherwise), or by default
    :func:`default_chunk_size` of the vocabulary and dtype."""
    if chunk_size is None:
        return default_chunk_size(vocab, dtype)
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"`chunk_size` must be an integer >= 1, got {chunk_size!r}")
    return chunk_size


def _cat_dist(parts: list[DistStats], lead: tuple[int, ...], k: int) -> DistStats:
    def cat(name: str, tail: tuple[int, ...] = ()) -> torch.Tensor | None:
        if getattr(parts[0], name) is None:
            return None
        return torch.cat([getattr(p, name) for p in parts]).reshape(*lead, *tail)

    entropy, lse = cat("entropy"), cat("lse")
    assert entropy is not None and lse is not None
    return DistStats(entropy=entropy, lse=lse, logprob=cat("logprob"), top1=cat("top1"),
                     topk_ids=cat("topk_ids", (k,)), topk_logprobs=cat("topk_logprobs", (k,)))


def _cat_pairs(parts: list[PairStats]) -> PairStats:
    if len(parts) == 1:
        return parts[0]
    n = sum(int(p.kl.shape[0]) for p in parts)
    k = parts[0].ckpt.topk_ids.shape[-1] if parts[0].ckpt.topk_ids is not None else 0
    return PairStats(ref=_cat_dist([p.ref for p in parts], (n,), k), ckpt=_cat_dist([p.ckpt for p in parts], (n,), k),
                     kl=torch.cat([p.kl for p in parts]), kl_reverse=torch.cat([p.kl_reverse for p in parts]),
                     js=torch.cat([p.js for p in parts]))


def dist_stats(
    logits: torch.Tensor, targets: torch.Tensor | None = None, *, topk: int = 0, chunk_size: int | None = None,
    sub_rows: int | None = None,
) -> DistStats:
    """Entropy, log-normaliser, target log-prob, top-1 and top-k of ``logits`` ``[..., V]``.

    Computed chunk by chunk over positions (``chunk_size``; the fused pass runs ``sub_rows``
    at a time); the input is not modified.
    """
    flat, lead = _flatten(logits, "logits")
    vocab = flat.shape[1]
    check_topk(topk, vocab)
    t = _targets(targets, lead, vocab)
    cdt = compute_dtype(flat.dtype)
    rows = min(chunk_rows(chunk_size, vocab, cdt), max(1, flat.shape[0]))
    ws = Workspace(rows, vocab, cdt, flat.device, sub_rows)
    parts = []
    for i in range(0, max(flat.shape[0], 1), rows):
        n = min(rows, flat.shape[0] - i)
        ws.zr[:n].copy_(flat[i:i + n])
        parts.append(ws.dist_stats(n, None if t is None else t[i:i + n], topk) if n else
                     dist_stats_(ws.zr[:0], None if t is None else t[:0], topk, ws.e[:0]))
    return _cat_dist(parts, lead, topk)


def pair_stats(
    ref_logits: torch.Tensor,
    logits: torch.Tensor,
    targets: torch.Tensor | None = None,
    *,
    topk: int = 0,
    chunk_size: int | None = None,
    sub_rows: int | None = None,
) -> PairStats:
    """Every per-position measure of ``logits`` against ``ref_logits`` (both ``[..., V]``).

    Computed chunk by chunk over positions (``chunk_size``), in one fused pass per sub-chunk
    of ``sub_rows``; inputs are not modified.
    """
    ref_flat, lead = _flatten(ref_logits, "ref_logits")
    flat, lead_c = _flatten(logits, "logits")
    if ref_flat.shape != flat.shape or lead != lead_c:
        raise ValueError(f"`ref_logits` and `logits` must have the same shape, got {tuple(ref_logits.shape)} "
                         f"and {tuple(logits.shape)}")
    vocab = flat.shape[1]
    check_topk(topk, vocab)
    t = _targets(targets, lead, vocab)
    cdt = compute_dtype(torch.promote_types(ref_flat.dtype, flat.dtype))
    rows = min(chunk_rows(chunk_size, vocab, cdt), max(1, flat.shape[0]))
    ws = Workspace(rows, vocab, cdt, flat.device, sub_rows)
    parts: list[PairStats] = []
    for i in range(0, max(flat.shape[0], 1), rows):
        n = min(rows, flat.shape[0] - i)
        ws.zr[:n].copy_(ref_flat[i:i + n])
        ws.zc[:n].copy_(flat[i:i + n])
        parts.append(ws.pair_stats(n, None if t is None else t[i:i + n], topk) if n else
                     pair_stats_(ws.zr[:0], ws.zc[:0], None if t is None else t[:0], topk, ws.b[:0], ws.e[:0]))
    return PairStats(
        ref=_cat_dist([p.ref for p in parts], lead, topk),
        ckpt=_cat_dist([p.ckpt for p in parts], lead, topk),
        kl=torch.cat([p.kl for p in parts]).reshape(lead),
        kl_reverse=torch.cat([p.kl_reverse for p in parts]).reshape(lead),
        js=torch.cat([p.js for p in parts]).reshape(lead),
    )


def entropy(logits: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
    """Entropy (nats) of the softmax of ``logits`` ``[..., V]``, chunked over positions."""
    return dist_stats(logits, chunk_size=chunk_size).entropy


def log_probs(logits: torch.Tensor, targets: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
    """``log softmax(logits)[..., targets]``, chunked over positions."""
    out = dist_stats(logits, targets, chunk_size=chunk_size).logprob
    assert out is not None
    return out


def kl_divergence(ref_logits: torch.Tensor, logits: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
    """Exact ``KL(softmax(ref_logits) ‖ softmax(logits))`` per position (nats), chunked."""
    return pair_stats(ref_logits, logits, chunk_size=chunk_size).kl


def js_divergence(ref_logits: torch.Tensor, logits: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
    """Exact Jensen-Shannon divergence per position (nats, at most log 2), chunked."""
    return pair_stats(ref_logits, logits, chunk_size=chunk_size).js


# --- stratification and summaries (numpy, over stored per-position arrays) ---------------------


@dataclass(frozen=True, slots=True)
class HighEntropy:
    """Which positions count as high-entropy: the top ``q`` fraction by reference entropy
    (the study's 6%), or every position whose reference entropy exceeds ``nats``."""

    q: float | None = 0.06
    nats: float | None = None

    def __post_init__(self) -> None:
        if (self.q is None) == (self.nats is None):
            raise ValueError("give exactly one of `q` (a fraction) and `nats` (an entropy threshold)")
        if self.q is not None and not (isinstance(self.q, int | float) and 0 < self.q < 1):
            raise ValueError(f"`q` must be in (0, 1), got {self.q!r}")
        if self.nats is not None and not (isinstance(self.nats, int | float) and math.isfinite(self.nats)
                                          and self.nats >= 0):
            raise ValueError(f"`nats` must be a finite number >= 0, got {self.nats!r}")

    @classmethod
    def parse(cls, text: str) -> HighEntropy:
        """``"q=0.06"`` or ``"nats=1.5"``."""
        key, sep, value = str(text).partition("=")
        key = key.strip().lower()
        if not sep or key not in ("q", "nats"):
            raise ValueError(f"high-entropy set {text!r} must be q=FRACTION (e.g. q=0.06) or nats=THRESHOLD (e.g. nats=1.5)")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"high-entropy set {text!r}: {value.strip()!r} is not a number") from None
        return cls(q=number, nats=None) if key == "q" else cls(q=None, nats=number)

    def __str__(self) -> str:
        return f"q={self.q:g}" if self.q is not None else f"nats={self.nats:g}"


def high_entropy_mask(entropy: np.ndarray, high: HighEntropy = HighEntropy()) -> tuple[np.ndarray, float]:
    """The high-entropy positions of a 1-d array of finite entropies, and the threshold used.

    With ``q``: the ``round(q·N)`` positions of highest entropy (at least one when N > 0;
    ties broken by position); the threshold is the lowest entropy in the set. With
    ``nats``: positions with entropy ``> nats``.
    """
    h = np.asarray(entropy, dtype=np.float64)
    if h.ndim != 1:
        raise ValueError(f"`entropy` must be 1-d, got shape {h.shape}")
    if not np.all(np.isfinite(h)):
        raise ValueError("`entropy` must be finite; drop non-finite positions first")
    mask = np.zeros(h.shape, dtype=bool)
    if high.nats is not None:
        mask = h > high.nats
        return mask, float(high.nats)
    n = h.size
    if n == 0:
        return mask, float("nan")
    assert high.q is not None
    k = max(1, math.floor(high.q * n + 0.5))
    order = np.argsort(-h, kind="stable")
    mask[order[:k]] = True
    return mask, float(h[order[k - 1]])


def concentration_curve(
    entropy: np.ndarray, drift: np.ndarray, n_points: int = 101
) -> tuple[np.ndarray, np.ndarray, float]:
    """Cumulative share of drift against share of positions ranked by entropy (highest first).

    Returns ``(x, y, area)``: ``x`` is ``n_points`` evenly spaced shares in [0, 1], ``y`` the
    share of total drift held by that fraction of highest-entropy positions (interpolated
    on the exact curve), and ``area`` the exact area under the curve (0.5: drift unrelated
    to entropy; near 1: concentrated at the top). ``y`` and ``area`` are NaN when there is
    no drift at all.
    """
    h = np.asarray(entropy, dtype=np.float64)
    d = np.asarray(drift, dtype=np.float64)
    if h.shape != d.shape or h.ndim != 1:
        raise ValueError(f"`entropy` and `drift` must be 1-d of equal length, got {h.shape} and {d.shape}")
    if n_points < 2:
        raise ValueError(f"`n_points` must be >= 2, got {n_points}")
    x = np.linspace(0.0, 1.0, n_points)
    total = float(d.sum()) if d.size else 0.0
    if d.size == 0 or not math.isfinite(total) or total <= 0.0:
        return x, np.full(n_points, np.nan), float("nan")
    order = np.argsort(-h, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(d[order]) / total])
    xs = np.arange(d.size + 1, dtype=np.float64) / d.size
    area = float(np.sum((cum[1:] + cum[:-1]) * 0.5) / d.size)
    return x, np.interp(x, xs, cum), area


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else float("nan")


@dataclass(frozen=True)
class DriftSummary:
    """One checkpoint's token drift against the reference, over the valid positions.

    ``*_high`` / ``*_low`` restrict to the high- / low-entropy set. ``kl_share_high`` is
    the share of the total KL mass in the high set; ``barely_moved*`` the fraction of
    positions with ``|Δ log-prob| < eps``; ``concentration_area`` the area under the
    concentration curve (``curve_x``, ``curve_y``). Means over an empty set are NaN.
    """

    high: str
    eps: float
    n_positions: int
    n_valid: int
    n_invalid: int
    n_high: int
    n_low: int
    entropy_threshold: float
    kl_mean: float
    kl_mean_high: float
    kl_mean_low: float
    kl_share_high: float
    js_mean: float
    js_mean_high: float
    js_mean_low: float
    flip_rate: float
    flip_rate_high: float
    flip_rate_low: float
    barely_moved: float
    barely_moved_high: float
    barely_moved_low: float
    concentration_area: float
    curve_x: list[float] = field(default_factory=list)
    curve_y: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers and lists; NaN becomes None (JSON null)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if isinstance(v, float) and not math.isfinite(v):
                v = None
            elif isinstance(v, list):
                v = [None if not math.isfinite(x) else float(x) for x in v]
            out[name] = v
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DriftSummary:
        def num(v: Any) -> Any:
            return float("nan") if v is None else v

        kwargs: dict[str, Any] = {k: num(data[k]) if not isinstance(data[k], list) else [num(x) for x in data[k]]
                                  for k in cls.__dataclass_fields__}
        return cls(**kwargs)


def summarize_drift(
    ref_entropy: np.ndarray,
    ref_logprob: np.ndarray,
    ref_top1: np.ndarray,
    kl: np.ndarray,
    js: np.ndarray,
    logprob: np.ndarray,
    top1: np.ndarray,
    *,
    high: HighEntropy = HighEntropy(),
    eps: float = 0.05,
    valid: np.ndarray | None = None,
    n_points: int = 101,
) -> DriftSummary:
    """Summarise one checkpoint's per-position drift (flat arrays over all scored positions).

    The high-entropy set is chosen among positions where the reference is finite, the same
    for every checkpoint; positions where this checkpoint's values are non-finite (or
    ``valid`` is False) are then left out of every mean and counted in ``n_invalid``.
    """
    if not (isinstance(eps, int | float) and eps > 0 and math.isfinite(eps)):
        raise ValueError(f"`eps` must be a finite number > 0, got {eps!r}")
    arrays = [np.asarray(a) for a in (ref_entropy, ref_logprob, ref_top1, kl, js, logprob, top1)]
    n = arrays[0].shape[0] if arrays[0].ndim == 1 else -1
    if any(a.ndim != 1 or a.shape[0] != n for a in arrays):
        raise ValueError(f"per-position arrays must be 1-d of equal length, got shapes {[a.shape for a in arrays]}")
    h_ref, lp_ref, t1_ref, kl_a, js_a, lp, t1 = arrays
    h_ref = h_ref.astype(np.float64)
    ref_ok = np.isfinite(h_ref) & np.isfinite(lp_ref.astype(np.float64))
    is_high = np.zeros(n, dtype=bool)
    hmask, threshold = high_entropy_mask(h_ref[ref_ok], high)
    is_high[np.flatnonzero(ref_ok)[hmask]] = True
    ok = ref_ok & np.isfinite(kl_a) & np.isfinite(js_a) & np.isfinite(lp)
    if valid is not None:
        valid = np.asarray(valid, dtype=bool)
        if valid.shape != (n,):
            raise ValueError(f"`valid` must have shape ({n},), got {valid.shape}")
        ok &= valid
    kl_v = kl_a.astype(np.float64)
    js_v = js_a.astype(np.float64)
    moved = np.abs(lp.astype(np.float64) - lp_ref.astype(np.float64))
    flips = t1 != t1_ref
    hi, lo = ok & is_high, ok & ~is_high
    total = float(kl_v[ok].sum())
    x, y, area = concentration_curve(h_ref[ok], kl_v[ok], n_points)
    return DriftSummary(
        high=str(high), eps=float(eps),
        n_positions=int(n), n_valid=int(ok.sum()), n_invalid=int(n - ok.sum()),
        n_high=int(hi.sum()), n_low=int(lo.sum()), entropy_threshold=threshold,
        kl_mean=_mean(kl_v[ok]), kl_mean_high=_mean(kl_v[hi]), kl_mean_low=_mean(kl_v[lo]),
        kl_share_high=float(kl_v[hi].sum() / total) if total > 0 else float("nan"),
        js_mean=_mean(js_v[ok]), js_mean_high=_mean(js_v[hi]), js_mean_low=_mean(js_v[lo]),
        flip_rate=_mean(flips[ok].astype(np.float64)), flip_rate_high=_mean(flips[hi].astype(np.float64)),
        flip_rate_low=_mean(flips[lo].astype(np.float64)),
        barely_moved=_mean((moved[ok] < eps).astype(np.float64)),
        barely_moved_high=_mean((moved[hi] < eps).astype(np.float64)),
        barely_moved_low=_mean((moved[lo] < eps).astype(np.float64)),
        concentration_area=area, curve_x=x.tolist(), curve_y=y.tolist(),
    )
