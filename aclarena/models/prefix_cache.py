"""A KV cache kept from one batched ``generate`` call to the next: an episode's next turn reads only its new tokens.

A multi-turn episode prompts the model with the whole conversation at every turn; the turn before read
all of it but the last assistant reply's end and the new messages. :class:`PrefixCache` keeps the cache of
the last call and, for each prompt of the next call, the longest run of tokens some row of that call
attended to that the prompt starts with (an episode's previous turn; another episode's system prompt and
tools at worst). Those keys and values are gathered, row by row, into a new cache, right-aligned; only the
rest of each prompt is prefilled (left padded after the kept part, masked). Position ids come from the
attention mask (the masked columns do not count), so every kept key sits at the position it was computed
at, and the prompt's tokens get the positions a prefill of the whole prompt gives them.

Matching is on token ids, never on text: a template that rewrites earlier turns (drops a ``<think>``
block, reformats a tool call) only shortens the match. What is reused was computed from the same tokens
at the same positions; it differs from a fresh prefill by float rounding only (a decode step's matrix
shapes are not a prefill's), as batching does, so a greedy answer can change only where two tokens tie to
that rounding. Greedy answers are tested equal to the re-prefilled ones (``benchmarks/eval_cache.py``
compares the two ways on a real suite).

Only plain full-attention caches (:class:`transformers.DynamicLayer` in every layer) of a model whose forward
takes ``position_ids`` are reused; another model prefills every prompt, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Prepared:
    """One ``generate`` call's inputs: the full prompt ids and mask (``width`` columns, the kept cache's
    first), the cache to start from (None: prefill everything) and how many prompt tokens it holds."""

    input_ids: Any
    attention_mask: Any
    cache: Any
    width: int
    reused: int


def reusable(cache: Any) -> bool:
    """Whether ``cache`` is one :class:`PrefixCache` can cut and gather: full attention in every layer."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    if not isinstance(cache, DynamicCache) or not cache.layers:
        return False
    return all(type(layer) is DynamicLayer for layer in cache.layers)


def takes_positions(model: Any) -> bool:
    """Whether the model's forward takes ``position_ids``: ``generate`` then derives them from the attention mask,
    which puts kept keys and new tokens at their places; without them a row's positions would count the holes.
    An unmerged peft model generates with the model it wraps, so that one is asked."""
    import inspect

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "position_ids" in inspect.signature(inner.forward).parameters


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class PrefixCache:
    """The cache of the last ``generate`` call and what each of its rows attended to (see the module)."""

    def __init__(self) -> None:
        self._cache: Any = None
        self._cols: list[np.ndarray] = []  # each row's attended columns, in order
        self._tokens: list[np.ndarray] = []  # the tokens at those columns

    def clear(self) -> None:
        self._cache, self._cols, self._tokens = None, [], []

    def match(self, ids: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
        """For each prompt, the kept row sharing its longest prefix and that length (at most all but the
        prompt's last token, which must be read to answer); ``(0, 0)`` when nothing is kept."""
        out = []
        for prompt in ids:
            arr = np.asarray(prompt, dtype=np.int64)
            best = (0, 0)
            for j, toks in enumerate(self._tokens):
                m = min(common_prefix(arr, toks), len(arr) - 1)
                if m > best[1]:
                    best = (j, m)
            out.append(best)
        return out

    def prepare(self, ids: Sequence[Sequence[int]], pad_id: int) -> Prepared:
        """The inputs of a call prompting with ``ids`` (left padded), starting from what is kept."""
        import torch

        matches = self.match(ids) if self._cache is not None else [(0, 0)] * len(ids)
        kept = max(m for _, m in matches)
        rest = max(len(p) - m for p, (_, m) in zip(ids, matches, strict=True))
        width = kept + rest
        input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(ids), width), dtype=torch.long)
        for r, (p, (_, m)) in enumerate(zip(ids, matches, strict=True)):
            input_ids[r, kept - m:kept] = torch.tensor(p[:m], dtype=torch.long)
            attention[r, kept - m:kept] = 1
            input_ids[r, width - (len(p) - m):] = torch.tensor(p[m:], dtype=torch.long)
            attention[r, width - (len(p) - m):] = 1
        cache = self._gather(matches, kept) if kept else None
        self.clear()  # the old cache's memory goes before the call allocates the new one's
        return Prepared(input_ids, attention, cache, width, sum(m for _, m in matches))

    def _gather(self, matches: Sequence[tuple[int, int]], kept: int) -> Any:
        import torch
        from transformers.cache_utils import DynamicCache

        rows = torch.tensor([j for j, _ in matches], dtype=torch.long)
        cols = torch.zeros((len(matches), kept), dtype=torch.long)
        for r, (j, m) in enumerate(matches):
            if m:
                cols[r, kept - m:] = torch.from_numpy(self._cols[j][:m])
        data = []
        for layer in self._cache.layers:
            at_rows, at_cols = rows.to(layer.keys.device)[:, None], cols.to(layer.keys.device)
            # advanced indices around a slice: the result is [rows, kept, heads, dim]
            data.append((layer.keys[at_rows, :, at_cols].transpose(1, 2).contiguous(),
                         layer.values[at_rows, :, at_cols].transpose(1, 2).contiguous()))
        return DynamicCache(data)

    def keep(self, cache: Any, sequences: Any, attention_mask: Any) -> None:
        """Keep a call's returned ``cache``: ``sequences`` are its prompt and generated ids, ``attention_mask``
        its prompt's mask (every generated token was attended to, the pads after a row's end included)."""
        import torch

        self.clear()
        if cache is None or not reusable(cache):
            return
        length = cache.get_seq_length()  # the last token generated was never fed back
        gen = sequences.shape[1] - attention_mask.shape[1]
        full = torch.cat([attention_mask.cpu(), torch.ones((attention_mask.shape[0], gen), dtype=torch.long)], 1)
        mask, seqs = full[:, :length].numpy().astype(bool), sequences[:, :length].cpu().numpy()
        self._cols = [np.flatnonzero(m) for m in mask]
        self._tokens = [s[c] for s, c in zip(seqs, self._cols, strict=True)]
        self._cache = cache
