"""Pure maths of aclarena.diagnostics.task_vectors against naive references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aclarena.diagnostics.task_vectors import (
    Basis,
    GramAccumulator,
    LoraFactors,
    Oracle,
    TaskVector,
    TensorGrams,
    cosine_matrix,
    group_of,
    lora_dense_inner,
    lora_inner,
    nonfinite_index,
    pair_cosines,
    summarize,
)


def _gram_of(tensors, chunk_rows, loras=()):
    acc = GramAccumulator(len(tensors), loras)
    rows = tensors[0].shape[0]
    for s in range(0, rows, chunk_rows):
        acc.add(s, [t[s:s + chunk_rows] for t in tensors])
    return acc.result()


def _naive_basis(tensors):
    x = [t.double().reshape(-1) for t in tensors]
    return [x[0]] + [xi - x[0] for xi in x[1:]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("shape,chunk", [((37, 11), 5), ((64,), 7), ((8, 3, 5), 3), ((5, 9), 100)])
def test_gram_matches_naive(dtype, shape, chunk):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(shape, generator=g)
    tensors = [base] + [base + 0.01 * torch.randn(shape, generator=g) for _ in range(3)]
    tensors = [t.to(dtype) for t in tensors]
    got = _gram_of(tensors, chunk)
    u = _naive_basis(tensors)
    want = np.array([[float(a @ b) for b in u] for a in u])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_scalar_and_empty_tensors():
    acc = GramAccumulator(2)
    acc.add(0, [torch.tensor([2.0]), torch.tensor([3.0])])
    acc.add(1, [torch.zeros(0), torch.zeros(0)])
    np.testing.assert_allclose(acc.result(), [[4.0, 2.0], [2.0, 1.0]])


def _lora(out, inp, r, seed, fan=False, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(r, (out if fan else inp), generator=g)
    b = torch.randn((inp if fan else out), r, generator=g)
    return LoraFactors(A=a, B=b, scale=scale, fan_in_fan_out=fan)


@pytest.mark.parametrize("fan", [False, True])
def test_factored_lora_equals_dense(fan):
    x = _lora(24, 10, 4, 1, fan)
    y = LoraFactors(A=_lora(24, 10, 3, 2, fan).A, B=_lora(24, 10, 3, 2, fan).B, scale=2.0, fan_in_fan_out=fan)
    dx, dy = x.dense(), y.dense()
    assert dx.shape == x.shape
    if fan:  # the stored weight is (in, out) and ΔW = s (B A)ᵀ
        torch.testing.assert_close(dx, x.scale * (x.B.double() @ x.A.double()).T)
    else:
        torch.testing.assert_close(dx, x.scale * (x.B.double() @ x.A.double()))
    assert lora_inner(x, y) == pytest.approx(float((dx * dy).sum()), rel=1e-12)
    dense = torch.randn(3, *x.shape, dtype=torch.float64)
    got = lora_dense_inner(x, dense)
    want = torch.stack([(d * dx).sum() for d in dense])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # the same by row blocks inside the accumulator, against materialised deltas
    w = [torch.randn(x.shape) for _ in range(3)]
    m = _gram_of(w, 7, [x, None, y])
    u = _naive_basis(w) + [dx, torch.zeros_like(dx), dy]
    want_m = np.array([[float((a.reshape(-1) * b.reshape(-1)).sum()) for b in u] for a in u])
    np.testing.assert_allclose(m, want_m, rtol=1e-10, atol=1e-10)


def test_lora_rows_blocks():
    x = _lora(12, 5, 2, 3)
    torch.testing.assert_close(torch.cat([x.delta_rows(0, 5), x.delta_rows(5, 12)]), x.dense())
    with pytest.raises(ValueError):
        lora_inner(x, _lora(12, 6, 2, 4))


def _grams(names, kinds, on, tensors, groups_of_tensor=None):
    """TensorGrams over named synthetic tensors: ``tensors[name] = [θ per dense checkpoint]``."""
    basis = Basis(tuple(names), tuple(kinds), tuple(on))
    n_dense = sum(k != "lora" for k in kinds)
    grams, numel = [], []
    for ts in tensors.values():
        grams.append(_gram_of(ts[:n_dense], 4, ts[n_dense:]))
        numel.append(ts[0].numel())
    return TensorGrams(basis, tuple(tensors), np.stack(grams), np.array(numel))


def test_constructed_cases_cos_one_and_orthogonal():
    g = torch.Generator().manual_seed(5)
    shape = (50, 20)
    base = torch.randn(shape, generator=g, dtype=torch.float64)
    v = torch.randn(shape, generator=g, dtype=torch.float64) * 1e-3
    w = torch.randn(shape, generator=g, dtype=torch.float64)
    w -= (w * v).sum() / (v * v).sum() * v  # exactly-ish orthogonal to v in float64
    w *= 1e-3
    x = base + v  # θ_x − base = v
    a = base + 0.3 * w
    b = a + 2.5 * v  # θ_b = θ_a + c·v
    o = base + w
    tg = _grams(["base", "x", "a", "b", "o"], ["anchor", "dense", "dense", "dense", "dense"], [None] * 5,
                {"model.layers.0.w": [base, x, a, b, o]})
    c = cosine_matrix(tg.view()[1], np.stack([tg.basis.difference("b", "a"), tg.basis.difference("x", "base"),
                                               tg.basis.difference("o", "base")]))[0]
    assert c[0, 1] == pytest.approx(1.0, abs=1e-12)
    assert abs(c[1, 2]) < 1e-6 and abs(c[0, 2]) < 1e-6


def test_precision_small_deltas_against_float32_gram():
    """Deltas 1e-4 the size of the weights: rel. error < 1e-6; a float32 Gram of raw weights fails."""
    g = torch.Generator().manual_seed(7)
    n = 400_000
    base = torch.randn(n, generator=g)
    t1 = base + 1e-4 * torch.randn(n, generator=g)
    t2 = base + 1e-4 * (0.6 * (t1 - base) / 1e-4 + 0.8 * torch.randn(n, generator=g))
    ts = [base.float(), t1.float(), t2.float()]
    exact = [x.double() for x in ts]
    d1, d2 = exact[1] - exact[0], exact[2] - exact[0]
    want_inner = float(d1 @ d2)
    want_cos = want_inner / float(d1.norm() * d2.norm())
    m = _gram_of([t.reshape(100, -1) for t in ts], 7)
    assert abs(m[1, 2] - want_inner) / abs(want_inner) < 1e-6
    got_cos = m[1, 2] / np.sqrt(m[1, 1] * m[2, 2])
    assert abs(got_cos - want_cos) / abs(want_cos) < 1e-6
    # the approach the design refuses: a float32 Gram of raw weights, then differences
    x = torch.stack(ts)
    raw = (x @ x.T).double()
    naive_inner = float(raw[1, 2] - raw[0, 2] - raw[1, 0] + raw[0, 0])
    assert abs(naive_inner - want_inner) / abs(want_inner) > 1e-3


def test_views_groups_and_exclusion():
    assert group_of("model.embed_tokens.weight") == "embed"
    assert group_of("model.layers.12.mlp.up_proj.weight") == "layer.12"
    assert group_of("transformer.h.3.attn.c_attn.weight") == "layer.3"
    assert group_of("lm_head.weight") == "head"
    assert group_of("model.norm.weight") == "final"
    g = torch.Generator().manual_seed(1)
    names = ["model.embed_tokens.weight", "model.layers.0.q.weight", "model.layers.1.q.weight",
             "model.layers.1.k.weight", "model.norm.weight"]
    tensors = {n: [torch.randn(6, 4, generator=g) for _ in range(3)] for n in names}
    tg = _grams(["base", "a", "b"], ["anchor", "dense", "dense"], [None] * 3, tensors)
    labels, m = tg.view("layer")
    assert labels == ["embed", "layer.0", "layer.1", "final"]
    np.testing.assert_allclose(m[2], tg.grams[2] + tg.grams[3])
    labels, m = tg.view("global", exclude_embeddings=True)
    np.testing.assert_allclose(m[0], tg.grams[1:].sum(axis=0))
    labels, m = tg.view("tensor", exclude_embeddings=True)
    assert labels == names[1:]
    # per-tensor cosines agree with torch on the flattened differences
    c = cosine_matrix(m, np.stack([tg.basis.difference("a", "base"), tg.basis.difference("b", "base")]))
    for i, n in enumerate(names[1:]):
        base, a, b = tensors[n]
        assert c[i, 0, 1] == pytest.approx(
            float(torch.nn.functional.cosine_similarity((a - base).reshape(-1), (b - base).reshape(-1), dim=0)), abs=1e-6)
    with pytest.raises(ValueError):
        tg.view("module")


def test_basis_coefficients_with_adapter():
    b = Basis(("base", "s1", "s2", "ad"), ("anchor", "dense", "dense", "lora"), (None, None, None, "s2"))
    np.testing.assert_array_equal(b.coefficients("base"), [1, 0, 0, 0])
    np.testing.assert_array_equal(b.coefficients("s1"), [1, 1, 0, 0])
    np.testing.assert_array_equal(b.coefficients("ad"), [1, 0, 1, 1])
    np.testing.assert_array_equal(b.difference("ad", "s1"), [0, -1, 1, 1])
    with pytest.raises(ValueError):
        Basis(("a", "b"), ("dense", "anchor"), (None, None))
    with pytest.raises(ValueError):
        Basis(("a", "x"), ("anchor", "lora"), (None, "nope"))


def test_summarize_distances_projections_and_pairs():
    g = torch.Generator().manual_seed(3)
    shape = (10, 6)
    names = ["model.layers.0.w", "model.layers.1.w"]
    ck = ["base", "s1", "s2", "orc1"]
    tensors = {}
    for n in names:
        base = torch.randn(shape, generator=g, dtype=torch.float64)
        s1 = base + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        s2 = s1 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        o = base + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        tensors[n] = [base, s1, s2, o]
    tg = _grams(ck, ["anchor", "dense", "dense", "dense"], [None] * 4, tensors)
    vecs = [TaskVector("s1 - base", "s1", "base"), TaskVector("s2 - s1", "s2", "s1"),
            TaskVector("orc1 - base", "orc1", "base")]
    s = summarize(tg, vecs, base="base", oracles=[Oracle("orc1", "math")], chain=["base", "s1", "s2"],
                  projected=[0, 1])
    full = {c: torch.cat([tensors[n][i].reshape(-1) for n in names]) for i, c in enumerate(ck)}
    for ci, c in enumerate(["base", "s1", "s2"]):
        assert s.distance[ci, 0] == pytest.approx(float((full[c] - full["orc1"]).norm()), rel=1e-12)
    o = full["orc1"] - full["base"]
    upd = full["s2"] - full["s1"]
    assert s.projection_coef[1, 0] == pytest.approx(float(upd @ o / (o @ o)), rel=1e-10)
    assert s.projection_cos[1, 0] == pytest.approx(float(upd @ o / (upd.norm() * o.norm())), rel=1e-10)
    assert s.oracle_vector_index() == [2]
    assert s.cos[0, 2] == pytest.approx(float(torch.nn.functional.cosine_similarity(full["s1"] - full["base"], o, dim=0)),
                                        abs=1e-12)
    # layer mean of per-layer cosines differs from the flattened cosine, and is their average
    per_layer = [float(torch.nn.functional.cosine_similarity((tensors[n][1] - tensors[n][0]).reshape(-1),
                                                             (tensors[n][2] - tensors[n][1]).reshape(-1), dim=0))
                 for n in names]
    assert s.layer_mean_cos[0, 1] == pytest.approx(np.mean(per_layer), abs=1e-12)
    labels, pc = pair_cosines(tg, [(vecs[0], vecs[2])], by="layer")
    assert labels == ["layer.0", "layer.1"]
    np.testing.assert_allclose(pc[:, 0], s.cos_group[:, 0, 2])


def test_nonfinite_detected_on_the_diagonal():
    good = torch.randn(4, 3)
    bad = good.clone()
    bad[1, 2] = float("nan")
    assert nonfinite_index(_gram_of([good, good + 1], 2)) is None
    assert nonfinite_index(_gram_of([good, bad, good], 2)) == 1
    inf = good.clone()
    inf[0, 0] = float("inf")
    assert nonfinite_index(_gram_of([inf, good], 2)) == 0
