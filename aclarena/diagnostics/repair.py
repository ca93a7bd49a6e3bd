"""Training-free repair of one stage's update, per weight matrix, from two checkpoints only.

A stage moved the weights from ``OLD`` to ``NEW``; its update of one weight matrix is
``Δ = W_new − W_old`` with the thin SVD ``Δ = Σ_i σ_i u_i v_iᵀ`` (σ descending). Three repairs,
each returning the repaired matrix ``W_rep``:

* **svd-restore** (after "RL Is Neither a Panacea Nor a Mirage", Jin et al., 2025,
  arXiv 2508.16546: restoring the singular directions of the top 20% of singular values
  recovers 70–80% of the out-of-distribution performance a fine-tune lost). With
  ``k = ceil(r/100 · min(m, n))`` for ``r ∈ (0, 100]``, the repaired matrix is OLD's inside the
  update's top-k singular directions and NEW's outside them::

      W_rep = W_new − Σ_{i≤k} σ_i u_i v_iᵀ = W_old + Σ_{i>k} σ_i u_i v_iᵀ

  ``r = 100`` gives OLD back. The paper restores the singular vectors of the weight matrix itself
  (it swaps NEW's top singular vectors for OLD's and keeps NEW's singular values); this module
  works on the update, so that the repair is a projection of Δ with an exact float64 reference
  and is zero where the stage changed nothing.
* **dg-hard** (DG-Hard of "Spectral Unforgetting", Abro & Tahir, 2026, arXiv 2605.20296: the
  update is a low-rank task signal plus an IID-like noise bulk, and the bulk is what damaged
  held-out skills). Keep the singular values above the Gavish–Donoho optimal hard threshold for
  unknown noise (Gavish & Donoho, 2014, "The optimal hard threshold for singular values is
  4/√3", IEEE Trans. Inf. Theory 60(8))::

      τ = ω(β) · median(σ),  β = min(m, n) / max(m, n),
      ω(β) ≈ 0.56 β³ − 0.95 β² + 1.82 β + 1.43,
      W_rep = W_old + Σ_{σ_i > τ} σ_i u_i v_iᵀ

  The search corpus held the paper's abstract and summaries, not its equations; the threshold is
  the standard Gavish–Donoho one the abstract names (ω(1) ≈ 2.86; the known-noise square case
  is the 4/√3 of the title).
* **layer-rollback** (the paper of 2508.16546 resets the first 25% of layers): whole tensors
  take OLD's values; which tensors is chosen here from the parameter diagnostics of the update,
  per layer block (:func:`aclarena.diagnostics.task_vectors.group_of`): the largest displacement
  ``‖Δ_g‖₂`` or the lowest cosine ``cos(Δ_g, τ_g)`` with the new domain's oracle direction
  ``τ = θ_oracle − θ_base`` (layers that moved least along what the new task needed), see
  :func:`select_groups`.

Tensors with more than two axes are repaired as ``(shape[0], −1)`` matrices; 1-D tensors (norm
weights, biases) and scalars have no spectrum to filter, so the spectral repairs take NEW's
(the stage's own change of them is kept), while layer-rollback takes OLD's for every tensor of a
rolled-back layer. The maths runs in ``compute_dtype`` (float32 by default; float64 for the
exact reference) and returns that dtype.

Memory. A thin SVD of a tall ``m × n`` update (``m ≫ n``: a 262,144 × 640 embedding) holds Δ, ``U``,
the top-k product and the result, each ``m × n``, plus LAPACK's workspace: 6.9x the tensor was measured
(docs/results/repair_memory_large_vocab.json). With ``block_rows`` the spectral repairs of a tall matrix
work in row blocks instead: the Gram matrix ``ΔᵀΔ = V diag(σ²) Vᵀ`` (``n × n``, accumulated block by
block in float64, so σ keeps ~1e-8 of σ_max where float32 is ~1e-7) gives the right singular vectors,
and each block of the result is ``W_new − Δ_b V_k V_kᵀ`` (svd-restore) or ``W_old + Δ_b V_K V_Kᵀ``
(dg-hard, ``K`` the directions above τ): the same projections, with memory of the result plus one
block (:func:`plan_row_blocked`; the caller writes the blocks as they come).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import torch

METHODS = ("svd-restore", "dg-hard", "layer-rollback")
SELECT = ("first", "displacement", "cosine")
DG_COEFFICIENTS = (0.56, -0.95, 1.82, 1.43)  # ω(β) ≈ 0.56β³ − 0.95β² + 1.82β + 1.43 (Gavish & Donoho 2014, eq. 5)


def check_percent(percent: float) -> float:
    """``percent`` as a float in (0, 100], or ValueError naming the fix."""
    p = float(percent)
    if not (math.isfinite(p) and 0.0 < p <= 100.0):
        raise ValueError(f"rank percent must be in (0, 100], got {percent!r}; e.g. 25 restores the top quarter "
                         "of each update's singular directions")
    return p


def rank_of_percent(percent: float, n_singular: int) -> int:
    """``ceil(percent/100 · n_singular)`` (at least 1, at most ``n_singular``): the directions svd-restore restores."""
    p = check_percent(percent)
    if n_singular < 1:
        return 0
    # round first so that 25% of 8 is 2, not 3 through float error
    return max(1, min(n_singular, math.ceil(round(p / 100.0 * n_singular, 9))))


def dg_omega(beta: float) -> float:
    """Gavish–Donoho's ω(β) for unknown noise: τ = ω(β) · median singular value."""
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"aspect ratio β must be in (0, 1], got {beta!r}")
    a, b, c, d = DG_COEFFICIENTS
    return ((a * beta + b) * beta + c) * beta + d


def _as_matrix(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype).reshape(t.shape[0], -1)


def _check_pair(old: torch.Tensor, new: torch.Tensor) -> None:
    if old.shape != new.shape:
        raise ValueError(f"OLD has shape {tuple(old.shape)} but NEW {tuple(new.shape)}: a repair needs checkpoints "
                         "of one model")


def is_matrix(t: torch.Tensor) -> bool:
    """Whether the spectral repairs filter ``t`` (2 or more axes, none empty)."""
    return t.ndim >= 2 and t.numel() > 0


@dataclass(frozen=True)
class SpectralRepair:
    """A repaired matrix and what the filter did: ``kept`` of ``n`` singular directions of Δ stay NEW's,
    ``energy_removed`` is the share of ``‖Δ‖²_F`` moved back to OLD, ``threshold`` the DG cut (None for svd-restore)."""

    tensor: torch.Tensor
    n: int
    kept: int
    energy_removed: float
    threshold: float | None = None
    rank: int = 0  # the update's numerical rank (:func:`update_rank`): directions it actually has
    kept_in_rank: int = 0  # of those, the ones kept as NEW's
    restored: int = 0  # svd-restore: the k directions asked for (more than ``rank`` is a full rollback)


def update_rank(s: torch.Tensor, shape: Sequence[int], storage: torch.dtype, largest_entry: float, *,
                from_gram: bool = False) -> int:
    """The numerical rank of an update with singular values ``s`` (descending): those above both the
    compute precision (``σ_max · max(m, n) · eps``, numpy's ``matrix_rank`` rule) and the rounding of the
    stored weights (``eps(storage) · max |W| · √max(m, n)``, the singular value of a full-rank rounding
    noise), so that a rank-16 LoRA merged into a float32 or bfloat16 checkpoint has rank 16. ``from_gram``:
    σ are square roots of the float64 Gram matrix's eigenvalues, whose error is ``~max(m, n) · eps · σ_max²``,
    so σ below ``σ_max · √(max(m, n) · eps₆₄)`` are not resolved either."""
    if s.numel() == 0:
        return 0
    big = max(int(shape[0]), int(math.prod(shape[1:])))
    top = float(s[0])
    eps_store = torch.finfo(storage).eps if storage.is_floating_point else 0.0
    tol = max(top * big * torch.finfo(s.dtype).eps, eps_store * largest_entry * math.sqrt(big))
    if from_gram:
        tol = max(tol, top * math.sqrt(big * torch.finfo(torch.float64).eps))
    return int((s > tol).sum())


def _svd(old: torch.Tensor, new: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                          torch.Tensor]:
    delta = _as_matrix(new, dtype) - _as_matrix(old, dtype)
    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    return delta, u, s, vh


def _energy(s: torch.Tensor, removed: torch.Tensor) -> float:
    total = float((s.double() ** 2).sum())
    return float((removed.double() ** 2).sum()) / total if total > 0 else 0.0


def is_row_blocked(t: torch.Tensor, block_rows: int | None) -> bool:
    """Whether the spectral repairs take ``t`` in row blocks: a matrix with more rows than columns and than
    ``block_rows`` (a wide or small matrix costs no more than itself in a whole SVD)."""
    if block_rows is None or not is_matrix(t):
        return False
    rows, cols = int(t.shape[0]), int(math.prod(t.shape[1:]))
    return rows > cols and rows > block_rows


def gram_spectrum(old: torch.Tensor, new: torch.Tensor, block_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """σ (descending, float64) and ``V`` (``n × n``, float64, columns in σ's order) of the update
    ``Δ = new − old`` as an ``(m, n)`` matrix, from ``ΔᵀΔ`` accumulated over blocks of ``block_rows`` rows:
    no ``m × n`` intermediate (the thin SVD's right singular vectors, up to sign and rotations within
    equal singular values)."""
    o, w = old.reshape(old.shape[0], -1), new.reshape(new.shape[0], -1)
    n = int(w.shape[1])
    gram = torch.zeros(n, n, dtype=torch.float64)
    for i in range(0, int(w.shape[0]), block_rows):
        d = w[i:i + block_rows].double() - o[i:i + block_rows].double()
        gram.addmm_(d.T, d)
    evals, evecs = torch.linalg.eigh(gram)
    order = torch.flip(torch.arange(n), (0,))
    return evals[order].clamp_min(0.0).sqrt(), evecs[:, order]


@dataclass(frozen=True)
class RowBlockedRepair:
    """A spectral repair of a tall matrix planned from its Gram matrix (:func:`plan_row_blocked`): the
    result is ``start + sign · Δ V Vᵀ``, made ``block_rows`` rows at a time by :meth:`blocks`, so that
    a caller can write it without ever holding it whole; ``info`` is the repair's report (its tensor empty)."""

    info: SpectralRepair
    old: torch.Tensor
    new: torch.Tensor
    v: torch.Tensor
    sign: float
    block_rows: int
    dtype: torch.dtype

    def blocks(self) -> Iterator[torch.Tensor]:
        start = self.old if self.sign > 0 else self.new
        o, w = self.old.reshape(self.old.shape[0], -1), self.new.reshape(self.new.shape[0], -1)
        base = start.reshape(start.shape[0], -1)
        v = self.v.to(self.dtype)
        for i in range(0, int(w.shape[0]), self.block_rows):
            out = base[i:i + self.block_rows].to(self.dtype, copy=True)
            if v.shape[1]:
                d = w[i:i + self.block_rows].to(self.dtype) - o[i:i + self.block_rows].to(self.dtype)
                out.add_((d @ v) @ v.T, alpha=self.sign)
            yield out.reshape(-1, *self.new.shape[1:])

    def tensor(self) -> torch.Tensor:
        return torch.cat(list(self.blocks())) if self.new.shape[0] else self.new.to(self.dtype).clone()


def plan_row_blocked(old: torch.Tensor, new: torch.Tensor, method: str, percent: float | None, block_rows: int, *,
                     compute_dtype: torch.dtype = torch.float32) -> RowBlockedRepair:
    """:func:`svd_restore` (``method`` "svd-restore", ``percent``) or :func:`dg_hard` of a tall matrix, in row
    blocks: the spectrum from :func:`gram_spectrum`, the result as blocks (see the module's note on memory)."""
    _check_pair(old, new)
    s64, v = gram_spectrum(old, new, block_rows)
    s = s64.to(compute_dtype)
    r = update_rank(s, new.shape, new.dtype, _largest(old, new), from_gram=True)
    if method == "svd-restore":
        k = rank_of_percent(check_percent(percent if percent is not None else 0.0), s.numel())
        info = SpectralRepair(torch.empty(0), s.numel(), s.numel() - k, _energy(s, s[:k]), rank=r,
                              kept_in_rank=max(r - k, 0), restored=k)
        return RowBlockedRepair(info, old, new, v[:, :k], -1.0, block_rows, compute_dtype)
    if method != "dg-hard":
        raise ValueError(f"row blocks are for the spectral repairs, not {method!r}")
    tau = dg_threshold(s, new.shape)
    keep = s > tau
    info = SpectralRepair(torch.empty(0), s.numel(), int(keep.sum()), _energy(s, s[~keep]), tau, rank=r,
                          kept_in_rank=int(keep[:r].sum()))
    return RowBlockedRepair(info, old, new, v[:, keep], 1.0, block_rows, compute_dtype)


def update_sq_norm(old: torch.Tensor, new: torch.Tensor, block_rows: int | None = None) -> float:
    """``‖new − old‖²_F``, accumulated in float64 (in row blocks when ``block_rows`` is given: no full-size copy)."""
    if new.ndim == 0 or new.numel() == 0 or block_rows is None:
        return float(torch.linalg.vector_norm((new.float() - old.float()).flatten(), dtype=torch.float64)) ** 2
    total = 0.0
    for i in range(0, int(new.shape[0]), block_rows):
        d = new[i:i + block_rows].float() - old[i:i + block_rows].float()
        total += float(torch.linalg.vector_norm(d.flatten(), dtype=torch.float64)) ** 2
    return total


def svd_restore(old: torch.Tensor, new: torch.Tensor, percent: float, *,
                compute_dtype: torch.dtype = torch.float32, block_rows: int | None = None) -> SpectralRepair:
    """``W_new − Σ_{i≤k} σ_i u_i v_iᵀ`` with ``k = ceil(percent/100 · min(m, n))`` (OLD's in the update's top-k
    directions, NEW's elsewhere); 1-D tensors come back as NEW's. ``block_rows``: a tall matrix is repaired in
    row blocks of that size (see the module's note on memory)."""
    _check_pair(old, new)
    p = check_percent(percent)
    if not is_matrix(new):
        return SpectralRepair(new.to(compute_dtype).clone(), 0, 0, 0.0)
    if is_row_blocked(new, block_rows):
        assert block_rows is not None
        plan = plan_row_blocked(old, new, "svd-restore", p, block_rows, compute_dtype=compute_dtype)
        return replace(plan.info, tensor=plan.tensor())
    _, u, s, vh = _svd(old, new, compute_dtype)
    k = rank_of_percent(p, s.numel())
    top = (u[:, :k] * s[:k]) @ vh[:k]
    out = _as_matrix(new, compute_dtype) - top
    r = update_rank(s, new.shape, new.dtype, _largest(old, new))
    return SpectralRepair(out.reshape(new.shape), s.numel(), s.numel() - k, _energy(s, s[:k]), rank=r,
                          kept_in_rank=max(r - k, 0), restored=k)


def _largest(old: torch.Tensor, new: torch.Tensor) -> float:
    """max |W| over OLD and NEW (from min and max: no full-size copy)."""
    if not new.numel():
        return 0.0
    return max(abs(float(x)) for t in (old, new) for x in torch.aminmax(t))


def dg_threshold(singular_values: torch.Tensor, shape: Sequence[int]) -> float:
    """``ω(β) · median(σ)`` for a matrix of ``shape`` (rows, cols) with singular values ``σ``.

    The median is the middle value, or the mean of the two middle ones for an even count
    (Gavish & Donoho's ``σ_med``), not torch's lower median.
    """
    rows, cols = int(shape[0]), int(math.prod(shape[1:]))
    beta = min(rows, cols) / max(rows, cols)
    s = torch.sort(singular_values.double()).values
    n = s.numel()
    if n == 0:
        return 0.0
    med = float(s[n // 2]) if n % 2 else float(s[n // 2 - 1] + s[n // 2]) / 2.0
    return dg_omega(beta) * med


def dg_hard(old: torch.Tensor, new: torch.Tensor, *, compute_dtype: torch.dtype = torch.float32,
            block_rows: int | None = None) -> SpectralRepair:
    """``W_old + Σ_{σ_i > τ} σ_i u_i v_iᵀ`` with the Gavish–Donoho threshold τ of Δ; 1-D tensors come back as NEW's.
    ``block_rows``: a tall matrix is repaired in row blocks of that size (see the module's note on memory)."""
    _check_pair(old, new)
    if not is_matrix(new):
        return SpectralRepair(new.to(compute_dtype).clone(), 0, 0, 0.0)
    if is_row_blocked(new, block_rows):
        assert block_rows is not None
        plan = plan_row_blocked(old, new, "dg-hard", None, block_rows, compute_dtype=compute_dtype)
        return replace(plan.info, tensor=plan.tensor())
    _, u, s, vh = _svd(old, new, compute_dtype)
    tau = dg_threshold(s, new.shape)
    keep = s > tau
    kept = (u[:, keep] * s[keep]) @ vh[keep]
    out = _as_matrix(old, compute_dtype) + kept
    r = update_rank(s, new.shape, new.dtype, _largest(old, new))
    return SpectralRepair(out.reshape(new.shape), s.numel(), int(keep.sum()), _energy(s, s[~keep]), tau, rank=r,
                          kept_in_rank=int(keep[:r].sum()))


def over_rank_note(percent: float, matrices: int, over: int, example: tuple[int, int] | None) -> str | None:
    """One line when ``--rank-percent`` asked for at least as many directions as an update has (``over`` of
    the ``matrices`` the stage changed): those matrices are OLD's again, a full rollback, not a partial
    repair. ``example``: (directions asked, the update's rank) of one of them."""
    if not over:
        return None
    eg = f" (e.g. {example[0]} directions of an update of rank {example[1]})" if example else ""
    return (f"--rank-percent {percent:g} restores every direction of the update in {over} of {matrices} changed "
            f"matrices{eg}: those are OLD's again, a full rollback of them, not a partial repair; a percentage of "
            "min(rows, cols) exceeds a low-rank (LoRA) update's rank, so take a smaller one")


# --- low-rank updates (LoRA) -------------------------------------------------------------------


def factored_svd(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The thin SVD ``u · diag(s) · vh`` of ``p @ q`` (``p``: ``(m, k)``, ``q``: ``(k, n)``) without forming it.

    QR of ``p`` and of ``qᵀ`` (``O((m + n) k²)``), then the SVD of the ``k × k`` core ``R_p R_qᵀ``:
    ``p q = Q_p (R_p R_qᵀ) Q_qᵀ``. A LoRA update ``s·B·A`` of rank ``r`` costs ``r``-sized work this
    way, never a ``d × d`` matrix. Returns ``u`` ``(m, k')``, ``s`` ``(k',)`` descending, ``vh`` ``(k', n)``
    with ``k' = min(m, n, k)``; singular values beyond ``k'`` are zero.
    """
    if p.ndim != 2 or q.ndim != 2 or p.shape[1] != q.shape[0]:
        raise ValueError(f"factors of shapes {tuple(p.shape)} and {tuple(q.shape)} do not multiply")
    qp, rp = torch.linalg.qr(p)
    qq, rq = torch.linalg.qr(q.T)
    u0, s, vh0 = torch.linalg.svd(rp @ rq.T, full_matrices=False)
    return qp @ u0, s, vh0 @ qq.T


@dataclass(frozen=True)
class LowRankRepair:
    """A spectral repair of a low-rank update ``Δ = p @ q``: ``W_rep = W_old + P @ Q`` (``P``: ``(m, j)``, ``Q``:
    ``(j, n)``, the kept directions, ``√σ`` on each side). ``n``, ``kept``, ``energy_removed`` and ``threshold``
    as :class:`SpectralRepair` reports them for the dense ``(m, n)`` matrix (``n = min(m, n)`` singular values,
    the zero ones included), so that both agree on the same update."""

    P: torch.Tensor
    Q: torch.Tensor
    n: int
    kept: int
    energy_removed: float
    threshold: float | None = None


def _kept_factors(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor,
                                                                                                   torch.Tensor]:
    root = s[keep].sqrt()
    return u[:, keep] * root, root[:, None] * vh[keep]


def svd_restore_lowrank(p: torch.Tensor, q: torch.Tensor, percent: float, *,
                        compute_dtype: torch.dtype = torch.float32) -> LowRankRepair:
    """:func:`svd_restore` of the update ``Δ = p @ q``, on its factors: the top ``k = ceil(percent/100 · min(m, n))``
    directions go back to OLD; what stays is ``Σ_{i>k} σ_i u_i v_iᵀ`` (empty when ``k`` reaches ``Δ``'s rank)."""
    pct = check_percent(percent)
    m, n = int(p.shape[0]), int(q.shape[1])
    u, s, vh = factored_svd(p.to(compute_dtype), q.to(compute_dtype))
    n_dense = min(m, n)
    k = rank_of_percent(pct, n_dense)
    keep = torch.arange(s.numel()) >= k
    big_p, big_q = _kept_factors(u, s, vh, keep)
    return LowRankRepair(big_p, big_q, n_dense, n_dense - k, _energy(s, s[:k]))


def dg_hard_lowrank(p: torch.Tensor, q: torch.Tensor, *, compute_dtype: torch.dtype = torch.float32) -> LowRankRepair:
    """:func:`dg_hard` of the update ``Δ = p @ q``, on its factors: the threshold's median is taken over all
    ``min(m, n)`` singular values of Δ, its zero ones included (it is 0 when Δ's rank is under half of them,
    and then every non-zero direction is kept)."""
    m, n = int(p.shape[0]), int(q.shape[1])
    u, s, vh = factored_svd(p.to(compute_dtype), q.to(compute_dtype))
    n_dense = min(m, n)
    full = torch.cat([s.double(), s.new_zeros(max(0, n_dense - s.numel()), dtype=torch.float64)])
    tau = dg_threshold(full, (m, n))
    keep = s > tau
    big_p, big_q = _kept_factors(u, s, vh, keep)
    return LowRankRepair(big_p, big_q, n_dense, int(keep.sum()), _energy(s, s[~keep]), tau)


# --- layer selection ------------------------------------------------------------------------


@dataclass
class GroupStats:
    """Sums over the tensors of one layer block: ``‖Δ‖²``, ``‖θ_old‖²``, and against the oracle direction
    ``τ``: ``⟨Δ, τ⟩`` and ``‖τ‖²`` (zero when no oracle is read)."""

    sq_delta: float = 0.0
    sq_old: float = 0.0
    dot_oracle: float = 0.0
    sq_oracle: float = 0.0
    numel: int = 0

    def add(self, old: torch.Tensor, new: torch.Tensor, oracle_dir: torch.Tensor | None = None) -> None:
        """Add one tensor (or row block): ``oracle_dir`` is ``θ_oracle − θ_base`` of the same entries."""
        d = new.double() - old.double()
        self.sq_delta += float((d * d).sum())
        self.sq_old += float((old.double() ** 2).sum())
        self.numel += d.numel()
        if oracle_dir is not None:
            t = oracle_dir.double()
            self.dot_oracle += float((d * t).sum())
            self.sq_oracle += float((t * t).sum())

    @property
    def displacement(self) -> float:
        return math.sqrt(self.sq_delta)

    @property
    def cosine(self) -> float:
        """``cos(Δ_g, τ_g)``; NaN when either is zero."""
        den = math.sqrt(self.sq_delta) * math.sqrt(self.sq_oracle)
        return self.dot_oracle / den if den > 0 else float("nan")


def _layer_index(group: str) -> int | None:
    return int(group.split(".", 1)[1]) if group.startswith("layer.") else None


def select_groups(stats: Mapping[str, GroupStats], by: str, *, fraction: float = 0.25,
                  count: int | None = None) -> list[str]:
    """The layer blocks (``layer.N`` only) to roll back, in layer order.

    ``by``: ``first`` (the first layers, as 2508.16546's shallow reset), ``displacement`` (largest
    ``‖Δ_g‖₂``) or ``cosine`` (lowest ``cos(Δ_g, τ_g)``; blocks where it is undefined are never
    chosen). ``count`` blocks, or ``ceil(fraction · L)`` of the ``L`` layers; ties are broken by
    layer index, so the choice is deterministic.
    """
    if by not in SELECT:
        raise ValueError(f"`by` must be one of {', '.join(SELECT)}, got {by!r}")
    layers = sorted((g for g in stats if _layer_index(g) is not None), key=lambda g: _layer_index(g) or 0)
    if not layers:
        raise ValueError("no layer blocks (`layers.N`) among the tensors; roll back modules with a pattern instead")
    if count is None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"`fraction` must be in (0, 1], got {fraction!r}")
        count = max(1, math.ceil(round(fraction * len(layers), 9)))
    if count < 1:
        raise ValueError(f"`count` must be >= 1, got {count}")
    if by == "first":
        chosen = layers[:count]
    elif by == "displacement":
        chosen = sorted(layers, key=lambda g: (-stats[g].displacement, _layer_index(g) or 0))[:count]
    else:
        defined = [g for g in layers if not math.isnan(stats[g].cosine)]
        if not defined:
            raise ValueError("the cosine with the oracle is undefined for every layer (no update or no oracle "
                             "direction); select by displacement instead")
        chosen = sorted(defined, key=lambda g: (stats[g].cosine, _layer_index(g) or 0))[:count]
    return sorted(chosen, key=lambda g: _layer_index(g) or 0)
