"""Teacher-forced scoring of a probe set: the one place that runs a model for analysis.

For every checkpoint and every scored position of a probe set, :func:`score` computes the
checkpoint's next-token entropy, the log-prob of the reference token, its top-1 and top-k
tokens, and the exact full-vocabulary ``KL(p_ref ‖ p_ckpt)`` and JS divergence against the
reference checkpoint's distribution at the same position (maths in
:mod:`aclarena.diagnostics.token_drift`).

How, and why it is fast and small:

* Each model's decoder runs once per batch (RIGHT padding, explicit positions; left
  padding is supported and gives the same numbers). Only the final hidden states at the
  scored positions are kept.
* Logits are never materialised for a whole sequence: the output head is applied to a
  chunk of positions at a time into reused buffers, and both models' chunks go through
  one fused pass (:func:`~aclarena.diagnostics.token_drift.pair_stats_`: on CPU a C kernel,
  :mod:`aclarena.diagnostics.fused_cpu`, that reads each row three times while it is in
  cache; elsewhere torch operators over sub-chunks). Peak memory is ``O(chunk × vocabulary)``,
  independent of sequence length.
* The reference is run once (:func:`reference_outputs`): its hidden states at the scored
  positions (positions × hidden, small) and its output head are cached, and its logits are
  recomputed per chunk next to each checkpoint's. The cache is what a training callback
  keeps between calls.
* bf16 models compute their logits in bf16 (as their own forward does) and every
  statistic in float32.

A checkpoint whose logits are NaN or infinite at some positions gets those positions
flagged (``status`` 1); positions beyond a checkpoint's maximum positions are flagged
``status`` 2. Neither is ever averaged into a summary.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.diagnostics.token_drift import (
    Workspace,
    check_topk,
    chunk_rows,
    compute_dtype,
)
from aclarena.errors import AclarenaError
from aclarena.probes.model_parts import (
    OutputHead,
    hidden_states,
    model_positions,
    no_grad,
    output_head,
    verify_head,
)
from aclarena.results.probes import ProbeSet
from aclarena.results.tokens import DIST_FIELDS

if TYPE_CHECKING:
    import torch

STATUS_OK = 0
STATUS_NONFINITE = 1
STATUS_BEYOND_CONTEXT = 2
SCORING_VERSION = "1"


# --- batches ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchPlan:
    """Which sequences go together, and where each scored position lands in probe order.

    Sequences are sorted by length (less padding); within a batch, positions are laid out
    sequence by sequence. ``index[b]`` maps batch ``b``'s rows to the flat probe-order
    position index.
    """

    batches: list[list[int]]
    index: list[np.ndarray]
    offsets: np.ndarray

    @classmethod
    def make(cls, probe: ProbeSet, batch_size: int) -> BatchPlan:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise AclarenaError(f"batch size must be an integer >= 1, got {batch_size!r}")
        offsets = probe.scored_offsets()
        order = sorted(range(probe.n_sequences), key=lambda i: (-len(probe.ids[i]), i))
        batches = [order[s:s + batch_size] for s in range(0, len(order), batch_size)]
        index = [np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in b]).astype(np.int64) for b in batches]
        return cls(batches=batches, index=index, offsets=offsets)

    def rows(self, batches: Collection[int] | None = None) -> np.ndarray:
        """A mask over the flat positions: those of ``batches`` (all when None)."""
        mask = np.zeros(int(self.offsets[-1]), dtype=bool)
        if batches is None:
            mask[:] = True
        else:
            for b in batches:
                mask[self.index[b]] = True
        return mask

    def positions_of(self, batches: Collection[int]) -> np.ndarray:
        """The flat position indices of ``batches``, in batch order."""
        parts = [self.index[b] for b in sorted(batches)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _batch_inputs(probe: ProbeSet, seqs: list[int], limit: int | None, device: Any, padding_side: str
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray,
                             torch.Tensor]:
    """Padded ids, attention mask and positions, then for every scored position in batch order: row,
    column, computable, target."""
    import torch

    lengths = [len(probe.ids[i]) if limit is None else min(len(probe.ids[i]), limit) for i in seqs]
    width = max(max(lengths), 1)
    pad = int(probe.ids[seqs[0]][0])  # any id: padded positions are masked and never read
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    pos = torch.zeros((len(seqs), width), dtype=torch.long)
    rows, cols, targets, ok = [], [], [], []
    for r, (i, n) in enumerate(zip(seqs, lengths, strict=True)):
        shift = width - n if padding_side == "left" else 0
        ids[r, shift:shift + n] = torch.as_tensor(np.asarray(probe.ids[i][:n], dtype=np.int64))
        mask[r, shift:shift + n] = 1
        pos[r, shift:shift + n] = torch.arange(n)
        t = probe.positions(i)
        computable = t <= n  # token t is predicted at position t - 1, which must be in the input
        rows.append(np.full(len(t), r))
        cols.append(np.where(computable, t - 1 + shift, shift))
        targets.append(np.asarray(probe.ids[i], dtype=np.int64)[t])
        ok.append(computable)
    cat = np.concatenate
    return (ids.to(device), mask.to(device), pos.to(device), torch.as_tensor(cat(rows), device=device),
            torch.as_tensor(cat(cols), device=device), cat(ok), torch.as_tensor(cat(targets), device=device))


def _pad_forwards(model: Any, probe: ProbeSet, plan: BatchPlan, limit: int | None, device: Any,
                  padding_side: str, count: int) -> None:
    """``count`` forward passes whose results are thrown away: a sharded model's ranks with fewer
    batches than the others run these, so that every rank enters each forward pass together."""
    if count <= 0:
        return
    ids, mask, pos, *_ = _batch_inputs(probe, plan.batches[-1], limit, device, padding_side)  # the shortest batch
    for _ in range(count):
        hidden_states(model, ids, mask, pos)


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReferenceStats:
    """The reference's own statistics at every scored position (flat, probe order); stored as
    :class:`aclarena.results.tokens.TokenReferenceData` (:func:`aclarena.analysis.tokens.reference_payload`)."""

    position: np.ndarray  # token index t within its sequence
    token: np.ndarray  # the reference token y_t
    entropy: np.ndarray
    logprob: np.ndarray
    top1: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    status: np.ndarray


@dataclass(frozen=True)
class TokenScores:
    """One checkpoint's per-position results against the reference (flat arrays, probe order).

    Sequence ``i``'s positions are ``[offsets[i]:offsets[i + 1]]``. ``status``: 0 ok,
    1 non-finite logits, 2 beyond the checkpoint's maximum positions. Stored as
    :class:`aclarena.results.tokens.TokenScoresData` (:func:`aclarena.analysis.tokens.scores_payload`).
    """

    offsets: np.ndarray
    entropy: np.ndarray
    logprob: np.ndarray
    top1: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    kl: np.ndarray
    js: np.ndarray
    status: np.ndarray
    ref: ReferenceStats
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def flips(self) -> np.ndarray:
        return self.top1 != self.ref.top1

    @property
    def n_nonfinite(self) -> int:
        return int(np.count_nonzero(self.status == STATUS_NONFINITE))

    @property
    def n_beyond_context(self) -> int:
        return int(np.count_nonzero(self.status == STATUS_BEYOND_CONTEXT))


@dataclass(frozen=True)
class ReferenceOutputs:
    """A reference checkpoint run once on a probe set: what scoring other checkpoints needs.

    ``hidden[b]`` holds the final hidden states at batch ``b``'s scored positions; with the
    output ``head`` they give the reference logits again, chunk by chunk, without keeping
    any ``positions × vocabulary`` array.
    """

    name: str
    probe_digest: str
    plan: BatchPlan
    hidden: list[torch.Tensor | None]
    targets: list[torch.Tensor | None]
    head: OutputHead
    stats: ReferenceStats
    batch_size: int
    chunk_size: int
    topk: int
    positions_limit: int | None
    sub_rows: int | None = None


def _chunk_size(chunk_size: int | None, vocab: int, dtype: Any) -> int:
    try:
        return chunk_rows(chunk_size, vocab, dtype)
    except ValueError as e:
        raise AclarenaError(str(e)) from None


class _Buffers:
    """The workspace of the fused pass and, for low-precision heads, where their matmul lands."""

    def __init__(self, rows: int, heads: list[OutputHead], sub_rows: int | None = None) -> None:
        import torch

        dtypes = [h.dtype for h in heads]
        cdt = compute_dtype(dtypes[0] if len(set(dtypes)) == 1 else torch.float32)
        device = heads[0].weight.device
        self.ws = Workspace(rows, heads[0].vocab_size, cdt, device, sub_rows)
        self.tmp = {d: torch.empty(rows, heads[0].vocab_size, dtype=d, device=device) for d in set(dtypes) if d != cdt}

    def tmp_rows(self, head: OutputHead, n: int) -> torch.Tensor | None:
        t = self.tmp.get(head.dtype)
        return None if t is None else t[:n]


def _check_topk(topk: int, vocab: int) -> None:
    """The diagnostics' rule, with at least one alternative kept (the store's top-k arrays); AclarenaError."""
    try:
        check_topk(topk, vocab, low=1)
    except ValueError as e:
        raise AclarenaError(str(e)) from None


def _eval_mode(model: Any) -> bool:
    was = bool(getattr(model, "training", False))
    model.eval()
    return was


def reference_outputs(
    model: Any,
    probe: ProbeSet,
    *,
    name: str | None = None,
    batch_size: int = 8,
    chunk_size: int | None = None,
    topk: int = 5,
    padding_side: str = "right",
    progress: Callable[[int], None] | None = None,
    batches: Collection[int] | None = None,
    lockstep: int | None = None,
) -> ReferenceOutputs:
    """Run the reference once on ``probe`` and cache what scoring needs (see the module doc).

    ``batches`` (indices into the batch plan) restricts the work to those batches, as a
    data-parallel rank does (:mod:`aclarena.distributed`): the other positions stay unset
    (NaN, status 0) and their ``hidden`` entries are None. ``lockstep``: run the model this
    many times in all, padding with thrown-away passes (every rank of a sharded model, see
    :func:`is_sharded`, must make the same number).
    """
    import torch

    batches = None if batches is None else set(batches)
    head = output_head(model)
    _check_topk(topk, head.vocab_size)
    verify_head(model, head, probe.ids[0], name or probe.reference)
    cs = _chunk_size(chunk_size, head.vocab_size, head.dtype)
    plan = BatchPlan.make(probe, batch_size)
    limit = model_positions(model)
    k = topk
    st = _empty_reference_stats(probe, plan, k)
    buffers = _Buffers(max(1, min(cs, max(len(ix) for ix in plan.index))), [head])
    hidden: list[torch.Tensor | None] = []
    targets: list[torch.Tensor | None] = []
    ran = 0
    was_training = _eval_mode(model)
    try:
        with no_grad(model):
            for b, seqs in enumerate(plan.batches):
                if batches is not None and b not in batches:
                    hidden.append(None)
                    targets.append(None)
                    continue
                ids, mask, pos, rows, cols, ok, tgt = _batch_inputs(probe, seqs, limit, head.weight.device, padding_side)
                h = hidden_states(model, ids, mask, pos)[rows, cols]
                ran += 1
                hidden.append(h.clone())
                targets.append(tgt)
                out: dict[str, list[torch.Tensor]] = {key: [] for key in DIST_FIELDS}
                for s in range(0, h.shape[0], cs):
                    n = min(cs, h.shape[0] - s)
                    head.into(h[s:s + n], buffers.ws.zr[:n], buffers.tmp_rows(head, n))
                    ds = buffers.ws.dist_stats(n, tgt[s:s + n], k)
                    for key in out:
                        out[key].append(getattr(ds, key))
                idx = plan.index[b]
                if len(idx):
                    for key, parts in out.items():
                        getattr(st, key)[idx] = torch.cat(parts).cpu().numpy()
                bad = ~np.isfinite(st.entropy[idx]) | ~np.isfinite(st.logprob[idx])
                st.status[idx[bad]] = STATUS_NONFINITE
                st.status[idx[~ok]] = STATUS_BEYOND_CONTEXT
                if progress is not None:
                    progress(len(seqs))
            if lockstep is not None:
                _pad_forwards(model, probe, plan, limit, head.weight.device, padding_side, lockstep - ran)
    finally:
        if was_training:
            model.train()
    for key in ("entropy", "logprob", "topk_logprobs"):
        arr = getattr(st, key)
        arr[st.status != STATUS_OK] = np.nan
    return ReferenceOutputs(name=name or probe.reference, probe_digest=probe.digest, plan=plan, hidden=hidden,
                            targets=targets, head=head, stats=st, batch_size=batch_size, chunk_size=cs, topk=topk,
                            positions_limit=limit, sub_rows=buffers.ws.sub_rows)


def score(
    model: Any,
    reference: Any,
    probe: ProbeSet,
    *,
    batch_size: int = 8,
    chunk_size: int | None = None,
    topk: int = 5,
    padding_side: str = "right",
    name: str | None = None,
    progress: Callable[[int], None] | None = None,
    hidden_cache: list[Any] | dict[int, Any] | None = None,
    batches: Collection[int] | None = None,
    lockstep: int | None = None,
) -> TokenScores:
    """Score ``probe`` teacher-forced with ``model`` against ``reference``.

    Args:
        model: the checkpoint to score (a transformers causal LM, PEFT-wrapped or not; it
            may be the live model of a training run: it is scored in eval mode and put back).
        reference: the reference checkpoint, either a model (then both run side by side,
            one output-head pass each) or :class:`ReferenceOutputs` from
            :func:`reference_outputs` (then its cached batch size, chunk size and top-k
            are used, and only ``model`` runs).
        probe: the probe set.
        batch_size: sequences per forward pass.
        chunk_size: positions per output-head chunk (default: both models' logits of a chunk fit in 640 MiB).
        topk: alternatives kept per position.
        padding_side: ``right`` (default) or ``left``; both give the same numbers.
        name: the checkpoint's name in error messages.
        progress: called with the number of sequences finished after each batch.
        hidden_cache: an empty list to keep ``model``'s hidden states of each batch in, or the
            list a previous call filled: then ``model`` is not run again. For scoring the same
            model (unchanged weights) on the same probe with the same batch plan against
            several cached references (the drift monitor: the probe's reference and the stage start).
            A list holds every batch in order (not combinable with ``batches``); a dict is keyed
            by batch index.
        batches: compute only these batches of the plan (a data-parallel rank's share, see
            :mod:`aclarena.distributed`); the other positions stay unset (NaN, status 0).
        lockstep: run ``model`` this many times in all, padding with thrown-away passes (every
            rank of a sharded model, see :func:`is_sharded`, must make the same number).
    """
    if padding_side not in ("left", "right"):
        raise AclarenaError(f"padding side must be 'left' or 'right', got {padding_side!r}")
    batches = None if batches is None else set(batches)
    if batches is not None and isinstance(hidden_cache, list):
        raise ValueError("a hidden_cache list holds every batch in order; give a dict to combine it with batches")
    label = name or "the checkpoint"
    head = output_head(model)
    cached = isinstance(reference, ReferenceOutputs)
    if cached:  # the cached reference's plan, batch size, chunk size and top-k
        if reference.probe_digest != probe.digest:
            raise AclarenaError("the cached reference outputs were made on another probe set; rebuild them")
        batch_size, topk, cs = reference.batch_size, reference.topk, reference.chunk_size
        ref_head, plan = reference.head, reference.plan
    else:  # both models run side by side
        ref_head = output_head(reference)
        _check_topk(topk, head.vocab_size)
        cs = _chunk_size(chunk_size, head.vocab_size, head.dtype)
        plan = BatchPlan.make(probe, batch_size)
        verify_head(reference, ref_head, probe.ids[0], "the reference")
    if ref_head.vocab_size != head.vocab_size:
        raise AclarenaError(f"{label} has a vocabulary of {head.vocab_size} tokens but the reference has "
                            f"{ref_head.vocab_size}; per-token scores need the same tokenizer and vocabulary")
    verify_head(model, head, probe.ids[0], label)
    limit = model_positions(model)
    res = _empty_scores(plan, topk, reference.stats if cached else _empty_reference_stats(probe, plan, topk),
                        {"chunk_size": cs, "batch_size": batch_size, "topk": topk, "positions_limit": limit})
    rows_max = max(1, min(cs, max(len(ix) for ix in plan.index)))
    # the same chunk and sub-chunk plan as the cached reference: identical models give identical bits
    buffers = _Buffers(rows_max, [ref_head, head], reference.sub_rows if cached else None)
    ref_side = _ReferenceSide(reference, ref_head, probe, padding_side) if not cached else None
    device = head.weight.device
    was_training = _eval_mode(model)
    ref_was_training = ref_side is not None and _eval_mode(reference)
    ran = 0
    try:
        with no_grad(model):
            for b, seqs in enumerate(plan.batches):
                if batches is not None and b not in batches:
                    continue
                ids, mask, pos, rows, cols, ok, tgt = _batch_inputs(probe, seqs, limit, device, padding_side)
                hc = _cached_hidden(hidden_cache, b)
                if hc is None:
                    hc = hidden_states(model, ids, mask, pos)[rows, cols]
                    ran += 1
                    _keep_hidden(hidden_cache, b, hc)
                if ref_side is None:
                    hr = reference.hidden[b].to(ref_head.weight.device)
                    ok_ref = reference.stats.status[plan.index[b]] != STATUS_BEYOND_CONTEXT
                else:
                    hr, ok_ref = ref_side.hidden(seqs)
                _score_batch(res, plan.index[b], hc, hr, tgt, ok, ok_ref, head, ref_head, buffers, cs, topk,
                             ref_topk=ref_side is not None)
                if progress is not None:
                    progress(len(seqs))
            if lockstep is not None:
                _pad_forwards(model, probe, plan, limit, device, padding_side, lockstep - ran)
    finally:
        if was_training:
            model.train()
        if ref_was_training:
            reference.train()
    _final_status(res, plan.rows(batches), check_reference=ref_side is not None)
    return res


def _empty_reference_stats(probe: ProbeSet, plan: BatchPlan, k: int) -> ReferenceStats:
    """The reference's per-position arrays of ``probe`` under ``plan``: positions and tokens filled, the rest unset."""
    p_total = int(plan.offsets[-1])
    st = ReferenceStats(
        position=np.zeros(p_total, np.int32), token=np.zeros(p_total, np.int32),
        entropy=np.full(p_total, np.nan, np.float32), logprob=np.full(p_total, np.nan, np.float32),
        top1=np.full(p_total, -1, np.int32), topk_ids=np.full((p_total, k), -1, np.int32),
        topk_logprobs=np.full((p_total, k), np.nan, np.float32), status=np.zeros(p_total, np.uint8),
    )
    for i in range(probe.n_sequences):
        t = probe.positions(i)
        st.position[plan.offsets[i]:plan.offsets[i + 1]] = t
        st.token[plan.offsets[i]:plan.offsets[i + 1]] = np.asarray(probe.ids[i])[t]
    return st


def _empty_scores(plan: BatchPlan, k: int, ref: ReferenceStats, info: dict[str, Any]) -> TokenScores:
    p_total = int(plan.offsets[-1])
    return TokenScores(
        offsets=plan.offsets, entropy=np.full(p_total, np.nan, np.float32),
        logprob=np.full(p_total, np.nan, np.float32), top1=np.full(p_total, -1, np.int32),
        topk_ids=np.full((p_total, k), -1, np.int32), topk_logprobs=np.full((p_total, k), np.nan, np.float32),
        kl=np.full(p_total, np.nan, np.float32), js=np.full(p_total, np.nan, np.float32),
        status=np.zeros(p_total, np.uint8), ref=ref, info=info)


def _cached_hidden(cache: list[Any] | dict[int, Any] | None, b: int) -> Any:
    """Batch ``b``'s hidden states from ``score``'s ``hidden_cache``, or None when they are not there."""
    if isinstance(cache, dict):
        return cache.get(b)
    return cache[b] if cache is not None and b < len(cache) else None


def _keep_hidden(cache: list[Any] | dict[int, Any] | None, b: int, h: Any) -> None:
    if isinstance(cache, dict):
        cache[b] = h
    elif cache is not None:
        cache.append(h)


class _ReferenceSide:
    """A reference model run beside the scored one, batch by batch (``score`` without cached outputs)."""

    def __init__(self, model: Any, head: OutputHead, probe: ProbeSet, padding_side: str) -> None:
        self.model, self.head, self.probe, self.padding_side = model, head, probe, padding_side
        self.limit = model_positions(model)

    def hidden(self, seqs: list[int]) -> tuple[Any, np.ndarray]:
        """The reference's hidden states at the scored positions of ``seqs``, and which of them it can see."""
        ids, mask, pos, rows, cols, ok, _ = _batch_inputs(self.probe, seqs, self.limit, self.head.weight.device,
                                                          self.padding_side)
        return hidden_states(self.model, ids, mask, pos)[rows, cols], ok


def _score_batch(res: TokenScores, index: np.ndarray, hc: Any, hr: Any, tgt: Any, ok: np.ndarray, ok_ref: np.ndarray,
                 head: OutputHead, ref_head: OutputHead, buffers: _Buffers, cs: int, k: int, *,
                 ref_topk: bool) -> None:
    """One batch's scores into ``res`` (at ``index``), chunk by chunk of ``cs`` positions; the reference's own
    statistics too when ``ref_topk`` (it runs beside the model, nothing cached)."""
    import torch

    ws = buffers.ws
    device = head.weight.device
    both = ok & ok_ref
    sel = np.flatnonzero(both)
    if len(sel) < len(both):  # positions one of the models cannot see are left out
        sel_t = torch.as_tensor(sel, device=device)
        hc, tgt = hc[sel_t], tgt[sel_t]
        hr = hr[torch.as_tensor(sel, device=hr.device)]
    parts: dict[str, list[torch.Tensor]] = {key: [] for key in (*DIST_FIELDS, "kl", "js")}
    ref_parts: dict[str, list[torch.Tensor]] = {key: [] for key in DIST_FIELDS}
    for s in range(0, hc.shape[0], cs):
        n = min(cs, hc.shape[0] - s)
        ref_head.into(hr[s:s + n].to(ref_head.weight.device), ws.zr[:n], buffers.tmp_rows(ref_head, n))
        head.into(hc[s:s + n], ws.zc[:n], buffers.tmp_rows(head, n))
        ps = ws.pair_stats(n, tgt[s:s + n], k, ref_topk=ref_topk)
        for key in DIST_FIELDS:
            parts[key].append(getattr(ps.ckpt, key))
            if ref_topk:
                ref_parts[key].append(getattr(ps.ref, key))
        parts["kl"].append(ps.kl)
        parts["js"].append(ps.js)
    idx = index[sel]
    if len(idx):
        for key, chunks in parts.items():
            getattr(res, key)[idx] = torch.cat(chunks).cpu().numpy()
        if ref_topk:
            for key, chunks in ref_parts.items():
                getattr(res.ref, key)[idx] = torch.cat(chunks).cpu().numpy()
    res.status[index[~ok]] = STATUS_BEYOND_CONTEXT
    if ref_topk:
        res.ref.status[index[~ok_ref]] = STATUS_BEYOND_CONTEXT


def _final_status(res: TokenScores, mine: np.ndarray, *, check_reference: bool) -> None:
    """Non-finite values marked (the reference's too when it ran here); the values at positions the reference
    cannot score left out."""
    if check_reference:
        bad_ref = mine & (res.ref.status == STATUS_OK) & ~(np.isfinite(res.ref.entropy) & np.isfinite(res.ref.logprob))
        res.ref.status[bad_ref] = STATUS_NONFINITE
    computed = mine & (res.status == STATUS_OK)
    finite = np.isfinite(res.kl) & np.isfinite(res.js) & np.isfinite(res.entropy) & np.isfinite(res.logprob)
    res.status[computed & ~finite & (res.ref.status == STATUS_OK)] = STATUS_NONFINITE
    # positions the reference itself cannot score are not this checkpoint's fault: keep its
    # status ok but leave the values out (NaN), as the summaries do
    for key in ("kl", "js"):
        getattr(res, key)[mine & (res.ref.status != STATUS_OK)] = np.nan
