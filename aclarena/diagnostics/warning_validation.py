"""Held-out validation of the early warning: thresholds fitted on some seeds, judged on the others.

Each monitored stage of each seed gives, per domain, a :class:`WarningSeries`: the steps where
both the predictors (token drift at high-entropy positions, flip rate, whole-sequence KL, forward
KL to the stage start on the earlier tasks or on the current task's prompts, the training loss)
and the benchmark were measured, the measured drop at each (accuracy at the stage start minus
accuracy at the step), and the step of the first significant drop (the ground truth; the caller
decides it, e.g. with :func:`aclarena.diagnostics.early_warning.first_drop`), or None.

A predictor with threshold ``c`` warns at the first step after the stage start (the first step,
the baseline, never warns, as in the monitor) where its value is ``>= c``.
:func:`fit_threshold` picks ``c`` among the values seen on the fit seeds, maximising timely
detections (a warning at or before the drop) minus false alarms (a warning on a series with no
drop) minus misses (a drop with no warning at or before it); ties go to the larger total lead, then to
the larger threshold.
:func:`validate` reports on the held-out seeds only: lead times (drop step - warning step),
detections, false alarms and misses, and, over every series of every seed, the R² of a least
squares line from the predictor's value to the measured drop (how much of the drop's variance
the predictor explains, whether or not it warns in time).

The predictors and the benchmark are measured on their own schedules (the monitor every N
steps, the ground truth every M). :func:`as_of` puts a predictor on the benchmark's steps
causally: at each benchmark step, the predictor's latest value at or before it (what a
monitor watching the run would have known then), NaN before its first value.

Pure functions over numbers: no torch, h5py or transformers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class WarningSeries:
    """One (seed, stage, domain): predictor values and measured drops at the same steps."""

    seed: int
    domain: str
    steps: Sequence[int]
    predictors: Mapping[str, Sequence[float]]
    drop: Sequence[float]
    drop_step: int | None

    def __post_init__(self) -> None:
        n = len(self.steps)
        if list(self.steps) != sorted(self.steps):
            raise ValueError(f"`steps` of seed {self.seed}, {self.domain} must be increasing")
        if len(self.drop) != n:
            raise ValueError(f"`drop` has {len(self.drop)} values for {n} steps (seed {self.seed}, {self.domain})")
        for name, xs in self.predictors.items():
            if len(xs) != n:
                raise ValueError(f"predictor {name!r} has {len(xs)} values for {n} steps (seed {self.seed}, "
                                 f"{self.domain})")

    def warn_step(self, predictor: str, threshold: float | None) -> int | None:
        """The first step after the stage start where ``predictor >= threshold`` (None: never, or no threshold).

        The first step is the baseline and never warns, as in the monitor (docs/monitor.md): a
        threshold at or below the starting value would otherwise "warn" before any training.
        """
        if threshold is None or predictor not in self.predictors:
            return None
        pairs = list(zip(self.steps, self.predictors[predictor], strict=True))[1:]
        for s, x in pairs:
            if x is not None and math.isfinite(x) and x >= threshold:
                return int(s)
        return None


@dataclass(frozen=True)
class PredictorReport:
    """How one predictor did on the held-out seeds (``threshold`` fitted on the others)."""

    predictor: str
    threshold: float | None
    leads: list[int] = field(default_factory=list)
    detected: int = 0
    false_alarms: int = 0
    misses: int = 0
    r2: float | None = None

    @property
    def lead_mean(self) -> float | None:
        return float(np.mean(self.leads)) if self.leads else None

    def to_dict(self) -> dict[str, object]:
        return {"predictor": self.predictor, "threshold": self.threshold, "leads": list(self.leads),
                "lead_mean": self.lead_mean, "detected": self.detected, "false_alarms": self.false_alarms,
                "misses": self.misses, "r2": self.r2}


def outcomes(series: Sequence[WarningSeries], predictor: str, threshold: float | None) -> tuple[list[int], int, int, int]:
    """(leads of timely warnings, detections, false alarms, misses) of a threshold on ``series``."""
    leads: list[int] = []
    false_alarms = misses = 0
    for s in series:
        w = s.warn_step(predictor, threshold)
        if s.drop_step is None:
            false_alarms += w is not None
        elif w is not None and w <= s.drop_step:
            leads.append(int(s.drop_step) - w)
        else:
            misses += 1
    return leads, len(leads), false_alarms, misses


def as_of(steps: Sequence[float], values: Sequence[float], at: Sequence[float]) -> list[float]:
    """At each step of ``at``, the latest finite value of ``values`` (measured at ``steps``) at or before it.

    NaN where no finite value was measured yet. ``steps`` need not be sorted; a step measured twice keeps
    its last finite value.
    """
    if len(steps) != len(values):
        raise ValueError(f"`steps` has {len(steps)} entries for {len(values)} values")
    known: dict[float, float] = {}
    for s, v in zip(steps, values, strict=True):
        if v is not None and math.isfinite(float(v)):
            known[float(s)] = float(v)
    order = sorted(known)
    keys = np.asarray(order, dtype=np.float64)
    out: list[float] = []
    for t in at:
        i = int(np.searchsorted(keys, float(t), side="right")) - 1
        out.append(known[order[i]] if i >= 0 else math.nan)
    return out


def fit_threshold(series: Sequence[WarningSeries], predictor: str) -> float | None:
    """The threshold that does best on ``series`` (see the module docstring); None when no series has
    a drop to learn from or the predictor has no finite value."""
    if not any(s.drop_step is not None for s in series):
        return None
    values = sorted({float(x) for s in series for x in s.predictors.get(predictor, ())
                     if x is not None and math.isfinite(x)}, reverse=True)
    best, best_score = None, (-math.inf, -math.inf)
    for c in values:  # descending: on a full tie the larger threshold is kept
        leads, det, fa, miss = outcomes(series, predictor, c)
        score = (det - fa - miss, sum(leads))  # then the earlier warnings
        if score > best_score:
            best, best_score = c, score
    return best


def r_squared(x: Sequence[float], y: Sequence[float]) -> float | None:
    """R² of the least-squares line y ~ a + b x over the finite pairs (None below 3 pairs or constant x or y)."""
    pairs = [(float(a), float(b)) for a, b in zip(x, y, strict=True)
             if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 3:
        return None
    xa, ya = np.array(pairs, dtype=np.float64).T
    if np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return None
    r = np.corrcoef(xa, ya)[0, 1]
    return float(r * r)


def validate(series: Sequence[WarningSeries], predictors: Sequence[str], fit_seeds: Sequence[int]) -> list[PredictorReport]:
    """Fit each predictor's threshold on ``fit_seeds`` and report on every other seed (see module docstring)."""
    fit = [s for s in series if s.seed in set(fit_seeds)]
    held = [s for s in series if s.seed not in set(fit_seeds)]
    if not fit:
        raise ValueError(f"no series of the fit seeds {list(fit_seeds)}")
    if not held:
        raise ValueError("no held-out series: every seed was used for fitting")
    out = []
    for p in predictors:
        c = fit_threshold(fit, p)
        leads, det, fa, miss = outcomes(held, p, c)
        xs = [x for s in series for x in s.predictors.get(p, [math.nan] * len(s.steps))]
        ys = [y for s in series for y in s.drop]
        out.append(PredictorReport(predictor=p, threshold=c, leads=leads, detected=det, false_alarms=fa, misses=miss,
                                   r2=r_squared(xs, ys)))
    return out
