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

Where the ground truth is evaluated decides how early a warning can be shown to be: a drop found
at the first evaluation after the stage start leaves no room for any lead. :func:`dense_schedule`
evaluates every step at the start of a phase, where drops happen, and sparser later.

The held-out comparison (:func:`compare`) judges every predictor against two baselines any
signal must beat: warning at the first check after the stage start (:data:`FIRST_CHECK`: it
detects every drop as early as possible and false-alarms on every stage without one), and a
threshold on how far the new task's training loss has fallen since the stage start
(``loss_fall``: forgetting as a side effect of learning the new task), fitted like the others.

Pure functions over numbers: no torch, h5py or transformers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

#: the baseline that warns at the first check after the stage start, whatever the values
FIRST_CHECK = "first_check"


def dense_schedule(length: int, *, dense: int = 10, growth: float = 1.25) -> list[int]:
    """Ground-truth evaluation steps of a phase of ``length`` steps: every step from 0 to ``dense``,
    then each step ``growth`` times the previous one (rounded, at least one step later), and the last.

    ``dense_schedule(60)`` is 0, 1, ..., 10, 12, 15, 19, 24, 30, 38, 48, 60.
    """
    for name, v in (("length", length), ("dense", dense)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "length" else 0):
            raise ValueError(f"`{name}` must be an integer >= {1 if name == 'length' else 0}, got {v!r}")
    if isinstance(growth, bool) or not isinstance(growth, int | float) or not math.isfinite(growth) or growth <= 1:
        raise ValueError(f"`growth` must be a number > 1, got {growth!r}")
    steps = list(range(0, min(dense, length) + 1))
    s = steps[-1]
    while s < length:
        s = min(length, max(s + 1, round(s * growth)))
        steps.append(s)
    return steps


def evaluations_before(schedule: Sequence[int], step: int) -> int:
    """How many evaluations of ``schedule`` come after its first (the stage start) and before ``step``."""
    return sum(1 for s in sorted(set(schedule))[1:] if s < step)


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


# --- the held-out comparison against the baselines -------------------------------------------


def warn_at_first_check(s: WarningSeries) -> int | None:
    """The baseline :data:`FIRST_CHECK`: a warning at the first check after the stage start."""
    return int(s.steps[1]) if len(s.steps) > 1 else None


def judge(series: Sequence[WarningSeries], warn: Callable[[WarningSeries], int | None]) -> dict[str, object]:
    """How a warning rule (``warn``: a series -> its warning step or None) did on ``series``.

    A warning at or before the drop is a detection (lead = drop step - warning step, >= 0); a later
    one is ``late``, none at all ``missed``; any warning on a series without a drop is a false alarm.
    Rates come with Wilson 95% intervals (``detection_ci``, ``false_alarm_ci``); ``score`` is the
    detection rate minus the false-alarm rate (Youden's J: 0 for a rule that warns on everything,
    or on nothing).
    """
    from aclarena.diagnostics.flips import wilson

    leads: list[int] = []
    late = missed = fa = 0
    drops = [s for s in series if s.drop_step is not None]
    quiet = [s for s in series if s.drop_step is None]
    for s in drops:
        w = warn(s)
        assert s.drop_step is not None
        if w is None:
            missed += 1
        elif w <= s.drop_step:
            leads.append(int(s.drop_step) - int(w))
        else:
            late += 1
    for s in quiet:
        fa += warn(s) is not None
    det_rate = len(leads) / len(drops) if drops else None
    fa_rate = fa / len(quiet) if quiet else None
    return {"drops": len(drops), "without_drop": len(quiet), "detected": len(leads), "late": late, "missed": missed,
            "false_alarms": fa, "leads": leads,
            "lead_median": float(np.median(leads)) if leads else None,
            "lead_range": [min(leads), max(leads)] if leads else None,
            "detection_rate": det_rate, "detection_ci": list(wilson(len(leads), len(drops))) if drops else None,
            "false_alarm_rate": fa_rate, "false_alarm_ci": list(wilson(fa, len(quiet))) if quiet else None,
            "score": det_rate - fa_rate if det_rate is not None and fa_rate is not None else None}


def compare(series: Sequence[WarningSeries], predictors: Sequence[str], fit_runs: Collection[int],
            *, baseline_loss: str = "loss_fall") -> dict[str, object]:
    """Thresholds fitted on the series of ``fit_runs`` (their ``seed`` field), judged on every other series.

    Returns ``{"fit", "held_out", "rows", "baselines", "beats"}``: ``rows`` per predictor (its
    threshold and :func:`judge` on the held-out series, and on the fit series for reference),
    ``baselines`` the two rules any predictor must beat (:data:`FIRST_CHECK` and the fitted
    threshold on ``baseline_loss``), ``beats`` the predictors whose held-out ``score`` is higher
    than both baselines'.
    """
    fit_set = set(fit_runs)
    fit = [s for s in series if s.seed in fit_set]
    held = [s for s in series if s.seed not in fit_set]
    if not fit:
        raise ValueError(f"no series of the fit runs {sorted(fit_set)}")
    if not held:
        raise ValueError("no held-out series: every run was used for fitting")

    def row(name: str) -> dict[str, object]:
        if name == FIRST_CHECK:
            return {"predictor": name, "threshold": None, "held_out": judge(held, warn_at_first_check),
                    "fit": judge(fit, warn_at_first_check)}
        c = fit_threshold(fit, name)
        return {"predictor": name, "threshold": c, "held_out": judge(held, lambda s: s.warn_step(name, c)),
                "fit": judge(fit, lambda s: s.warn_step(name, c))}

    rows = [row(p) for p in predictors if p not in (FIRST_CHECK, baseline_loss)]
    baselines = [row(FIRST_CHECK), row(baseline_loss)]

    def score(r: Mapping[str, object]) -> float:
        held_out = r["held_out"]
        assert isinstance(held_out, dict)
        v = held_out["score"]
        return -math.inf if v is None else float(v)

    bar = max(score(b) for b in baselines)
    return {"fit": {"runs": sorted(fit_set), "series": len(fit), "drops": sum(s.drop_step is not None for s in fit)},
            "held_out": {"runs": sorted({s.seed for s in held}), "series": len(held),
                         "drops": sum(s.drop_step is not None for s in held),
                         "without_drop": sum(s.drop_step is None for s in held)},
            "rows": rows, "baselines": baselines,
            "beats": [r["predictor"] for r in rows if score(r) > bar]}
