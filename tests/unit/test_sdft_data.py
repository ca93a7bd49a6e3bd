"""SDFT's domain-balanced order: every batch holds an equal share of each domain."""

from __future__ import annotations

from collections import Counter

import pytest

from aclarena.consolidate.sdft import balanced_order, batching, length_grouped, mixed_order, top_up
from aclarena.errors import AclarenaError


def _records(d, n):
    return [{"domain": d, "i": i} for i in range(n)]


def test_every_batch_is_balanced_and_every_record_is_used():
    data = {"math": _records("math", 5), "search": _records("search", 2), "ecom": _records("ecom", 9),
            "if": _records("if", 3)}
    order = balanced_order(data, batch_size=8, n_batches=12, seed=0)
    assert len(order) == 96
    for b in range(12):
        batch = order[b * 8:(b + 1) * 8]
        assert Counter(r["domain"] for r in batch) == {"math": 2, "search": 2, "ecom": 2, "if": 2}
    # each domain is cycled through: 24 draws of a 5-record domain use every record 4 or 5 times
    uses = Counter(r["i"] for r in order if r["domain"] == "math")
    assert set(uses) == set(range(5)) and max(uses.values()) - min(uses.values()) <= 1
    # seeded: the same order again, another with another seed
    assert balanced_order(data, 8, 12, 0) == order and balanced_order(data, 8, 12, 1) != order


def test_bad_batches_and_empty_domains():
    with pytest.raises(AclarenaError, match="multiple of the number of domains"):
        balanced_order({"a": _records("a", 1), "b": _records("b", 1), "c": _records("c", 1)}, 8, 1, 0)
    with pytest.raises(AclarenaError, match="no training record for domain 'b'"):
        balanced_order({"a": _records("a", 1), "b": []}, 4, 1, 0)


def test_top_up_adds_expert_trajectories():
    got, added = top_up([{"domain": "math"}], "math", 4, seed=0)
    assert added == 3 and len(got) == 4
    assert all(r["domain"] == "math" and r["messages"][-1]["role"] == "assistant" for r in got[1:])
    same, none = top_up(got, "math", 2, seed=0)
    assert none == 0 and same == got


def test_length_grouped_sorts_within_each_batch_only():
    data = {d: [{"domain": d, "text": d[0] * (n * (i + 1))} for i in range(3)]
            for d, n in (("math", 10), ("search", 20), ("ecom", 100), ("if", 12))}
    order = balanced_order(data, 8, 5, seed=3)
    grouped = length_grouped(order, 8)
    for b in range(5):  # the same records in every optimizer batch, shortest first
        before, after = order[b * 8:(b + 1) * 8], grouped[b * 8:(b + 1) * 8]
        assert sorted(map(str, before)) == sorted(map(str, after))
        lengths = [len(r["text"]) for r in after]
        assert lengths == sorted(lengths)
    # read two at a time, the two e-commerce records of a batch share the last micro-batch
    assert all({r["domain"] for r in grouped[b * 8 + 6:(b + 1) * 8]} == {"ecom"} for b in range(5))


def test_batching_micro_batches_unless_the_trl_fields_set_it():
    assert batching(8, 4, {}) == ({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4}, 2)
    assert batching(8, 4, {"per_device_train_batch_size": 8}) == ({"per_device_train_batch_size": 8}, None)
    assert batching(8, 4, {"gradient_accumulation_steps": 2})[1] is None
    data = {d: _records(d, 4) for d in ("math", "search", "ecom", "if")}
    # whole batches with accumulation draw a batch per accumulation step, micro-batches one per optimizer step
    assert len(mixed_order(data, 8, 3, {"gradient_accumulation_steps": 2}, None, 0)) == 48
    assert len(mixed_order(data, 8, 3, batching(8, 4, {})[0], 2, 0)) == 24
