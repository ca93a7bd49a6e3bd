"""Why one item flipped: where two checkpoints' paths part, and which decisions carry the outcome.

An item *flipped* when an earlier checkpoint E solved it and a later one L fails it (or the
reverse, the control). The measures here follow the cross-sampling test of "Sparse but
Critical" (Meng et al., ICLR 2026, arXiv 2603.22446), aimed at forgetting instead of at RL's
gains:

* **localization** — E's trajectory of the item is scored teacher-forced under L; the
  *divergence point* is the first position where L's top-1 token differs from E's token
  (:func:`first_divergence`), and the first position where L's log-prob of E's token falls
  below a threshold (:func:`first_below`). There: E's entropy and its percentile among the
  trajectory's positions (:func:`percentile_rank`), and whether it lies in E's top ``q``
  entropy positions of that trajectory (:func:`top_fraction`; q = 0.06 is the ACLArena
  study's share, arXiv 2609.23989);
* **chance** — if divergences fell on positions at random, item ``i``'s divergence would be
  in its top set with probability ``p_i = |top_i| / n_i``; the number of items whose
  divergence is in the top set is then Poisson-binomial. :func:`chance_share` gives the
  observed share with a Wilson interval (Wilson 1927), the share expected by chance with the
  central interval of that Poisson-binomial, and the exact one-sided p-value;
* **the swap test** — L regenerates the item greedily, and at positions where E and L
  disagree (different top-1) E's token is let through at the top ``b%`` positions ranked by
  ``KL(p_E ‖ p_L)`` (:func:`swap_threshold`), against a control that lets E's token through
  at the same number of disagreeing positions chosen at random (:func:`random_ordinals`).
  The reverse direction lets L's tokens into E's generation. :func:`budget_count` turns a
  budget in percent of a trajectory's tokens into a number of positions.

Everything is pure maths over arrays (and, for one decoding step, logits); no model, store
or tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

DEFAULT_BUDGETS: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
DEFAULT_TOP = 0.06


def _check_fraction(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and 0 < value < 1):
        raise ValueError(f"`{name}` must be in (0, 1), got {value!r}")


def first_divergence(tokens: np.ndarray, other_top1: np.ndarray, valid: np.ndarray | None = None) -> int:
    """The first index where ``other_top1`` differs from ``tokens`` (-1: they never differ).

    Positions where ``valid`` is False (non-finite scores) are skipped.
    """
    tokens, other_top1 = np.asarray(tokens), np.asarray(other_top1)
    if tokens.shape != other_top1.shape or tokens.ndim != 1:
        raise ValueError(f"`tokens` and `other_top1` must be 1-d of one length, got {tokens.shape} and {other_top1.shape}")
    differ = tokens != other_top1
    if valid is not None:
        differ &= np.asarray(valid, dtype=bool)
    hit = np.flatnonzero(differ)
    return int(hit[0]) if len(hit) else -1


def first_below(logprob: np.ndarray, threshold: float) -> int:
    """The first index where ``logprob`` is below ``threshold`` (NaN never is; -1: none)."""
    if not (isinstance(threshold, int | float) and math.isfinite(threshold) and threshold <= 0):
        raise ValueError(f"`threshold` must be a log-prob <= 0, got {threshold!r}")
    lp = np.asarray(logprob, dtype=np.float64)
    hit = np.flatnonzero(lp < threshold)
    return int(hit[0]) if len(hit) else -1


def percentile_rank(values: np.ndarray, index: int) -> float:
    """The share (0-100) of finite ``values`` that are <= ``values[index]`` (100: the largest)."""
    v = np.asarray(values, dtype=np.float64)
    if not 0 <= index < len(v):
        raise ValueError(f"`index` {index} is outside 0..{len(v) - 1}")
    finite = v[np.isfinite(v)]
    if not math.isfinite(v[index]) or len(finite) == 0:
        return float("nan")
    return float(100.0 * np.count_nonzero(finite <= v[index]) / len(finite))


def top_fraction(values: np.ndarray, q: float = DEFAULT_TOP) -> np.ndarray:
    """A mask of the ``ceil(q * n)`` largest finite ``values`` (ties broken by position, earlier first)."""
    _check_fraction("q", q)
    v = np.asarray(values, dtype=np.float64)
    mask = np.zeros(len(v), dtype=bool)
    finite = np.flatnonzero(np.isfinite(v))
    if len(finite) == 0:
        return mask
    k = math.ceil(q * len(finite))
    order = finite[np.lexsort((finite, -v[finite]))]
    mask[order[:k]] = True
    return mask


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n`` (NaN, NaN when ``n`` is 0)."""
    if n <= 0:
        return float("nan"), float("nan")
    if not 0 <= k <= n:
        raise ValueError(f"`k` must be in 0..{n}, got {k}")
    _check_fraction("level", level)
    z = _z(level)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def _z(level: float) -> float:
    """The standard normal quantile of ``(1 + level) / 2`` (Acklam's rational approximation, ~1e-9)."""
    p = (1 + level) / 2
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    if p > 1 - 0.02425:
        r = math.sqrt(-2 * math.log(1 - p))
        return -(((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / \
            ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1)
    r = p - 0.5
    s = r * r
    return (((((a[0] * s + a[1]) * s + a[2]) * s + a[3]) * s + a[4]) * s + a[5]) * r / \
        (((((b[0] * s + b[1]) * s + b[2]) * s + b[3]) * s + b[4]) * s + 1)


def poisson_binomial(p: Sequence[float]) -> np.ndarray:
    """The distribution of the number of successes of independent Bernoulli(p_i) trials (exact)."""
    pmf = np.zeros(len(p) + 1, dtype=np.float64)
    pmf[0] = 1.0
    for i, pi in enumerate(p):
        if not 0 <= pi <= 1:
            raise ValueError(f"probabilities must be in [0, 1], got {pi!r}")
        pmf[1:i + 2] = pmf[1:i + 2] * (1 - pi) + pmf[0:i + 1] * pi
        pmf[0] *= 1 - pi
    return pmf


@dataclass(frozen=True)
class ChanceShare:
    """How many divergences fell in the top-entropy set, against chance.

    ``share`` is observed (``hits / n``) with its Wilson interval; ``chance`` is the share
    expected if divergences fell on random positions of each trajectory, with the central
    ``level`` interval of the chance count (over ``n``); ``p_value`` is P(chance count >= hits).
    """

    n: int
    hits: int
    share: float
    share_low: float
    share_high: float
    chance: float
    chance_low: float
    chance_high: float
    p_value: float
    level: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def chance_share(hits: np.ndarray, p: np.ndarray, level: float = 0.95) -> ChanceShare:
    """``hits[i]``: item ``i``'s divergence lies in its top set; ``p[i]``: the chance it would."""
    h = np.asarray(hits, dtype=bool)
    pr = np.asarray(p, dtype=np.float64)
    if h.shape != pr.shape or h.ndim != 1:
        raise ValueError(f"`hits` and `p` must be 1-d of one length, got {h.shape} and {pr.shape}")
    _check_fraction("level", level)
    n, k = len(h), int(h.sum())
    if n == 0:
        nan = float("nan")
        return ChanceShare(0, 0, nan, nan, nan, nan, nan, nan, nan, level)
    lo, hi = wilson(k, n, level)
    pmf = poisson_binomial(pr.tolist())
    cdf = np.cumsum(pmf)
    tail = (1 - level) / 2
    c_lo = int(np.searchsorted(cdf, tail - 1e-12))
    c_hi = int(np.searchsorted(cdf, 1 - tail - 1e-12))
    p_value = float(min(1.0, pmf[k:].sum()))
    return ChanceShare(n=n, hits=k, share=k / n, share_low=lo, share_high=hi, chance=float(pr.mean()),
                       chance_low=c_lo / n, chance_high=min(c_hi, n) / n, p_value=p_value, level=level)


def budget_count(budget_pct: float, n_tokens: int) -> int:
    """Positions a budget of ``budget_pct`` percent of ``n_tokens`` allows (at least 1 when > 0)."""
    if not (isinstance(budget_pct, int | float) and 0 < budget_pct <= 100):
        raise ValueError(f"a budget must be a percentage in (0, 100], got {budget_pct!r}")
    if n_tokens < 0:
        raise ValueError(f"`n_tokens` must be >= 0, got {n_tokens}")
    return min(n_tokens, max(1, math.ceil(budget_pct * n_tokens / 100 - 1e-9))) if n_tokens else 0


def swap_threshold(kl: np.ndarray, disagree: np.ndarray, k: int) -> float:
    """The KL of the ``k``-th most divergent disagreeing position (+inf when ``k`` is 0 or there are none).

    With ``k`` at least the number of disagreeing positions, every one of them qualifies.
    """
    v = np.asarray(kl, dtype=np.float64)[np.asarray(disagree, dtype=bool)]
    v = v[np.isfinite(v)]
    if k <= 0 or len(v) == 0:
        return float("inf")
    return float(np.sort(v)[::-1][min(k, len(v)) - 1])


def random_ordinals(n_candidates: int, k: int, rng: np.random.Generator) -> frozenset[int]:
    """``min(k, n_candidates)`` distinct ordinals of ``0..n_candidates-1`` drawn uniformly."""
    if n_candidates <= 0 or k <= 0:
        return frozenset()
    return frozenset(int(i) for i in rng.choice(n_candidates, size=min(k, n_candidates), replace=False))


def swap_notes(direction: str, budgets: Sequence[float], swaps_kl: np.ndarray, swaps_random: np.ndarray) -> list[str]:
    """What a reader of a swap-test curve must know, one line each: budgets that all come to at most
    one swap on every item (their points repeat one measurement), and rows where the random control
    made fewer swaps than the top-KL arm (the drawn disagreements never came in the live generation)."""
    kl, rnd = np.asarray(swaps_kl), np.asarray(swaps_random)
    notes: list[str] = []
    if kl.size == 0:
        return notes
    one = [f"{b:g}%" for j, b in enumerate(budgets) if (kl[:, j] <= 1).all()]
    if len(one) > 1:
        notes.append(f"{direction}: budgets {', '.join(one)} each come to at most one swap on every item, so their "
                     "points repeat one measurement")
    short = int((rnd < kl).sum())
    if short:
        notes.append(f"{direction}: the random control made fewer swaps than the top-KL arm in {short} of {kl.size} "
                     "(item, budget) rows: the disagreements drawn never came in the live generation")
    return notes


def step_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoding step, rows = sequences: ``(top-1 of p, top-1 of q, KL(p ‖ q))``.

    Logits ``[n, V]`` in any float dtype; KL in float32 (float64 stays float64), exact over
    the full vocabulary. The lockstep generation passes E's logits as ``p`` and L's as ``q``.
    """
    if p_logits.shape != q_logits.shape or p_logits.ndim != 2:
        raise ValueError(f"logits must be [n, V] of one shape, got {tuple(p_logits.shape)} and "
                         f"{tuple(q_logits.shape)}")
    dt = torch.float64 if torch.float64 in (p_logits.dtype, q_logits.dtype) else torch.float32
    lp = torch.log_softmax(p_logits.to(dt), dim=-1)
    lq = torch.log_softmax(q_logits.to(dt), dim=-1)
    kl = (lp.exp() * (lp - lq)).sum(-1).clamp_min(0)
    return p_logits.argmax(-1), q_logits.argmax(-1), kl


def recovery_curve(outcomes: np.ndarray, level: float = 0.95) -> dict[str, list[Any]]:
    """Share of items (rows) with outcome 1 per budget (columns), with Wilson intervals.

    Entries < 0 (not run) are left out of their column.
    """
    o = np.asarray(outcomes)
    if o.ndim != 2:
        raise ValueError(f"`outcomes` must be items x budgets, got shape {o.shape}")
    share, low, high, n = [], [], [], []
    for j in range(o.shape[1]):
        col = o[:, j]
        col = col[col >= 0]
        k, m = int((col > 0).sum()), len(col)
        lo, hi = wilson(k, m, level)
        share.append(k / m if m else float("nan"))
        low.append(lo)
        high.append(hi)
        n.append(m)
    return {"share": share, "low": low, "high": high, "n": n}
