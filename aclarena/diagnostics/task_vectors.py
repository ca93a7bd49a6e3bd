"""Task vectors: differences of checkpoints in parameter space, their cosines, norms and distances.

A task vector is ``τ = θ_x − θ_ref`` over the floating-point weights of two checkpoints of
one model (Ilharco et al., 2023, "Editing models with task arithmetic", arXiv 2212.04089).
The ACLArena study (arXiv 2609.23989) reads the stage updates (ref = parent), the cumulative
updates (ref = base) and the single-task oracle directions (oracle − base): each stage pulls
the weights toward its own oracle, the directions are only partly aligned, and oracle-mix SFT
from the base and from the sequential end point move in directions with cosine 0.77, against
0.05 for unrelated SFT tasks. docs/task-vectors.md states the convention.

Everything is derived from one matrix per tensor. For checkpoints ``θ_0`` (the anchor, normally
the base), ``θ_1 … θ_{K−1}`` and LoRA adapters ``Δ_1 … Δ_L`` (``ΔW = s·B·A`` on the checkpoint
they are applied on), the *basis* is ``u_0 = θ_0``, ``u_k = θ_k − θ_0`` and ``u_{K+l} = Δ_l``,
and :class:`GramAccumulator` computes ``M = [⟨u_i, u_j⟩]`` in float64 in one pass over the
tensors. Every checkpoint is an integer combination of the basis, so the inner product of any two
differences ``(θ_a − θ_b)`` and ``(θ_c − θ_d)`` is ``c_abᵀ M c_cd`` with the anchor's coefficient
cancelled exactly: the small updates are never recovered from a Gram of raw weights, where float
cancellation would eat them. Summing ``M`` over tensors gives the global (flattened) view; summing
over one layer's tensors gives the per-layer view.

LoRA deltas stay factored: ``⟨B₁A₁, B₂A₂⟩ = Σ (B₁ᵀB₂) ∘ (A₁A₂ᵀ)`` and a dense ``D`` against a
LoRA delta is ``Σ (BᵀD) ∘ A``, so ``B·A`` (out × in) is never formed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np
import torch

BY_CHOICES = ("global", "layer", "tensor")

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)(?:\.|$)")
_HEAD_RE = re.compile(r"(?:^|\.)(?:lm_head|embed_out|output)(?:\.|$)")
_EMBED_RE = re.compile(r"(?:embed|wte|wpe|word_embeddings|position_embeddings)")


# --- tensor groups -------------------------------------------------------------------------


def group_of(name: str) -> str:
    """The layer block a tensor belongs to: ``embed``, ``layer.N``, ``final`` or ``head``.

    ``final`` holds what sits outside the blocks and is neither embedding nor output head
    (the final norm); ``head`` is the output projection when it is not tied to the embeddings.
    """
    m = _LAYER_RE.search(name)
    if m:
        return f"layer.{int(m.group(1))}"
    if _HEAD_RE.search(name):
        return "head"
    if _EMBED_RE.search(name):
        return "embed"
    return "final"


def is_embedding_group(group: str) -> bool:
    """True for the groups ``--exclude-embeddings`` leaves out (input embeddings and output head)."""
    return group in ("embed", "head")


def group_sort_key(group: str) -> tuple[int, int]:
    if group == "embed":
        return (0, 0)
    if group.startswith("layer."):
        return (1, int(group.split(".", 1)[1]))
    if group == "final":
        return (2, 0)
    return (3, 0)


# --- LoRA ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraFactors:
    """A LoRA delta ``ΔW = scale · B @ A`` (``(B @ A).T`` when ``fan_in_fan_out``), kept factored.

    Attributes:
        A: ``(r, in)`` (``(r, rows)`` of the stored weight when ``fan_in_fan_out``).
        B: ``(out, r)``.
        scale: ``lora_alpha / r`` (``lora_alpha / sqrt(r)`` with rsLoRA).
        fan_in_fan_out: the base weight is stored transposed (GPT-2 ``Conv1D``).
    """

    A: torch.Tensor
    B: torch.Tensor
    scale: float
    fan_in_fan_out: bool = False

    def __post_init__(self) -> None:
        if self.A.ndim != 2 or self.B.ndim != 2 or self.A.shape[0] != self.B.shape[1]:
            raise ValueError(f"LoRA factors need A (r, in) and B (out, r), got {tuple(self.A.shape)} and {tuple(self.B.shape)}")
        if not math.isfinite(self.scale):
            raise ValueError(f"`scale` must be finite, got {self.scale!r}")

    @property
    def rank(self) -> int:
        return int(self.A.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """The shape of the weight the delta is added to, as stored."""
        out, inp = int(self.B.shape[0]), int(self.A.shape[1])
        return (inp, out) if self.fan_in_fan_out else (out, inp)

    def delta_rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of the dense delta, in float64 (for element-wise statistics only)."""
        a, b = self.A.double(), self.B.double()
        if self.fan_in_fan_out:
            return self.scale * (a[:, start:stop].T @ b.T)
        return self.scale * (b[start:stop] @ a)

    def dense(self) -> torch.Tensor:
        return self.delta_rows(0, self.shape[0])


def stack_loras(layers: Sequence[dict[str, LoraFactors]]) -> dict[str, LoraFactors]:
    """The sum of several adapters' deltas (a chain of adapters, each applied on the previous one) as one
    factored delta per weight: ``Σ s_i B_i A_i = [s_1 B_1, s_2 B_2, ...] · [A_1; A_2; ...]`` with scale 1, of
    rank ``Σ r_i``; a weight only one adapter targets keeps its factors.

    Raises:
        ValueError: two adapters store one weight in other layouts (``fan_in_fan_out``) or shapes.
    """
    out: dict[str, LoraFactors] = {}
    for layer in layers:
        for t, lo in layer.items():
            have = out.get(t)
            if have is None:
                out[t] = lo
                continue
            if have.shape != lo.shape or have.fan_in_fan_out != lo.fan_in_fan_out:
                raise ValueError(f"adapters of a chain modify {t} with deltas of shapes {have.shape} and {lo.shape} "
                                 "or in other layouts (fan_in_fan_out)")
            dtype = torch.promote_types(torch.promote_types(have.A.dtype, lo.A.dtype), torch.float32)
            out[t] = LoraFactors(A=torch.cat([have.A.to(dtype), lo.A.to(dtype)], dim=0),
                                 B=torch.cat([have.B.to(dtype) * have.scale, lo.B.to(dtype) * lo.scale], dim=1),
                                 scale=1.0, fan_in_fan_out=lo.fan_in_fan_out)
    return out


def lora_inner(x: LoraFactors, y: LoraFactors) -> float:
    """``⟨ΔW_x, ΔW_y⟩`` from the factors: ``s_x s_y Σ (B_xᵀ B_y) ∘ (A_x A_yᵀ)``, in float64."""
    if x.shape != y.shape or x.fan_in_fan_out != y.fan_in_fan_out:
        raise ValueError(f"LoRA deltas of shapes {x.shape} and {y.shape} are not on the same weight")
    bb = x.B.double().T @ y.B.double()
    aa = x.A.double() @ y.A.double().T
    return float(x.scale * y.scale * (bb * aa).sum())


def lora_dense_inner(lora: LoraFactors, dense: torch.Tensor, start: int = 0) -> torch.Tensor:
    """``⟨D_k, ΔW[start:start+rows]⟩`` for a batch ``dense`` of shape ``(K, rows, cols)`` (float64).

    ``Σ (Bᵀ D) ∘ A`` over the rows given, so a LoRA delta can be compared with full weights
    without forming ``B @ A``.
    """
    rows = dense.shape[1]
    a, b = lora.A.to(dense.dtype), lora.B.to(dense.dtype)
    if lora.fan_in_fan_out:
        # ΔW[rows] = s · A[:, rows]ᵀ Bᵀ, so ⟨D, ΔW[rows]⟩ = s · Σ (A[:, rows] D) ∘ Bᵀ
        prod = torch.matmul(a[:, start:start + rows], dense)  # (K, r, out)
        return lora.scale * (prod * b.T).sum(dim=(1, 2))
    prod = torch.matmul(b[start:start + rows].T, dense)  # (K, r, in)
    return lora.scale * (prod * a).sum(dim=(1, 2))


# --- the accumulator -----------------------------------------------------------------------


class GramAccumulator:
    """Inner products of ``[θ_0, θ_1 − θ_0, …, θ_{K−1} − θ_0, Δ_1, …, Δ_L]`` over one tensor.

    Feed the aligned chunks of the K dense checkpoints, row range by row range (any dtype; they
    are converted to float64), then read :meth:`result`. ``loras[l]`` is the LoRA delta of
    adapter ``l`` on this tensor, or None where the adapter does not touch it.

    >>> acc = GramAccumulator(3, loras=[None])
    >>> acc.add(0, [w0, w1, w2])          # rows 0.. of the tensor in each checkpoint
    >>> m = acc.result()                  # (4, 4) float64
    """

    def __init__(self, n_dense: int, loras: Sequence[LoraFactors | None] = ()) -> None:
        if n_dense < 1:
            raise ValueError(f"`n_dense` must be at least 1, got {n_dense}")
        self.n_dense = n_dense
        self.loras = list(loras)
        self._dense = torch.zeros(n_dense, n_dense, dtype=torch.float64)
        self._cross = torch.zeros(n_dense, len(self.loras), dtype=torch.float64)
        self._buf = torch.empty(0, dtype=torch.float64)
        self.numel = 0

    def add(self, start_row: int, tensors: Sequence[torch.Tensor]) -> None:
        """Accumulate rows ``start_row : start_row + len(tensors[0])`` of the tensor."""
        k = self.n_dense
        if len(tensors) != k:
            raise ValueError(f"expected {k} tensors (one per checkpoint), got {len(tensors)}")
        shape = tuple(tensors[0].shape)
        m = tensors[0].numel()
        if any(tuple(t.shape) != shape for t in tensors):
            raise ValueError(f"tensors of one chunk differ in shape: {[tuple(t.shape) for t in tensors]}")
        if m == 0:
            return
        if self._buf.numel() < k * m:
            self._buf = torch.empty(k * m, dtype=torch.float64)
        x = self._buf[: k * m].view(k, m)
        x[0].copy_(tensors[0].reshape(-1))
        # differences first, in float64 (exact for bf16/fp16/fp32 inputs), so the small updates
        # survive; converting and subtracting in one pass saves a sweep over memory
        for i in range(1, k):
            torch.sub(tensors[i].reshape(-1), x[0], out=x[i])
        self._dense.addmm_(x, x.T)
        self.numel += m
        if any(lo is not None for lo in self.loras):
            rows = shape[0] if shape else 1
            xr = x.view(k, rows, -1)
            for j, lo in enumerate(self.loras):
                if lo is not None:
                    if xr.shape[2] != lo.shape[1]:
                        raise ValueError(f"LoRA delta of shape {lo.shape} does not fit rows of width {xr.shape[2]}")
                    self._cross[:, j] += lora_dense_inner(lo, xr, start_row)

    def result(self) -> np.ndarray:
        """The ``(K + L, K + L)`` float64 matrix of inner products in the basis."""
        k, n_l = self.n_dense, len(self.loras)
        out = np.zeros((k + n_l, k + n_l), dtype=np.float64)
        out[:k, :k] = self._dense.numpy()
        out[:k, k:] = self._cross.numpy()
        out[k:, :k] = self._cross.numpy().T
        for i, x in enumerate(self.loras):
            for j in range(i, n_l):
                y = self.loras[j]
                if x is not None and y is not None:
                    out[k + i, k + j] = out[k + j, k + i] = lora_inner(x, y)
        return out


def nonfinite_index(gram: np.ndarray) -> int | None:
    """The first basis vector whose squared norm is not finite (NaN/inf weights), or None.

    ``inf²`` and ``NaN`` both make a diagonal entry non-finite, so a NaN or inf anywhere in a
    checkpoint's tensor shows in its diagonal entry (float64 cannot overflow on squares of
    float32/bf16 weights).
    """
    bad = np.flatnonzero(~np.isfinite(np.diagonal(gram)))
    return int(bad[0]) if bad.size else None


# --- basis and views -----------------------------------------------------------------------


@dataclass(frozen=True)
class Basis:
    """What each row of a Gram matrix is.

    ``names[0]`` is the anchor ``θ_0``; ``kinds[i]`` is ``anchor``, ``dense`` (``θ_i − θ_0``) or
    ``lora`` (an adapter's ``Δ``, applied on the checkpoint ``on[i]``).
    """

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    on: tuple[str | None, ...]

    def __post_init__(self) -> None:
        n = len(self.names)
        if n == 0 or len(self.kinds) != n or len(self.on) != n:
            raise ValueError("`names`, `kinds` and `on` must be non-empty and of equal length")
        if self.kinds[0] != "anchor" or "anchor" in self.kinds[1:]:
            raise ValueError("the first basis vector, and only it, must be the anchor")
        if len(set(self.names)) != n:
            raise ValueError(f"basis names repeat: {list(self.names)}")
        for name, kind, on in zip(self.names, self.kinds, self.on, strict=True):
            if kind not in ("anchor", "dense", "lora"):
                raise ValueError(f"unknown basis kind {kind!r}")
            if kind == "lora" and on not in self.names:
                raise ValueError(f"adapter {name!r} is applied on {on!r}, which is not in the basis")

    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(name) from None

    def coefficients(self, name: str) -> np.ndarray:
        """``θ_name`` as integer coefficients on the basis."""
        i = self.index(name)
        c = np.zeros(len(self), dtype=np.float64)
        kind = self.kinds[i]
        if kind == "lora":
            on = self.on[i]
            assert on is not None
            c = self.coefficients(on)
            c[i] += 1.0
            return c
        c[0] = 1.0
        if kind == "dense":
            c[i] = 1.0
        return c

    def difference(self, plus: str, minus: str) -> np.ndarray:
        """``θ_plus − θ_minus`` on the basis (the anchor's coefficient is exactly 0)."""
        return self.coefficients(plus) - self.coefficients(minus)


@dataclass(frozen=True)
class TensorGrams:
    """Per-tensor Gram matrices in one basis: the result of one streamed pass.

    Attributes:
        basis: what each row/column is.
        tensors: tensor names, in the order they were read.
        grams: ``(T, N, N)`` float64.
        numel: ``(T,)`` number of entries of each tensor.
    """

    basis: Basis
    tensors: tuple[str, ...]
    grams: np.ndarray
    numel: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.basis)
        if self.grams.shape != (len(self.tensors), n, n):
            raise ValueError(f"`grams` must have shape {(len(self.tensors), n, n)}, got {self.grams.shape}")
        if self.numel.shape != (len(self.tensors),):
            raise ValueError("`numel` needs one entry per tensor")

    @property
    def groups(self) -> list[str]:
        return [group_of(t) for t in self.tensors]

    def view(self, by: str = "global", *, exclude_embeddings: bool = False) -> tuple[list[str], np.ndarray]:
        """Labels and ``(G, N, N)`` summed Grams for ``by`` = ``global``, ``layer`` or ``tensor``."""
        if by not in BY_CHOICES:
            raise ValueError(f"`by` must be one of {', '.join(BY_CHOICES)}, got {by!r}")
        groups = self.groups
        keep = [i for i, g in enumerate(groups) if not (exclude_embeddings and is_embedding_group(g))]
        n = len(self.basis)
        if by == "tensor":
            return [self.tensors[i] for i in keep], self.grams[keep] if keep else np.zeros((0, n, n))
        if by == "global":
            total = self.grams[keep].sum(axis=0) if keep else np.zeros((n, n))
            return ["all"], total[None]
        labels = sorted({groups[i] for i in keep}, key=group_sort_key)
        out = np.zeros((len(labels), n, n))
        where = {g: j for j, g in enumerate(labels)}
        for i in keep:
            out[where[groups[i]]] += self.grams[i]
        return labels, out


def inner_products(gram: np.ndarray, left: np.ndarray, right: np.ndarray | None = None) -> np.ndarray:
    """``left @ gram @ right.T`` for coefficient rows; ``gram`` may carry leading group axes."""
    right = left if right is None else right
    return np.einsum("vi,...ij,wj->...vw", left, gram, right)


def cosines_from_inner(inner: np.ndarray, norms_l: np.ndarray, norms_r: np.ndarray) -> np.ndarray:
    """Cosines from inner products and norms; NaN where a vector is zero."""
    denom = norms_l[..., :, None] * norms_r[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(denom > 0, inner / np.where(denom > 0, denom, 1.0), np.nan)
    return np.clip(cos, -1.0, 1.0)


def norms_of(gram: np.ndarray, coefs: np.ndarray) -> np.ndarray:
    """``‖c‖`` for each coefficient row (``(..., V)``); tiny negative rounding clipped to 0."""
    sq = np.einsum("vi,...ij,vj->...v", coefs, gram, coefs)
    return np.sqrt(np.maximum(sq, 0.0))


def cosine_matrix(gram: np.ndarray, coefs: np.ndarray) -> np.ndarray:
    """Cosines among the vectors ``coefs`` (``(V, N)``) under ``gram`` (``(..., N, N)``)."""
    n = norms_of(gram, coefs)
    return cosines_from_inner(inner_products(gram, coefs), n, n)


# --- the study's views ---------------------------------------------------------------------


@dataclass(frozen=True)
class TaskVector:
    """``θ_plus − θ_minus`` with a label and a kind (``update``, ``cumulative``, ``pair``)."""

    label: str
    plus: str
    minus: str
    kind: str = "update"


@dataclass(frozen=True)
class Oracle:
    """A single-task oracle: its checkpoint and domain; its direction is ``θ_oracle − θ_base``."""

    name: str
    domain: str


@dataclass(frozen=True)
class TaskVectorSummary:
    """Everything the `vectors` verb reports, for one choice of embeddings in or out.

    Arrays indexed ``[g]`` run over ``group_labels`` (``layer.N``, ``embed``...), ``[t]`` over
    ``tensor_labels``; ``v``/``w`` over ``vectors``; ``o`` over ``oracles``; ``c`` over
    ``distance_checkpoints``; ``s`` over ``projection_vectors`` (indices into ``vectors``).
    """

    base: str
    vectors: list[TaskVector]
    cos: np.ndarray  # (V, V) global (flattened)
    norm: np.ndarray  # (V,)
    group_labels: list[str]
    cos_group: np.ndarray  # (G, V, V)
    norm_group: np.ndarray  # (G, V)
    layer_mean_cos: np.ndarray  # (V, V) mean over layer blocks of the per-layer cosine
    tensor_labels: list[str]
    cos_tensor: np.ndarray  # (T, V, V)
    norm_tensor: np.ndarray  # (T, V)
    oracles: list[Oracle]
    oracle_norm: np.ndarray  # (O,) ‖θ_oracle − θ_base‖
    distance_checkpoints: list[str]
    on_chain: list[bool]
    distance: np.ndarray  # (C, O) ‖θ_c − θ_oracle‖
    distance_group: np.ndarray  # (G, C, O)
    projection_vectors: list[int]
    projection_cos: np.ndarray  # (S, O)
    projection_length: np.ndarray  # (S, O) ⟨s, o⟩ / ‖o‖
    projection_coef: np.ndarray  # (S, O) ⟨s, o⟩ / ‖o‖²: how far along the oracle direction
    projection_cos_group: np.ndarray  # (G, S, O)
    notes: list[str] = field(default_factory=list)

    def oracle_vector_index(self) -> list[int | None]:
        """For each oracle, the index of its direction (oracle − base) among ``vectors``, if there."""
        return [next((i for i, v in enumerate(self.vectors) if v.plus == o.name and v.minus == self.base), None)
                for o in self.oracles]


def zero_update_notes(vectors: Sequence[TaskVector], cos: np.ndarray) -> list[str]:
    """A note for each task vector of zero length (its two checkpoints hold the same weights over this view): its
    cosines are undefined and shown as nan, which is no measurement of alignment (issue 43)."""
    return [f"{v.label} is a zero update (the two checkpoints have the same weights here), so its cosines are "
            "undefined and shown as nan" for i, v in enumerate(vectors) if i < len(cos) and np.isnan(cos[i, i])]


def summarize(
    grams: TensorGrams,
    vectors: Sequence[TaskVector],
    *,
    base: str,
    oracles: Sequence[Oracle] = (),
    chain: Sequence[str] = (),
    others: Sequence[str] = (),
    projected: Sequence[int] = (),
    exclude_embeddings: bool = False,
    notes: Sequence[str] = (),
) -> TaskVectorSummary:
    """Cosines, norms, distances to oracles and projections onto oracle directions.

    Args:
        grams: the per-tensor Grams of one pass.
        vectors: the task vectors to compare (each a difference of two basis checkpoints).
        base: the checkpoint oracle directions start from.
        oracles: single-task oracles (their directions are ``θ_oracle − θ_base``).
        chain: checkpoints along the sequential chain, in order (distance lines).
        others: further checkpoints whose distances to the oracles are reported (consolidated).
        projected: indices into ``vectors`` of the stage updates to project on each oracle.
        exclude_embeddings: leave out input embeddings and output head.
        notes: carried into the result (e.g. oracles missing for a domain).
    """
    basis = grams.basis
    for v in vectors:
        for name in (v.plus, v.minus):
            if name not in basis.names:
                raise ValueError(f"task vector {v.label!r} names {name!r}, which is not in the pass")
    ex = exclude_embeddings
    _, g_all = grams.view("global", exclude_embeddings=ex)
    group_labels, g_grp = grams.view("layer", exclude_embeddings=ex)
    tensor_labels, g_ten = grams.view("tensor", exclude_embeddings=ex)
    n = len(basis)
    coefs = np.stack([basis.difference(v.plus, v.minus) for v in vectors]) if vectors else np.zeros((0, n))
    cos_all = cosine_matrix(g_all, coefs)[0]
    norm_all = norms_of(g_all, coefs)[0]
    cos_grp = cosine_matrix(g_grp, coefs)
    norm_grp = norms_of(g_grp, coefs)
    cos_ten = cosine_matrix(g_ten, coefs)
    norm_ten = norms_of(g_ten, coefs)
    layer_idx = [i for i, g in enumerate(group_labels) if g.startswith("layer.")]
    if layer_idx:
        with np.errstate(invalid="ignore"), _quiet_nanmean():
            layer_mean = np.nanmean(cos_grp[layer_idx], axis=0)
    else:
        layer_mean = np.full((len(vectors), len(vectors)), np.nan)

    dist_names = list(chain) + [c for c in others if c not in chain]
    o_coefs = np.stack([basis.difference(o.name, base) for o in oracles]) if oracles else np.zeros((0, n))
    oracle_norm = norms_of(g_all, o_coefs)[0]
    if oracles and dist_names:
        d_coefs = np.stack([basis.difference(c, o.name) for c in dist_names for o in oracles])
        dist = norms_of(g_all, d_coefs)[0].reshape(len(dist_names), len(oracles))
        dist_grp = norms_of(g_grp, d_coefs).reshape(len(group_labels), len(dist_names), len(oracles))
    else:
        dist = np.zeros((len(dist_names), len(oracles)))
        dist_grp = np.zeros((len(group_labels), len(dist_names), len(oracles)))

    proj = list(projected)
    s_coefs = coefs[proj] if proj else np.zeros((0, n))
    if oracles and proj:
        inner = inner_products(g_all, s_coefs, o_coefs)[0]
        s_norm = norms_of(g_all, s_coefs)[0]
        p_cos = cosines_from_inner(inner, s_norm, oracle_norm)
        with np.errstate(invalid="ignore", divide="ignore"):
            p_len = np.where(oracle_norm > 0, inner / np.where(oracle_norm > 0, oracle_norm, 1.0), np.nan)
            p_coef = np.where(oracle_norm > 0, inner / np.where(oracle_norm > 0, oracle_norm**2, 1.0), np.nan)
        inner_g = inner_products(g_grp, s_coefs, o_coefs)
        p_cos_grp = cosines_from_inner(inner_g, norms_of(g_grp, s_coefs), norms_of(g_grp, o_coefs))
    else:
        shape = (len(proj), len(oracles))
        p_cos = p_len = p_coef = np.zeros(shape)
        p_cos_grp = np.zeros((len(group_labels), *shape))
    return TaskVectorSummary(
        base=base, vectors=list(vectors), cos=cos_all, norm=norm_all, group_labels=group_labels, cos_group=cos_grp,
        norm_group=norm_grp, layer_mean_cos=layer_mean, tensor_labels=tensor_labels, cos_tensor=cos_ten,
        norm_tensor=norm_ten,        oracles=list(oracles), oracle_norm=oracle_norm, distance_checkpoints=dist_names,
        on_chain=[c in chain for c in dist_names], distance=dist, distance_group=dist_grp,
        projection_vectors=proj, projection_cos=p_cos, projection_length=p_len, projection_coef=p_coef,
        projection_cos_group=p_cos_grp, notes=[*notes, *zero_update_notes(vectors, cos_all)],
    )


def pair_cosines(
    grams: TensorGrams,
    pairs: Sequence[tuple[TaskVector, TaskVector]],
    *,
    by: str = "global",
    exclude_embeddings: bool = False,
) -> tuple[list[str], np.ndarray]:
    """Cosine of each pair of differences, per view group: labels and ``(G, P)``."""
    labels, g = grams.view(by, exclude_embeddings=exclude_embeddings)
    if not pairs:
        return labels, np.zeros((len(labels), 0))
    left = np.stack([grams.basis.difference(a.plus, a.minus) for a, _ in pairs])
    right = np.stack([grams.basis.difference(b.plus, b.minus) for _, b in pairs])
    inner = np.einsum("pi,gij,pj->gp", left, g, right)
    nl, nr = norms_of(g, left), norms_of(g, right)
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = nl * nr
        cos = np.where(denom > 0, inner / np.where(denom > 0, denom, 1.0), np.nan)
    return labels, np.clip(cos, -1.0, 1.0)


class _quiet_nanmean:
    """Silence numpy's 'Mean of empty slice' for all-NaN cells (they stay NaN)."""

    def __enter__(self) -> None:
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._cm.__exit__(exc_type, exc, tb)
