"""Pure maths of aclarena.diagnostics.displacement against naive references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aclarena.diagnostics.displacement import (
    DisplacementAccumulator,
    check_tolerances,
    sft_rl_excluded,
    sft_rl_ratios,
    summarize_displacement,
)
from aclarena.diagnostics.task_vectors import LoraFactors

TOLS = (0.0, 1e-6, 1e-4, 1e-2)


def _run(tensors, pairs, chunk=3, adapters=()):
    acc = DisplacementAccumulator(pairs, TOLS, n_dense=len(tensors), adapters=adapters)
    for s in range(0, tensors[0].shape[0], chunk):
        acc.add(s, [t[s:s + chunk] for t in tensors])
    return acc.result()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_and_counts_match_naive(dtype):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(20, 7, generator=g)
    child = base + torch.randn(20, 7, generator=g) * torch.logspace(-8, -1, 7)
    base, child = base.to(dtype), child.to(dtype)
    r = _run([base, child], [(1, 0)])
    d = (child.double() - base.double()).abs()
    assert r.sq_delta[0] == pytest.approx(float((d**2).sum()), rel=1e-12)
    assert r.sq_parent[0] == pytest.approx(float((base.double() ** 2).sum()), rel=1e-12)
    assert r.max_abs[0] == pytest.approx(float(d.max()))
    assert list(r.changed[0]) == [int((d > t).sum()) for t in TOLS]
    db = (child.to(torch.bfloat16).double() - base.to(torch.bfloat16).double()).abs()
    assert list(r.changed_bf16[0]) == [int((db > t).sum()) for t in TOLS]
    if dtype == torch.bfloat16:  # stored in bf16: both modes agree
        assert list(r.changed[0]) == list(r.changed_bf16[0])
    assert r.numel == base.numel()


def test_bf16_rounding_hides_small_updates():
    g = torch.Generator().manual_seed(1)
    base = 1.0 + torch.rand(1000, 4, generator=g)  # weights in [1, 2): a bf16 ulp is 2^-7
    child = base + 1e-4  # far below half an ulp
    r = _run([base, child], [(1, 0)], chunk=100)
    assert r.changed[0, 0] > 0.99 * base.numel()  # every entry moved
    # an entry survives rounding only when it crosses a rounding boundary: about δ / ulp = 1.3% of them
    assert 0 < r.changed_bf16[0, 0] < 0.03 * base.numel()


def test_adapter_column_is_base_plus_lora():
    g = torch.Generator().manual_seed(2)
    base = torch.randn(12, 5, generator=g)
    lo = LoraFactors(A=torch.randn(2, 5, generator=g), B=torch.randn(12, 2, generator=g), scale=0.5)
    r = _run([base], [(1, 0)], chunk=5, adapters=[(0, lo)])
    d = lo.dense()
    assert r.sq_delta[0] == pytest.approx(float((d**2).sum()), rel=1e-12)
    r0 = _run([base], [(1, 0)], chunk=5, adapters=[(0, None)])
    assert r0.sq_delta[0] == 0 and r0.changed[0, 0] == 0


def test_summary_views_and_exclusion():
    names = ["model.embed_tokens.weight", "model.layers.0.a.weight", "model.layers.0.b.weight", "model.layers.1.a.weight"]
    numel = np.array([10, 4, 6, 5])
    sq_delta = np.array([[4.0], [1.0], [3.0], [9.0]])
    sq_parent = np.array([[100.0], [16.0], [9.0], [25.0]])
    changed = np.array([[[10, 2]], [[4, 1]], [[6, 0]], [[5, 5]]])
    s = summarize_displacement(names, numel, sq_delta, sq_parent, changed, changed, (0.0, 1e-3))
    assert s.norm[0] == pytest.approx(math.sqrt(17.0))
    assert s.rel[0] == pytest.approx(math.sqrt(17.0) / math.sqrt(150.0))
    np.testing.assert_allclose(s.changed_frac[0], [25 / 25, 8 / 25])
    assert s.group_labels == ["embed", "layer.0", "layer.1"]
    assert s.norm_group[1, 0] == pytest.approx(2.0)
    np.testing.assert_allclose(s.changed_frac_group[1, 0], [1.0, 0.1])
    s2 = summarize_displacement(names, numel, sq_delta, sq_parent, changed, changed, (0.0, 1e-3),
                                exclude_embeddings=True)
    assert s2.norm[0] == pytest.approx(math.sqrt(13.0))
    assert s2.group_labels == ["layer.0", "layer.1"] and len(s2.tensor_labels) == 3


def test_sft_rl_ratios():
    per, overall = sft_rl_ratios([6.0, 2.0, 3.0, 1.0, 5.0], ["sft", "rl", "sft", "rl", None],
                                 ["math", "math", "search", "search", None])
    assert {(r.stage, r.ratio) for r in per} == {("math", 3.0), ("search", 3.0)}
    assert overall == pytest.approx(4.5 / 1.5)
    per, overall = sft_rl_ratios([1.0], ["rl"], ["math"])
    assert per == [] and math.isnan(overall)


def test_overall_sft_rl_ratio_pools_only_stages_with_both_phases_and_a_nonzero_rl_update():
    """The mini demo's shape (issue 15): math SFT 34.3 / RL 1.10; search, ecom, IF with GRPO updates of exactly 0;
    an extra SFT-only stage. The overall ratio is math's alone, not mean(all SFT) / mean(all RL)."""
    norms = [34.3, 1.10, 15.4, 0.0, 4.95, 0.0, 2.83, 0.0, 7.0]
    phases = ["sft", "rl", "sft", "rl", "sft", "rl", "sft", "rl", "sft"]
    stages = ["math", "math", "search", "search", "ecom", "ecom", "if", "if", "extra"]
    per, overall = sft_rl_ratios(norms, phases, stages)
    assert [r.stage for r in per] == ["math", "search", "ecom", "if"]
    assert [r.pooled for r in per] == [True, False, False, False]
    assert overall == pytest.approx(34.3 / 1.10)
    # pooling everything (the old rule) would give (64.48 / 5) / (1.10 / 4) = 46.9
    assert overall != pytest.approx((sum(norms[0::2]) / 5) / (1.10 / 4))
    assert sft_rl_excluded(norms, phases, stages) == [
        ("search", "RL update exactly 0"), ("ecom", "RL update exactly 0"), ("if", "RL update exactly 0"),
        ("extra", "SFT phase only")]
    # two pooled stages: mean SFT over mean RL of those stages
    per, overall = sft_rl_ratios([6.0, 2.0, 3.0, 3.0, 9.0], ["sft", "rl", "sft", "rl", "rl"],
                                 ["math", "math", "search", "search", "if"])
    assert overall == pytest.approx((6.0 + 3.0) / (2.0 + 3.0))
    assert sft_rl_excluded([6.0, 2.0, 3.0, 3.0, 9.0], ["sft", "rl", "sft", "rl", "rl"],
                           ["math", "math", "search", "search", "if"]) == [("if", "RL phase only")]


def test_tolerance_validation():
    assert check_tolerances([1e-3, 0, 1e-3]) == (0.0, 1e-3)
    for bad in ([], [-1.0], [float("nan")]):
        with pytest.raises(ValueError):
            check_tolerances(bad)
