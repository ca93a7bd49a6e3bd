"""Weight-merging maths on one tensor: uniform averaging, task arithmetic, TIES and DARE.

Every function takes the same tensor of several checkpoints of one model (and, for the
task-vector methods, of the base they were all trained from) and returns the merged tensor
in float32. :mod:`aclarena.consolidate.streaming` applies them to whole checkpoints,
tensor by tensor, so that no model is ever held in memory whole.

With task vectors ``τ_i = θ_i − θ_base``, or ``τ_i = θ_i − θ_(start of i)`` when ``starts`` names
the checkpoint each model's update was trained from (the stage updates ``θ_i − θ_(i−1)`` of one
sequential chain: with ``θ_i − θ_base`` the stage ends of a chain would count the first stage's
update K times, the second's K − 1 times, and so on):

* **uniform** (model soup; Wortsman et al., 2022, arXiv 2203.05482):
  ``θ = (1/K) Σ θ_i``, the same as task arithmetic with ``λ = 1/K``.
* **task arithmetic** (Ilharco et al., 2023, arXiv 2212.04089): ``θ = θ_base + λ Σ τ_i``.
* **TIES** (Yadav et al., 2023, arXiv 2306.01708): *trim* each ``τ_i`` to its ``density``
  share of entries (at least one) with the largest magnitude (the rest set to 0), *elect* a sign per entry,
  ``γ = sgn(Σ_i τ̂_i)`` (the sign of the larger total mass), then take the *disjoint mean*
  over the task vectors that agree with it, ``τ_m = Σ_{i∈A} τ̂_i / |A|`` with
  ``A = {i : sgn(τ̂_i) = γ ≠ 0}`` (0 where A is empty), and ``θ = θ_base + λ τ_m``.
  Trimming is per tensor, as in mergekit (the paper trims each whole task vector; per tensor
  keeps every layer's share of updates, which matters where layers move by different amounts).
* **DARE** (Yu et al., 2024, arXiv 2311.03099): drop each entry of each ``τ_i`` with
  probability ``p`` and rescale the survivors by ``1/(1 − p)`` (so the expectation is ``τ_i``),
  then add as task arithmetic: ``θ = θ_base + λ Σ τ̃_i``. The drop masks are drawn from a
  generator seeded by ``(seed, tensor name, checkpoint index)``, so a merge is repeatable and
  does not depend on the order tensors are read in.

The base's own tensor is returned unchanged where every task vector is zero.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import torch

METHODS = ("uniform", "task_arithmetic", "ties", "dare")


def _stack(tensors: Sequence[torch.Tensor], what: str) -> list[torch.Tensor]:
    if not tensors:
        raise ValueError(f"`{what}` needs at least one tensor")
    shape = tensors[0].shape
    for t in tensors[1:]:
        if t.shape != shape:
            raise ValueError(f"`{what}` tensors differ in shape: {tuple(shape)} and {tuple(t.shape)}")
    return [t.to(torch.float32) for t in tensors]


def _check_base(base: torch.Tensor, models: Sequence[torch.Tensor]) -> torch.Tensor:
    if base.shape != models[0].shape:
        raise ValueError(f"base has shape {tuple(base.shape)} but the models {tuple(models[0].shape)}")
    return base.to(torch.float32)


def _check_lambda(lam: float) -> None:
    if not math.isfinite(lam):
        raise ValueError(f"`lam` must be finite, got {lam!r}")


def uniform(models: Sequence[torch.Tensor]) -> torch.Tensor:
    """``(1/K) Σ θ_i``."""
    ts = _stack(models, "models")
    out = ts[0].clone()
    for t in ts[1:]:
        out.add_(t)
    return out.div_(len(ts))


def task_vectors(base: torch.Tensor, models: Sequence[torch.Tensor],
                 starts: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """``τ_i = θ_i − θ_base`` in float32, or ``θ_i − starts[i]`` when each model has its own start."""
    ts = _stack(models, "models")
    b = _check_base(base, ts)
    if starts is None:
        return [t - b for t in ts]
    if len(starts) != len(ts):
        raise ValueError(f"`starts` needs one tensor per model: {len(starts)} for {len(ts)} models")
    return [t - _check_base(s, ts) for t, s in zip(ts, starts, strict=True)]


def task_arithmetic(base: torch.Tensor, models: Sequence[torch.Tensor], lam: float = 1.0, *,
                    starts: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
    """``θ_base + λ Σ τ_i``."""
    _check_lambda(lam)
    b = _check_base(base, _stack(models, "models"))
    total = torch.zeros_like(b)
    for tau in task_vectors(base, models, starts):
        total.add_(tau)
    return b + lam * total


def trim(tau: torch.Tensor, density: float) -> torch.Tensor:
    """Keep the ``max(1, floor(density · n))`` entries of largest magnitude (and ties with the smallest kept).

    The count follows mergekit's ``magnitude`` sparsification, so both trim alike.
    """
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"`density` must be in [0, 1], got {density!r}")
    n = tau.numel()
    if density >= 1.0 or n == 0:
        return tau.clone()
    if density <= 0.0:
        return torch.zeros_like(tau)
    k = max(1, int(density * n))
    if k >= n:
        return tau.clone()
    mag = tau.abs()
    # the k-th largest magnitude is the (n - k + 1)-th smallest
    threshold = torch.kthvalue(mag.flatten(), n - k + 1).values
    return tau * (mag >= threshold)


def elect_sign(trimmed: Sequence[torch.Tensor]) -> torch.Tensor:
    """``sgn(Σ_i τ̂_i)``: +1, −1 or 0 per entry."""
    total = torch.zeros_like(trimmed[0])
    for t in trimmed:
        total.add_(t)
    return torch.sign(total)


def disjoint_mean(trimmed: Sequence[torch.Tensor], sign: torch.Tensor) -> torch.Tensor:
    """Mean of the entries whose sign agrees with ``sign`` (non-zero), 0 where none does."""
    total = torch.zeros_like(sign)
    count = torch.zeros_like(sign)
    for t in trimmed:
        agree = (t * sign) > 0  # same sign, both non-zero
        total.addcmul_(t, agree)
        count.add_(agree)
    return total / count.clamp(min=1.0)


def ties(base: torch.Tensor, models: Sequence[torch.Tensor], *, density: float = 0.2, lam: float = 1.0,
         starts: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
    """TIES-merging: trim to ``density``, elect signs, disjoint mean, ``θ_base + λ τ_m``."""
    _check_lambda(lam)
    b = _check_base(base, _stack(models, "models"))
    trimmed = [trim(tau, density) for tau in task_vectors(base, models, starts)]
    merged = disjoint_mean(trimmed, elect_sign(trimmed))
    return b + lam * merged


def dare_seed(seed: int, tensor: str, index: int) -> int:
    """The generator seed of DARE's drop mask for ``tensor`` of checkpoint ``index``."""
    h = hashlib.sha256(f"{seed}|{tensor}|{index}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def dare_mask(shape: Sequence[int], p: float, seed: int) -> torch.Tensor:
    """Boolean keep-mask: each entry kept with probability ``1 − p`` (CPU generator, repeatable)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.rand(tuple(shape), generator=g) >= p


def dare(
    base: torch.Tensor,
    models: Sequence[torch.Tensor],
    *,
    p: float = 0.9,
    lam: float = 1.0,
    seed: int = 0,
    tensor: str = "",
    starts: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """DARE: drop each task-vector entry with probability ``p``, rescale by ``1/(1 − p)``, add."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"`p` (drop rate) must be in [0, 1), got {p!r}")
    _check_lambda(lam)
    b = _check_base(base, _stack(models, "models"))
    total = torch.zeros_like(b)
    for i, tau in enumerate(task_vectors(base, models, starts)):
        keep = dare_mask(tau.shape, p, dare_seed(seed, tensor, i))
        total.addcmul_(tau, keep, value=1.0 / (1.0 - p))
    return b + lam * total
