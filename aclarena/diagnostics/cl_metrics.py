"""Continual-learning metrics over a capability matrix (pure numpy).

The accuracy matrix ``R`` has one row per curriculum stage and one column per task, in
stage order: ``R[i, j]`` is the score on task ``j``'s in-domain suite after stage ``i``
(task ``j`` is the one stage ``j`` trains). ``b[j]`` is the base model's score on task
``j`` (before any stage). ``T`` is the number of stages. Definitions:

* average accuracy ``ACC = 1/T sum_j R[T-1, j]`` (Lopez-Paz & Ranzato, 2017, GEM);
* backward transfer ``BWT = 1/(T-1) sum_{j<T-1} (R[T-1, j] - R[j, j])`` (GEM);
  negative values are forgetting;
* forward transfer ``FWT = 1/(T-1) sum_{j>0} (R[j-1, j] - b[j])`` (GEM);
* forgetting, max variant (Chaudhry et al., 2018, RWalk):
  ``f_j = max_{l<T-1} R[l, j] - R[T-1, j]`` for ``j < T-1``, averaged: how far each task
  fell from its best score at any earlier stage;
* forgetting, first-minus-last variant (e.g. Avalanche's ``StreamForgetting``):
  ``f_j = R[j, j] - R[T-1, j]``: score right after learning ``j`` minus final score,
  i.e. ``-BWT`` per task. The two differ when a later stage lifts a task above its
  just-learned score before it is lost;
* oracle-normalised retention ``R[T-1, j] / oracle_j`` (the study's comparison with
  single-task oracles);
* average incremental accuracy ``1/T sum_k (1/(k+1) sum_{j<=k} R[k, j])`` (Rebuffi et
  al., 2017, iCaRL);
* sample-wise forgetting and backward transfer: between two evaluations of the same
  items, the share of items that go correct -> wrong, and wrong -> correct (item-level
  forgetting events, after Toneva et al., 2019);
* chance-adjusted sample-wise forgetting and backward transfer, for suites a guess can
  solve with probability ``c`` (``general``: four options, ``c = 1/4``), after Harmon et al.,
  2025, "Mapping Post-Training Forgetting in Language Models at Scale" (arXiv 2510.17776):
  flips that guessing alone makes are subtracted. Under the paper's response model (on each
  item a model either knows the answer or guesses uniformly, guesses independent between the
  two evaluations), with ``p10``, ``p01``, ``p00`` the shares of items correct -> wrong,
  wrong -> correct and wrong both times, the share that was *known* before and not after is
  ``F_true = (p10 (1 − c) − c p00) / (1 − c)²`` and the reverse
  ``BT_true = (p01 (1 − c) − c p00) / (1 − c)²`` (:func:`chance_adjusted`; derivation in
  docs/cl-metrics.md). With ``c = 0`` they are the plain shares. The search corpus held the
  paper's abstract and summaries, not its equation; this is the estimator its response model
  gives, and it can come out below 0 on a small sample (reported as is). It is NaN where either
  checkpoint scores clearly below guessing (one-sided exact binomial p < 0.025 against ``c``):
  such a checkpoint does not pick among the options (its replies miss the format), so the
  know-or-guess model does not describe it.

Missing cells are NaN and make the metrics that need them NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# What each scalar of CLReport.summary() measures, with its source (shown by the CLI, the dashboard, export).
METRIC_LABELS = {
    "average_accuracy": "average accuracy (GEM ACC)",
    "backward_transfer": "backward transfer (GEM BWT)",
    "forward_transfer": "forward transfer (GEM FWT)",
    "forgetting_max": "forgetting, max earlier - final (Chaudhry et al.)",
    "forgetting_first_last": "forgetting, just-learned - final (first-minus-last)",
    "retention_vs_oracle": "retention, final / single-task oracle",
    "average_incremental_accuracy": "average incremental accuracy (iCaRL)",
    "sample_forgetting": "sample-wise forgetting (correct -> wrong)",
    "sample_backward_transfer": "sample-wise backward transfer (wrong -> correct)",
}


def _matrix(R: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 2 or R.shape[0] != R.shape[1] or R.shape[0] == 0:
        raise ValueError(f"`R` must be a non-empty square matrix (stages x tasks), got shape {R.shape}")
    return R


def _vector(x: np.ndarray | Sequence[float], n: int, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.shape != (n,):
        raise ValueError(f"`{name}` must have one value per task ({n}), got shape {x.shape}")
    return x


def average_accuracy(R: np.ndarray | Sequence[Sequence[float]]) -> float:
    """Mean final score over all tasks (GEM's ACC)."""
    R = _matrix(R)
    return float(R[-1].mean())


def backward_transfer(R: np.ndarray | Sequence[Sequence[float]]) -> float:
    """GEM's BWT: mean of final minus just-learned score over every task but the last (NaN if T = 1)."""
    R = _matrix(R)
    T = R.shape[0]
    if T < 2:
        return float("nan")
    return float(np.mean([R[-1, j] - R[j, j] for j in range(T - 1)]))


def forward_transfer(R: np.ndarray | Sequence[Sequence[float]], base: np.ndarray | Sequence[float]) -> float:
    """GEM's FWT: mean over tasks j > 0 of the score before stage j minus the base score (NaN if T = 1)."""
    R = _matrix(R)
    T = R.shape[0]
    b = _vector(base, T, "base")
    if T < 2:
        return float("nan")
    return float(np.mean([R[j - 1, j] - b[j] for j in range(1, T)]))


def forgetting_max(R: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Per task ``j < T-1``: best score at any earlier stage minus the final score (Chaudhry et al.)."""
    R = _matrix(R)
    T = R.shape[0]
    return np.array([R[: T - 1, j].max() - R[-1, j] for j in range(T - 1)], dtype=np.float64)


def forgetting_first_last(R: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Per task ``j < T-1``: score right after stage ``j`` minus the final score."""
    R = _matrix(R)
    T = R.shape[0]
    return np.array([R[j, j] - R[-1, j] for j in range(T - 1)], dtype=np.float64)


def retention(final: np.ndarray | Sequence[float], oracle: np.ndarray | Sequence[float]) -> np.ndarray:
    """Final score over single-task oracle score, per task (NaN where the oracle scores 0 or is missing)."""
    final = np.asarray(final, dtype=np.float64)
    oracle = _vector(oracle, final.shape[0], "oracle")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(oracle > 0, final / np.where(oracle > 0, oracle, 1.0), np.nan)


def average_incremental_accuracy(R: np.ndarray | Sequence[Sequence[float]]) -> float:
    """Mean over stages k of the mean score on tasks 0..k after stage k (iCaRL)."""
    R = _matrix(R)
    return float(np.mean([R[k, : k + 1].mean() for k in range(R.shape[0])]))


def peak_drop(series: np.ndarray | Sequence[float]) -> float:
    """Along a chain of checkpoints: best score before the last one minus the last one (NaN if < 2)."""
    s = np.asarray(series, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"`series` must be 1-d, got shape {s.shape}")
    if s.shape[0] < 2:
        return float("nan")
    return float(s[:-1].max() - s[-1])


@dataclass(frozen=True, slots=True)
class SampleTransitions:
    """Item-level changes between two evaluations of the same items."""

    n_items: int
    forgotten: int  # correct -> wrong
    gained: int  # wrong -> correct
    correct_before: int

    @property
    def forgetting(self) -> float:
        """Share of items going correct -> wrong."""
        return self.forgotten / self.n_items if self.n_items else float("nan")

    @property
    def backward_transfer(self) -> float:
        """Share of items going wrong -> correct."""
        return self.gained / self.n_items if self.n_items else float("nan")

    @property
    def wrong_both(self) -> int:
        """Items wrong before and after."""
        return self.n_items - self.correct_before - self.gained

    def chance_adjusted(self, chance: float) -> tuple[float, float]:
        """(F_true, BT_true): :func:`chance_adjusted` of these counts."""
        return chance_adjusted(self.forgotten, self.gained, self.wrong_both, self.n_items, chance)

    def harmon_forgetting(self, chance: float) -> float:
        """The estimator of arXiv 2510.17776's public code: :func:`harmon_forgetting` of these counts."""
        n = self.n_items
        if not n:
            return float("nan")
        return harmon_forgetting(self.forgotten / n, self.correct_before / n,
                                 (self.correct_before - self.forgotten + self.gained) / n, chance)

    @property
    def forgetting_of_correct(self) -> float:
        """Share of the items correct before that are wrong after."""
        return self.forgotten / self.correct_before if self.correct_before else float("nan")


def _below_chance(correct: int, n: int, chance: float, alpha: float = 0.025) -> bool:
    """Whether ``correct`` of ``n`` is below guessing at one-sided exact level ``alpha``: ``P(X <= correct) < alpha``
    for ``X ~ Binomial(n, chance)``."""
    from aclarena.diagnostics.binomial import binomial_tail

    return 1.0 - binomial_tail(correct + 1, n, chance) < alpha if correct < n else False


def chance_adjusted(forgotten: int, gained: int, wrong_both: int, n_items: int, chance: float) -> tuple[float, float]:
    """Chance-adjusted sample-wise forgetting and backward transfer, as shares of the ``n_items`` items.

    ``F_true = (p10 (1 − c) − c p00) / (1 − c)²`` and ``BT_true = (p01 (1 − c) − c p00) / (1 − c)²`` with
    ``p10 = forgotten / n``, ``p01 = gained / n``, ``p00 = wrong_both / n`` and ``c = chance`` (module docstring);
    NaN when either checkpoint scores clearly below ``c``.
    """
    if not 0.0 <= chance < 1.0:
        raise ValueError(f"`chance` must be in [0, 1), got {chance!r}")
    if n_items <= 0:
        return float("nan"), float("nan")
    if min(forgotten, gained, wrong_both) < 0 or forgotten + gained + wrong_both > n_items:
        raise ValueError(f"counts {forgotten}, {gained}, {wrong_both} do not fit in {n_items} items")
    if chance > 0 and (_below_chance(n_items - gained - wrong_both, n_items, chance)
                       or _below_chance(n_items - forgotten - wrong_both, n_items, chance)):
        return float("nan"), float("nan")
    p10, p01, p00 = forgotten / n_items, gained / n_items, wrong_both / n_items
    q = 1.0 - chance
    return (p10 * q - chance * p00) / q**2, (p01 * q - chance * p00) / q**2


def harmon_forgetting(p10: float, acc_before: float, acc_after: float, chance: float) -> float:
    """Chance-corrected forgetting as the public code of Harmon et al. (arXiv 2510.17776) computes it:
    ``max(0, p10 − (1 − acc_before)(1 − acc_after) / (k − 1))`` with ``k = 1 / chance`` options.

    Not aclarena's :func:`chance_adjusted` (``F_true``, the know-or-guess model's unbiased estimate, unclipped):
    the two give different numbers on the same counts, so each is reported under its own name
    (``sample_forgetting_chance_adjusted`` for aclarena's, ``sample_forgetting_2510_17776`` for this one) and
    must never be compared with the other. NaN for ``chance`` 0 (the formula needs ``k`` options).
    """
    if not 0.0 < chance < 1.0:
        return float("nan")
    k = 1.0 / chance
    return max(0.0, p10 - (1.0 - acc_before) * (1.0 - acc_after) / (k - 1.0))


def sample_transitions(before: np.ndarray | Sequence[float], after: np.ndarray | Sequence[float],
                       threshold: float = 0.5) -> SampleTransitions:
    """Count correct -> wrong and wrong -> correct items (an item is correct when its score > ``threshold``)."""
    a = np.asarray(before, dtype=np.float64).ravel()
    b = np.asarray(after, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"`before` and `after` must score the same items, got {a.shape} and {b.shape}")
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"`threshold` must be in [0, 1), got {threshold!r}")
    ca, cb = a > threshold, b > threshold
    return SampleTransitions(n_items=int(a.size), forgotten=int(np.sum(ca & ~cb)), gained=int(np.sum(~ca & cb)),
                             correct_before=int(ca.sum()))


@dataclass(frozen=True)
class CLReport:
    """Every metric of a stage-ordered capability matrix; ``tasks`` names the columns."""

    tasks: list[str]
    R: np.ndarray
    base: np.ndarray | None
    oracle: np.ndarray | None
    average_accuracy: float
    backward_transfer: float
    forward_transfer: float
    forgetting_max: np.ndarray
    forgetting_first_last: np.ndarray
    retention: np.ndarray | None
    average_incremental_accuracy: float
    sample_forgetting: np.ndarray | None = None  # per task j < T-1: stage j -> final
    sample_backward_transfer: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        """The scalar metrics, labelled."""

        def mean(x: np.ndarray | None) -> float:
            return float(np.mean(x)) if x is not None and x.size else float("nan")

        def mean_known(x: np.ndarray | None) -> float:  # tasks without an oracle are left out
            return float(np.nanmean(x)) if x is not None and np.isfinite(x).any() else float("nan")

        return {
            "average_accuracy": self.average_accuracy,
            "backward_transfer": self.backward_transfer,
            "forward_transfer": self.forward_transfer,
            "forgetting_max": mean(self.forgetting_max),
            "forgetting_first_last": mean(self.forgetting_first_last),
            "retention_vs_oracle": mean_known(self.retention),
            "average_incremental_accuracy": self.average_incremental_accuracy,
            "sample_forgetting": mean(self.sample_forgetting),
            "sample_backward_transfer": mean(self.sample_backward_transfer),
        }


def cl_report(
    R: np.ndarray | Sequence[Sequence[float]],
    tasks: Sequence[str],
    *,
    base: np.ndarray | Sequence[float] | None = None,
    oracle: np.ndarray | Sequence[float] | None = None,
    items: Sequence[Sequence[np.ndarray | None]] | None = None,
) -> CLReport:
    """All metrics at once. ``items[i][j]``: per-item scores of task ``j`` after stage ``i`` (or None)."""
    R = _matrix(R)
    T = R.shape[0]
    if len(tasks) != T:
        raise ValueError(f"`tasks` must name the {T} tasks, got {len(tasks)}")
    b = _vector(base, T, "base") if base is not None else None
    o = _vector(oracle, T, "oracle") if oracle is not None else None
    sf = sb = None
    if items is not None:
        if len(items) != T or any(len(row) != T for row in items):
            raise ValueError(f"`items` must be {T} x {T} (stages x tasks)")
        sf_list, sb_list = [], []
        for j in range(T - 1):
            before, after = items[j][j], items[T - 1][j]
            if before is None or after is None or np.asarray(before).size != np.asarray(after).size:
                sf_list.append(np.nan)
                sb_list.append(np.nan)
                continue
            tr = sample_transitions(before, after)
            sf_list.append(tr.forgetting)
            sb_list.append(tr.backward_transfer)
        sf, sb = np.array(sf_list), np.array(sb_list)
    return CLReport(
        tasks=list(tasks),
        R=R,
        base=b,
        oracle=o,
        average_accuracy=average_accuracy(R),
        backward_transfer=backward_transfer(R),
        forward_transfer=forward_transfer(R, b) if b is not None else float("nan"),
        forgetting_max=forgetting_max(R),
        forgetting_first_last=forgetting_first_last(R),
        retention=retention(R[-1], o) if o is not None else None,
        average_incremental_accuracy=average_incremental_accuracy(R),
        sample_forgetting=sf,
        sample_backward_transfer=sb,
    )
