"""The kept KV cache's bookkeeping: which row a prompt continues, and what a call leaves kept."""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

from aclarena.models.prefix_cache import PrefixCache, common_prefix, reusable, takes_positions


def _kept(tokens: list[list[int]], cols: list[list[int]]) -> PrefixCache:
    pc = PrefixCache()
    pc._cache = object()  # match reads only the tokens
    pc._tokens = [np.asarray(t) for t in tokens]
    pc._cols = [np.asarray(c) for c in cols]
    return pc


def test_common_prefix():
    assert common_prefix(np.array([1, 2, 3]), np.array([1, 2, 4, 5])) == 2
    assert common_prefix(np.array([1, 2]), np.array([1, 2, 3])) == 2
    assert common_prefix(np.array([], dtype=int), np.array([1])) == 0
    assert common_prefix(np.array([7]), np.array([1])) == 0


def test_each_prompt_continues_the_row_sharing_most_and_reads_its_last_token():
    pc = _kept([[1, 2, 3, 4, 5], [1, 2, 9, 9]], [[0, 1, 2, 3, 4], [2, 3, 4, 5]])
    assert pc.match([[1, 2, 9, 9, 6], [1, 2, 3, 4, 5, 6, 7], [1, 2, 3], [8, 8]]) == [(1, 4), (0, 5), (0, 2), (0, 0)]
    assert PrefixCache().match([[1, 2]]) == [(0, 0)]  # nothing kept


def test_prepare_puts_the_kept_part_first_and_the_rest_left_padded():
    keys = torch.arange(2 * 1 * 6 * 1, dtype=torch.float).view(2, 1, 6, 1)  # [rows, heads, columns, dim]
    cache = DynamicCache([(keys, -keys)])
    pc = PrefixCache()
    # row 0 attended columns 1..5 (one pad on the left), row 1 all six
    seqs = torch.tensor([[0, 1, 2, 3, 4, 5, 99], [7, 7, 7, 7, 7, 7, 99]])
    pc.keep(cache, seqs, torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]))
    p = pc.prepare([[1, 2, 3, 8], [7, 7, 6, 6]], pad_id=0)
    assert p.reused == 3 + 2 and p.width == 3 + 2  # the longest kept part, then the longest rest
    assert p.input_ids.tolist() == [[1, 2, 3, 0, 8], [0, 7, 7, 6, 6]]
    assert p.attention_mask.tolist() == [[1, 1, 1, 0, 1], [0, 1, 1, 1, 1]]
    k = p.cache.layers[0].keys[:, 0, :, 0]
    assert k[0].tolist() == keys[0, 0, 1:4, 0].tolist()  # row 0's columns 1, 2, 3
    assert k[1, 1:].tolist() == keys[1, 0, 0:2, 0].tolist()  # row 1's columns 0, 1, right-aligned
    assert torch.equal(p.cache.layers[0].values, -p.cache.layers[0].keys)
    assert pc.match([[1, 2, 3]]) == [(0, 0)]  # handed over: the next call keeps what it returns


def test_only_full_attention_caches_are_kept():
    full = DynamicCache([(torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1))])
    assert reusable(full)
    sliding = DynamicCache([(torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1))])
    sliding.layers[0] = DynamicSlidingWindowLayer(sliding_window=2)
    assert not reusable(sliding) and not reusable(None)
    pc = PrefixCache()
    pc.keep(sliding, torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))
    assert pc.match([[0, 0, 0]]) == [(0, 0)]


def test_positions_come_from_the_mask_for_hf_and_unmerged_peft_models(tokenizer):
    from peft import LoraConfig, get_peft_model

    from aclarena.models.tiny import build_model, tiny_config

    model = build_model(tiny_config(tokenizer), seed=0)
    assert takes_positions(model)
    assert takes_positions(get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])))

    class Wrapped:  # a forward without position_ids: generate would number the holes; nothing is kept
        def forward(self, input_ids, attention_mask=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
            return None

    assert not takes_positions(Wrapped())
