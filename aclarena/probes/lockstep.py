"""Two checkpoints decoding in lockstep, and where the later one departs from the earlier one's tokens.

:func:`lockstep_generate` runs greedy generation with both models at once (each with its own KV cache):
the driver's top-1 token is emitted unless the row's :class:`Swapper` lets the other model's token
through (the swap test of ``aclarena-diag flips``). :func:`localize` scores one model's replayed
tokens teacher-forced under the other with the scoring core (:mod:`aclarena.probes.teacher_forcing`)
and finds, per trajectory, where the two first disagree. The episodes around it (tools, users,
rewards) are played by :func:`aclarena.analysis.flips.play`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from aclarena.diagnostics.flips import (
    DEFAULT_TOP,
    first_below,
    first_divergence,
    percentile_rank,
    step_divergence,
    top_fraction,
)
from aclarena.errors import AclarenaError

# online KL (one decoding step) and teacher-forced KL differ by float32 rounding only
_KL_RTOL = 1e-3


class Swapper:
    """Decides, token by token, whether the other model's token goes through (one episode).

    ``mode``: ``none`` (the driver alone), ``kl`` (disagreeing positions whose KL reaches
    ``tau``), ``random`` (the disagreeing positions whose ordinal is in ``ordinals``); at
    most ``k`` swaps in all. Records every step for the result.
    """

    def __init__(self, mode: str = "none", *, k: int = 0, tau: float = math.inf,
                 ordinals: frozenset[int] = frozenset()) -> None:
        if mode not in ("none", "kl", "random"):
            raise ValueError(f"`mode` must be none, kl or random, got {mode!r}")
        self.mode, self.k, self.tau, self.ordinals = mode, k, tau, ordinals
        self.used = 0
        self.seen = 0
        self.tokens: list[int] = []
        self.kl: list[float] = []
        self.disagree: list[bool] = []
        self.swapped: list[bool] = []
        self.contexts: list[list[int]] = []  # per turn: the ids the models saw
        self.turns: list[list[int]] = []  # per turn: the ids generated

    def decide(self, disagree: bool, kl: float) -> bool:
        swap = False
        if disagree:
            j = self.seen
            self.seen += 1
            if self.mode != "none" and self.used < self.k:
                if self.mode == "kl":
                    swap = kl >= self.tau - _KL_RTOL * max(abs(self.tau), 1e-3)
                else:
                    swap = j in self.ordinals
        self.used += swap
        self.kl.append(kl)
        self.disagree.append(disagree)
        self.swapped.append(swap)
        return swap


def _forward_logits(model: Any, **kw: Any) -> Any:
    try:
        return model(**kw, logits_to_keep=1)
    except TypeError:
        return model(**kw)


def _new_cache(model: Any) -> dict[str, Any]:
    """A KV cache to pass to ``model``, under the keyword its transformers version takes
    (``cache`` since 5.2x, ``past_key_values`` before); it is filled in place."""
    import inspect as _inspect

    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:
        cache = DynamicCache()
    params = _inspect.signature(model.forward).parameters
    return {"cache": cache} if "cache" in params else {"past_key_values": cache}


def lockstep_generate(
    e_model: Any,
    l_model: Any,
    driver: str,
    contexts: Sequence[Sequence[int]],
    swappers: Sequence[Swapper],
    *,
    max_new_tokens: Sequence[int],
    stop_ids: Sequence[int],
    pad_id: int,
    stop_text: Callable[[list[int]], bool] | None = None,
) -> list[list[int]]:
    """Greedy generation by ``driver`` (``"e"`` or ``"l"``) with both models in lockstep.

    At each step both models' next-token distributions are computed (each with its own KV
    cache); the driver's top-1 token is emitted unless the row's :class:`Swapper` lets the
    other model's top-1 through. Rows stop at a stop token, their ``max_new_tokens``, or when
    ``stop_text(generated ids)`` says the reply has ended (a plain-format prompt's).
    Returns each row's generated ids (the stop token included when one was generated).
    """
    import torch

    if driver not in ("e", "l"):
        raise ValueError(f"`driver` must be 'e' or 'l', got {driver!r}")
    n = len(contexts)
    if n == 0:
        return []
    device = next(e_model.parameters()).device
    width = max(len(c) for c in contexts)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for r, c in enumerate(contexts):  # left padding: every row's next token is at the last column
        ids[r, width - len(c):] = torch.as_tensor(list(c), dtype=torch.long)
        mask[r, width - len(c):] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    stops = set(int(s) for s in stop_ids)
    limit = list(max_new_tokens)
    out: list[list[int]] = [[] for _ in range(n)]
    done = [limit[r] <= 0 for r in range(n)]
    with torch.inference_mode():
        pe, pl = _new_cache(e_model), _new_cache(l_model)
        oe = _forward_logits(e_model, input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **pe)
        ol = _forward_logits(l_model, input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **pl)
        ze, zl = oe.logits[:, -1], ol.logits[:, -1]
        last = pos[:, -1:]
        for _ in range(max(limit)):
            if all(done):
                break
            te, tl, tkl = step_divergence(ze, zl)
            e_top: list[int] = te.tolist()
            l_top: list[int] = tl.tolist()
            kl: list[float] = tkl.float().tolist()
            nxt: list[int] = []
            for r in range(n):
                if done[r]:
                    nxt.append(pad_id)
                    continue
                disagree = e_top[r] != l_top[r]
                own, other = (e_top[r], l_top[r]) if driver == "e" else (l_top[r], e_top[r])
                tok = other if swappers[r].decide(disagree, kl[r]) else own
                swappers[r].tokens.append(tok)
                out[r].append(tok)
                nxt.append(tok)
                if tok in stops or len(out[r]) >= limit[r] or (stop_text is not None and stop_text(out[r])):
                    done[r] = True
            if all(done):
                break
            x = torch.as_tensor(nxt, dtype=torch.long, device=device).view(n, 1)
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=1)
            last = last + 1
            oe = e_model(input_ids=x, attention_mask=mask, position_ids=last, use_cache=True, **pe)
            ol = l_model(input_ids=x, attention_mask=mask, position_ids=last, use_cache=True, **pl)
            ze, zl = oe.logits[:, -1], ol.logits[:, -1]
    return out


def _piece(vocab: Sequence[str] | None, tid: int) -> str:
    if vocab is None or not 0 <= tid < len(vocab):
        return str(tid)
    return vocab[tid]


def replay_probe(tokenizer: Any, replays: Sequence[Swapper], *, name: str = "flips", reference: str = "E",
                 vocab_size: int | None = None) -> tuple[Any, list[list[int]]]:
    """The exact token ids each replay saw and generated, as a probe set: one sequence per turn
    (its context, then its generated tokens, which are the scored positions). Returns the probe
    set and, per replay, the indices of its sequences (turns in order)."""
    from aclarena.probes.probe_set import token_pieces, vocab_strings
    from aclarena.results.probes import ProbeSet

    ids: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    pieces: list[list[str]] = []
    texts: list[str] = []
    sources: list[Any] = []
    groups: list[list[int]] = []
    for r, rep in enumerate(replays):
        mine: list[int] = []
        for turn, (ctx, gen) in enumerate(zip(rep.contexts, rep.turns, strict=True)):
            if not gen:
                continue
            seq = np.asarray(list(ctx) + list(gen), dtype=np.int32)
            mask = np.zeros(len(seq), dtype=bool)
            mask[len(ctx):] = True
            mask[0] = False
            mine.append(len(ids))
            ids.append(seq)
            masks.append(mask)
            pieces.append(token_pieces(tokenizer, seq.tolist()))
            texts.append("".join(pieces[-1]))
            sources.append({"replay": r, "turn": turn})
        groups.append(mine)
    if not ids:
        raise AclarenaError("the replays generated no tokens (every context was full); nothing to localize")
    probe = ProbeSet(name=name, reference=reference, ids=ids, scored=masks, texts=texts, token_text=pieces,
                     sources=sources, settings={"source": "flips replay"}, vocab=vocab_strings(tokenizer, vocab_size))
    return probe, groups


def localize(
    e_model: Any,
    l_model: Any,
    tokenizer: Any,
    replays: Sequence[Swapper],
    *,
    top: float = DEFAULT_TOP,
    logprob_below: float = math.log(0.1),
    topk: int = 5,
    batch_size: int = 8,
    early: str = "E",
) -> list[dict[str, Any]]:
    """E's replayed trajectories scored teacher-forced under L with the scoring core (the exact
    token ids E generated, turn by turn); per trajectory, where L first departs from E."""
    from aclarena.probes.teacher_forcing import STATUS_OK, score

    vocab_size = int(l_model.get_output_embeddings().weight.shape[0])
    probe, groups = replay_probe(tokenizer, replays, reference=early, vocab_size=vocab_size)
    res = score(l_model, e_model, probe, batch_size=batch_size, topk=topk, name="the later checkpoint")
    o = res.offsets
    out = []
    for seqs in groups:
        flat = np.concatenate([np.arange(o[q], o[q + 1]) for q in seqs]).astype(np.int64) if seqs else \
            np.zeros(0, np.int64)
        tok, l_top1 = res.ref.token[flat], res.top1[flat]
        valid = (res.status[flat] == STATUS_OK) & (res.ref.status[flat] == STATUS_OK)
        ent = np.where(valid, res.ref.entropy[flat], np.nan)
        n = len(flat)
        j = first_divergence(tok, l_top1, valid)
        top_mask = top_fraction(ent, top) if n else np.zeros(0, bool)
        n_finite = int(np.isfinite(ent).sum())
        d: dict[str, Any] = {"n_positions": n, "diverge": j,
                             "below": first_below(np.where(valid, res.logprob[flat], np.nan), logprob_below),
                             "chance": float(top_mask.sum() / n_finite) if n_finite else float("nan")}
        if j >= 0:
            k = int(flat[j])
            d |= {"e_token": _piece(probe.vocab, int(tok[j])), "l_token": _piece(probe.vocab, int(l_top1[j])),
                  "e_entropy": float(ent[j]), "entropy_pct": percentile_rank(ent, j), "kl": float(res.kl[k]),
                  "in_top": bool(top_mask[j]),
                  "e_topk": [(_piece(probe.vocab, int(t)), float(math.exp(lp)))
                             for t, lp in zip(res.ref.topk_ids[k], res.ref.topk_logprobs[k], strict=True) if t >= 0],
                  "l_topk": [(_piece(probe.vocab, int(t)), float(math.exp(lp)))
                             for t, lp in zip(res.topk_ids[k], res.topk_logprobs[k], strict=True) if t >= 0]}
        else:
            d |= {"e_token": "", "l_token": "", "e_entropy": float("nan"), "entropy_pct": float("nan"),
                  "kl": float("nan"), "in_top": False, "e_topk": [], "l_topk": []}
        d["pieces"] = [p for q in seqs for p, m in zip(probe.token_text[q], probe.scored[q], strict=True) if m]
        d["tf_kl"] = res.kl[flat]
        out.append(d)
    return out


def generated_pieces(tokenizer: Any, rep: Swapper) -> list[str]:
    """The text of each generated token of a replay (pieces of its turns, in order)."""
    from aclarena.probes.probe_set import token_pieces

    out: list[str] = []
    for ctx, gen in zip(rep.contexts, rep.turns, strict=True):
        out += token_pieces(tokenizer, list(ctx) + list(gen))[len(ctx):]
    return out
