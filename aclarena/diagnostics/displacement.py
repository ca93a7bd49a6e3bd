"""Parameter displacement of each update and its sparsity, SFT against RL.

For an update ``Δθ = θ_child − θ_parent`` (one training stage or phase), the displacement is
``‖Δθ‖₂`` and the relative displacement ``‖Δθ‖₂ / ‖θ_parent‖₂``, over all floating weights
(flattened), per layer block and per tensor. The ACLArena study (arXiv 2609.23989) finds that
SFT displaces the parameters 3–7× more than RL, which makes SFT good at laying down behaviour and
also good at overwriting it.

Update sparsity is the fraction of entries that did *not* move: ``1 − mean(|Δθ| > tol)``.
Mukherjee et al. (2025, "Reinforcement learning finetunes small subnetworks in large language
models", arXiv 2505.11711) report that RL updates touch a small subnetwork; part of that apparent
sparsity is a bfloat16 artefact, because an update smaller than half a bf16 ulp of the weight is
rounded away when the checkpoint is saved. Both modes are counted: ``exact`` (float64
differences of the stored values) and ``bf16`` (both weights rounded to bfloat16 first, as a
bf16 checkpoint would store them; identical to ``exact`` for checkpoints stored in bf16).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from aclarena.diagnostics.task_vectors import (
    BY_CHOICES,
    LoraFactors,
    group_of,
    group_sort_key,
    is_embedding_group,
)

DEFAULT_TOLERANCES = (0.0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3)
MODES = ("exact", "bf16")


def check_tolerances(tolerances: Sequence[float]) -> tuple[float, ...]:
    """Validate and sort a tolerance sweep."""
    tols = tuple(float(t) for t in tolerances)
    if not tols:
        raise ValueError("`tolerances` must not be empty")
    for t in tols:
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"every tolerance must be finite and >= 0, got {t!r}")
    return tuple(sorted(set(tols)))


@dataclass(frozen=True)
class DisplacementStats:
    """Sums over one tensor for each (child, parent) pair ``p`` and tolerance ``j``."""

    numel: int
    sq_delta: np.ndarray  # (P,) Σ Δ²
    sq_parent: np.ndarray  # (P,) Σ θ_parent²
    changed: np.ndarray  # (P, J) int64: entries with |Δ| > tol_j (exact)
    changed_bf16: np.ndarray  # (P, J) int64: the same after rounding both weights to bf16
    max_abs: np.ndarray  # (P,) max |Δ|


class DisplacementAccumulator:
    """Accumulate displacement and changed-entry counts over one tensor, chunk by chunk.

    Columns ``0 … K−1`` are the dense checkpoints; column ``K + l`` is adapter ``l``, i.e. the
    dense column ``on`` plus the adapter's LoRA delta (formed row block by row block, since
    counting entries needs them). ``pairs`` are ``(child_column, parent_column)``.
    """

    def __init__(
        self,
        pairs: Sequence[tuple[int, int]],
        tolerances: Sequence[float] = DEFAULT_TOLERANCES,
        *,
        n_dense: int,
        adapters: Sequence[tuple[int, LoraFactors | None]] = (),
    ) -> None:
        self.tolerances = check_tolerances(tolerances)
        self.n_dense = n_dense
        self.adapters = list(adapters)
        n_cols = n_dense + len(self.adapters)
        for c, p in pairs:
            if not (0 <= c < n_cols and 0 <= p < n_cols):
                raise ValueError(f"pair {(c, p)} names a column outside 0..{n_cols - 1}")
        for on, _ in self.adapters:
            if not 0 <= on < n_dense:
                raise ValueError(f"an adapter must be applied on a dense column, got {on}")
        self.pairs = list(pairs)
        n_p, n_t = len(self.pairs), len(self.tolerances)
        self._tols = torch.tensor(self.tolerances, dtype=torch.float64)
        self.sq_delta = np.zeros(n_p)
        self.sq_parent = np.zeros(n_p)
        self.changed = np.zeros((n_p, n_t), dtype=np.int64)
        self.changed_bf16 = np.zeros((n_p, n_t), dtype=np.int64)
        self.max_abs = np.zeros(n_p)
        self.numel = 0

    def add(self, start_row: int, tensors: Sequence[torch.Tensor]) -> None:
        """Accumulate rows ``start_row …`` of the dense checkpoints (any dtype, same shape)."""
        if len(tensors) != self.n_dense:
            raise ValueError(f"expected {self.n_dense} tensors, got {len(tensors)}")
        if tensors[0].numel() == 0:
            return
        rows = tensors[0].shape[0] if tensors[0].ndim else 1
        cols: list[torch.Tensor] = [t.reshape(rows, -1).double() for t in tensors]
        for on, lo in self.adapters:
            cols.append(cols[on] + lo.delta_rows(start_row, start_row + rows) if lo is not None else cols[on])
        needed = {i for pair in self.pairs for i in pair}
        rounded = {i: cols[i].to(torch.bfloat16).double() for i in needed}
        for p, (c, q) in enumerate(self.pairs):
            d = (cols[c] - cols[q]).abs_()
            self.sq_delta[p] += float(torch.dot(d.reshape(-1), d.reshape(-1)))
            self.sq_parent[p] += float(torch.dot(cols[q].reshape(-1), cols[q].reshape(-1)))
            self.max_abs[p] = max(self.max_abs[p], float(d.max()))
            self.changed[p] += _count_above(d, self._tols)
            db = (rounded[c] - rounded[q]).abs_()
            self.changed_bf16[p] += _count_above(db, self._tols)
        self.numel += cols[0].numel()

    def result(self) -> DisplacementStats:
        return DisplacementStats(self.numel, self.sq_delta.copy(), self.sq_parent.copy(), self.changed.copy(),
                                 self.changed_bf16.copy(), self.max_abs.copy())


def _count_above(d: torch.Tensor, tols: torch.Tensor) -> np.ndarray:
    flat = d.reshape(-1)
    # NaN compares False everywhere; the caller finds NaN through the sums of squares
    return np.array([int((flat > t).sum()) for t in tols.tolist()], dtype=np.int64)


@dataclass(frozen=True)
class DisplacementSummary:
    """Displacement of each pair: global, per layer block and per tensor, and sparsity curves.

    ``changed_frac[p, j]`` is the fraction of entries with ``|Δ| > tolerances[j]``; sparsity is
    ``1 − changed_frac``. ``*_bf16`` arrays count after rounding both weights to bfloat16.
    """

    tolerances: tuple[float, ...]
    norm: np.ndarray  # (P,) ‖Δθ‖₂
    rel: np.ndarray  # (P,) ‖Δθ‖₂ / ‖θ_parent‖₂
    changed_frac: np.ndarray  # (P, J)
    changed_frac_bf16: np.ndarray  # (P, J)
    group_labels: list[str]
    norm_group: np.ndarray  # (G, P)
    rel_group: np.ndarray  # (G, P)
    changed_frac_group: np.ndarray  # (G, P, J)
    tensor_labels: list[str]
    norm_tensor: np.ndarray  # (T, P)
    rel_tensor: np.ndarray  # (T, P)


def summarize_displacement(
    tensors: Sequence[str],
    numel: np.ndarray,
    sq_delta: np.ndarray,
    sq_parent: np.ndarray,
    changed: np.ndarray,
    changed_bf16: np.ndarray,
    tolerances: Sequence[float],
    *,
    exclude_embeddings: bool = False,
) -> DisplacementSummary:
    """Norms, relative norms and changed fractions from per-tensor sums (``(T, P[, J])`` arrays)."""
    groups = [group_of(t) for t in tensors]
    keep = [i for i, g in enumerate(groups) if not (exclude_embeddings and is_embedding_group(g))]
    n_p = sq_delta.shape[1] if sq_delta.ndim == 2 else 0
    n_j = len(tolerances)
    numel = np.asarray(numel, dtype=np.float64)

    def ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)

    sd, sp = sq_delta[keep], sq_parent[keep]
    ch, chb, ne = changed[keep].astype(np.float64), changed_bf16[keep].astype(np.float64), numel[keep]
    total = ne.sum()
    norm = np.sqrt(sd.sum(axis=0)) if keep else np.zeros(n_p)
    rel = ratio(norm, np.sqrt(sp.sum(axis=0))) if keep else np.full(n_p, np.nan)
    frac = ratio(ch.sum(axis=0), total) if keep else np.full((n_p, n_j), np.nan)
    frac_b = ratio(chb.sum(axis=0), total) if keep else np.full((n_p, n_j), np.nan)
    labels = sorted({groups[i] for i in keep}, key=group_sort_key)
    where = {g: j for j, g in enumerate(labels)}
    gd, gp = np.zeros((len(labels), n_p)), np.zeros((len(labels), n_p))
    gch, gn = np.zeros((len(labels), n_p, n_j)), np.zeros(len(labels))
    for row, i in enumerate(keep):
        j = where[groups[i]]
        gd[j] += sd[row]
        gp[j] += sp[row]
        gch[j] += ch[row]
        gn[j] += ne[row]
    norm_g = np.sqrt(gd)
    rel_g = ratio(norm_g, np.sqrt(gp))
    frac_g = ratio(gch, gn[:, None, None]) if labels else gch
    return DisplacementSummary(
        tolerances=tuple(tolerances), norm=norm, rel=rel, changed_frac=frac, changed_frac_bf16=frac_b,
        group_labels=labels, norm_group=norm_g, rel_group=rel_g, changed_frac_group=frac_g,
        tensor_labels=[tensors[i] for i in keep], norm_tensor=np.sqrt(sd), rel_tensor=ratio(np.sqrt(sd), np.sqrt(sp)),
    )


@dataclass(frozen=True)
class PhaseRatio:
    """``‖Δθ_SFT‖ / ‖Δθ_RL‖`` for one stage (domain), from its SFT and RL updates.

    ``pooled`` says whether the stage counts in the overall ratio: it has both phases and an RL
    update that is not exactly 0 (a GRPO phase whose every group earned one reward moves nothing).
    """

    stage: str
    sft: float
    rl: float

    @property
    def ratio(self) -> float:
        return self.sft / self.rl if self.rl > 0 else math.nan

    @property
    def pooled(self) -> bool:
        return self.rl > 0 and math.isfinite(self.sft) and math.isfinite(self.rl)


def _by_stage(norms: Sequence[float], phases: Sequence[str | None],
              stages: Sequence[str | None]) -> dict[str, dict[str, list[float]]]:
    if not (len(norms) == len(phases) == len(stages)):
        raise ValueError("`norms`, `phases` and `stages` must have equal length")
    per: dict[str, dict[str, list[float]]] = {}
    for n, ph, st in zip(norms, phases, stages, strict=True):
        if ph in ("sft", "rl") and st is not None:
            per.setdefault(st, {"sft": [], "rl": []})[ph].append(float(n))
    return per


def sft_rl_ratios(
    norms: Sequence[float], phases: Sequence[str | None], stages: Sequence[str | None]
) -> tuple[list[PhaseRatio], float]:
    """Per stage (domain) with both an SFT and an RL update, the SFT/RL displacement ratio;
    and the overall ratio pooled over those stages only: the mean SFT norm over the mean RL
    norm of the stages with both phases whose RL update is not exactly 0 (NaN when none is).

    A stage with one phase only, or whose RL update is exactly 0, has no ratio to pool, so it is
    left out of the overall ratio (:func:`sft_rl_excluded` says which and why) rather than
    adding an SFT norm without an RL counterpart, or an RL norm of 0, to the means.
    A stage with several updates of one phase uses their root-sum-square (their total length
    when they are orthogonal; one update is its own norm).
    """
    per = _by_stage(norms, phases, stages)
    out = [PhaseRatio(st, math.sqrt(sum(x * x for x in v["sft"])), math.sqrt(sum(x * x for x in v["rl"])))
           for st, v in per.items() if v["sft"] and v["rl"]]
    pooled = [r for r in out if r.pooled]
    overall = sum(r.sft for r in pooled) / sum(r.rl for r in pooled) if pooled else math.nan
    return out, overall


def sft_rl_excluded(
    norms: Sequence[float], phases: Sequence[str | None], stages: Sequence[str | None]
) -> list[tuple[str, str]]:
    """The stages left out of the overall SFT/RL ratio, each with the reason, in stage order."""
    out = []
    for st, v in _by_stage(norms, phases, stages).items():
        if not v["rl"]:
            out.append((st, "SFT phase only"))
        elif not v["sft"]:
            out.append((st, "RL phase only"))
        elif not PhaseRatio(st, 0.0, math.sqrt(sum(x * x for x in v["rl"]))).pooled:
            out.append((st, "RL update exactly 0"))
    return out


__all__ = [
    "BY_CHOICES",
    "DEFAULT_TOLERANCES",
    "MODES",
    "DisplacementAccumulator",
    "DisplacementStats",
    "DisplacementSummary",
    "PhaseRatio",
    "check_tolerances",
    "sft_rl_excluded",
    "sft_rl_ratios",
    "summarize_displacement",
]
