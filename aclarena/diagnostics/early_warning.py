"""Early-warning rules over metric series, and the significance of a benchmark drop.

A training-time monitor scores probe sets every N steps and gets, per metric, a series
``x_1, x_2, ...`` (token drift at high-entropy positions, whole-sequence KL, forward KL to
the stage-start policy, the training loss...). Two rules turn a series into warnings:

* **threshold**: ``x_t > limit`` (or ``< limit`` for a metric that warns when it falls).
  It fires when the series crosses the limit, and again only after it has gone back.
* **trend** (an EWMA control chart, Roberts 1959; the exponentially weighted variance of
  Finch 2009, "Incremental calculation of weighted mean and variance"): before seeing
  ``x_t`` the rule holds an EWMA mean ``m`` and variance ``v`` of the earlier points;
  ``z_t = (x_t - m) / s`` with ``s = max(sqrt(v), min_std, rel_std · |m|)``; it fires when
  ``z_t > z`` (``direction="up"``; ``< -z`` for ``"down"``, ``|z_t| > z`` for ``"both"``)
  once at least ``warmup`` points have been seen, then ``m`` and ``v`` take in ``x_t``:
  ``d = x_t - m``, ``m ← m + α d``, ``v ← (1 - α)(v + α d²)``. The floors keep the rule
  from firing on numerical noise when a series starts flat (a forward KL is exactly 0 at
  the stage start). Like the threshold, it fires on the point where ``z`` crosses, not on
  every point while it stays above.

A **significant benchmark drop** (the ground truth the warnings are timed against) is
decided on the same fixed items evaluated at the stage start and at step ``s``: with
``b`` items solved at the start and failed at ``s``, and ``c`` the reverse, the exact
one-sided McNemar test (McNemar 1947; a binomial test on the discordant items) gives
``p = P(Binom(b + c, ½) ≥ b)`` (``scipy.stats.binomtest``, exact for any number of items).
A stage is evaluated many times, and the first of many uncorrected tests at ``α`` would
find a "drop" in noise far more often than ``α``; so the ``m`` evaluations after the stage
start are one family, corrected with **Holm's step-down procedure** (Holm 1979): with the
p-values sorted, ``p_(1) ≤ ... ≤ p_(m)``, the adjusted p-value is
``p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j))``, and an evaluation is a significant drop
when ``p̃ < α``. This bounds the chance of declaring *any* false drop in the stage by ``α``
under any dependence between the evaluations (they re-test the same items), and is uniformly
more powerful than Bonferroni. The **first significant drop** is the earliest evaluation so
declared. With ``n`` items, the smallest possible p-value is ``½ⁿ`` (every item solved at the
start, every one lost), so a drop can be significant only when ``½ⁿ < α / m``
(:func:`min_items`).
The **lead time** of a warning is ``drop step - warning step``: positive when the warning
came first, negative when it came after the drop.

Pure functions over numbers and numpy arrays: no torch, h5py or transformers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from aclarena.diagnostics.binomial import binomial_tail

DIRECTIONS = ("up", "down", "both")


def _finite_number(value: Any, name: str, *, positive: bool = False, nonneg: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"`{name}` must be > 0, got {value!r}")
    if nonneg and value < 0:
        raise ValueError(f"`{name}` must be >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class TrendRule:
    """An EWMA z-score rule (see the module docstring).

    Attributes:
        alpha: EWMA weight of the newest point, in (0, 1].
        z: how many (floored) standard deviations away from the EWMA a point must be.
        warmup: points seen before the rule may fire (at least 1).
        min_std: absolute floor of the standard deviation, in the metric's units.
        rel_std: floor of the standard deviation relative to ``|EWMA mean|``.
        direction: ``up`` (warn on rises), ``down`` (falls) or ``both``.
    """

    alpha: float = 0.3
    z: float = 3.0
    warmup: int = 2
    min_std: float = 0.0
    rel_std: float = 0.1
    direction: str = "up"

    def __post_init__(self) -> None:
        a = _finite_number(self.alpha, "alpha")
        if not 0 < a <= 1:
            raise ValueError(f"`alpha` must be in (0, 1], got {self.alpha!r}")
        _finite_number(self.z, "z", positive=True)
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 1:
            raise ValueError(f"`warmup` must be an integer >= 1, got {self.warmup!r}")
        _finite_number(self.min_std, "min_std", nonneg=True)
        _finite_number(self.rel_std, "rel_std", nonneg=True)
        if self.min_std == 0 and self.rel_std == 0:
            raise ValueError("give `min_std` or `rel_std` > 0: a flat series would otherwise have zero variance")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"`direction` must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")


@dataclass(frozen=True, slots=True)
class MetricRule:
    """The warning rules of one metric: an absolute ``threshold`` and/or a ``trend`` rule.

    ``above=True`` warns when the metric exceeds the threshold, ``False`` when it falls below.
    """

    threshold: float | None = None
    trend: TrendRule | None = None
    above: bool = True

    def __post_init__(self) -> None:
        if self.threshold is not None:
            _finite_number(self.threshold, "threshold")
        if self.trend is not None and not isinstance(self.trend, TrendRule):
            raise ValueError(f"`trend` must be a TrendRule, got {type(self.trend).__name__}")

    @property
    def active(self) -> bool:
        return self.threshold is not None or self.trend is not None

    def to_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "above": self.above,
                "trend": asdict(self.trend) if self.trend is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricRule:
        trend = data.get("trend")
        return cls(threshold=data.get("threshold"), above=bool(data.get("above", True)),
                   trend=TrendRule(**trend) if trend else None)


@dataclass(frozen=True, slots=True)
class Alert:
    """A warning: ``metric`` on ``series`` (a probe set, or ``train``) at ``step``.

    ``rule`` is ``threshold`` or ``trend``; ``limit`` the threshold, or the value the trend
    rule would have accepted (``m ± z·s``); ``score`` the z-score (trend) or the value.
    """

    step: int
    series: str
    metric: str
    value: float
    rule: str
    limit: float
    score: float

    def message(self) -> str:
        if self.rule == "threshold":
            return (f"{self.metric} on {self.series} = {self.value:.4g} crossed the threshold {self.limit:.4g} "
                    f"at step {self.step}")
        return (f"{self.metric} on {self.series} = {self.value:.4g} broke its trend (z = {self.score:.1f}, "
                f"limit {self.limit:.4g}) at step {self.step}")


@dataclass
class _TrendState:
    n: int = 0
    mean: float = 0.0
    var: float = 0.0
    firing: bool = False


@dataclass
class _MetricState:
    trend: _TrendState = field(default_factory=_TrendState)
    over: bool = False


class WarningDetector:
    """Apply :class:`MetricRule` objects to series point by point (live or offline, same result).

    ``update(step, series, {metric: value})`` returns the alerts of that point. Non-finite
    values are skipped (they neither fire nor move the trend).
    """

    def __init__(self, rules: Mapping[str, MetricRule]) -> None:
        for name, rule in rules.items():
            if not isinstance(rule, MetricRule):
                raise ValueError(f"rule of {name!r} must be a MetricRule, got {type(rule).__name__}")
        self.rules = {k: v for k, v in rules.items() if v.active}
        self._state: dict[tuple[str, str], _MetricState] = {}

    def update(self, step: int, series: str, values: Mapping[str, float]) -> list[Alert]:
        alerts: list[Alert] = []
        for metric, rule in self.rules.items():
            if metric not in values:
                continue
            x = float(values[metric])
            if not math.isfinite(x):
                continue
            st = self._state.setdefault((series, metric), _MetricState())
            if rule.threshold is not None:
                over = x > rule.threshold if rule.above else x < rule.threshold
                if over and not st.over:
                    alerts.append(Alert(int(step), series, metric, x, "threshold", float(rule.threshold), x))
                st.over = over
            if rule.trend is not None:
                alert = _trend_update(st.trend, rule.trend, x)
                if alert is not None:
                    z, limit = alert
                    alerts.append(Alert(int(step), series, metric, x, "trend", limit, z))
        return alerts


def _trend_update(st: _TrendState, rule: TrendRule, x: float) -> tuple[float, float] | None:
    """One point of the EWMA rule; returns ``(z, limit)`` when it fires."""
    fired = None
    if st.n == 0:
        st.n, st.mean, st.var = 1, x, 0.0
        return None
    s = max(math.sqrt(st.var), rule.min_std, rule.rel_std * abs(st.mean))
    z = (x - st.mean) / s if s > 0 else 0.0
    beyond = {"up": z > rule.z, "down": z < -rule.z, "both": abs(z) > rule.z}[rule.direction]
    if st.n >= rule.warmup and beyond and not st.firing:
        limit = st.mean + (rule.z * s if z > 0 else -rule.z * s)
        fired = (z, limit)
    st.firing = beyond and st.n >= rule.warmup
    d = x - st.mean
    st.mean += rule.alpha * d
    st.var = (1 - rule.alpha) * (st.var + rule.alpha * d * d)
    st.n += 1
    return fired


def detect(steps: Sequence[int], series: str, values: Mapping[str, Sequence[float]],
           rules: Mapping[str, MetricRule]) -> list[Alert]:
    """Every alert of one series (columns ``values[metric]`` aligned with ``steps``), in step order."""
    n = len(steps)
    for metric, col in values.items():
        if len(col) != n:
            raise ValueError(f"column {metric!r} has {len(col)} values for {n} steps")
    order = np.argsort(np.asarray(steps), kind="stable")
    det = WarningDetector(rules)
    out: list[Alert] = []
    for i in order:
        out.extend(det.update(int(steps[i]), series, {m: float(col[i]) for m, col in values.items()}))
    return out


def first_alert(alerts: Iterable[Alert], metric: str, series: str | None = None) -> Alert | None:
    """The earliest alert of ``metric`` (on ``series`` when given)."""
    best = None
    for a in alerts:
        if a.metric == metric and (series is None or a.series == series) and (best is None or a.step < best.step):
            best = a
    return best


# --- the ground truth: a significant drop on fixed items ---------------------------------------


def mcnemar_drop_pvalue(before: np.ndarray, after: np.ndarray) -> float:
    """One-sided exact McNemar p-value that ``after`` solves fewer of the same items than ``before``.

    ``before`` and ``after`` are per-item outcomes (bool or 0/1) on the same items.
    """
    b0 = np.asarray(before, dtype=bool)
    a0 = np.asarray(after, dtype=bool)
    if b0.shape != a0.shape or b0.ndim != 1:
        raise ValueError(f"`before` and `after` must be 1-d of equal length, got {b0.shape} and {a0.shape}")
    lost = int(np.count_nonzero(b0 & ~a0))
    gained = int(np.count_nonzero(~b0 & a0))
    n = lost + gained
    if n == 0 or lost == 0:
        return 1.0
    return binomial_tail(lost, n, 0.5)


def holm_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order.

    ``p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j))`` over the ascending p-values; rejecting
    where ``p̃ < α`` controls the family-wise error rate at ``α`` under any dependence.
    """
    ps = [float(p) for p in pvalues]
    for p in ps:
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"p-values must be in [0, 1], got {p!r}")
    m = len(ps)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: ps[k])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def min_items(alpha: float, tests: int) -> int:
    """The fewest fixed items with which a drop can be significant among ``tests`` Holm-corrected tests.

    The smallest McNemar p-value with ``n`` items is ``½ⁿ`` (all solved at the start, all lost),
    and Holm's smallest threshold is ``α / tests``: the answer is the least ``n`` with ``½ⁿ < α / tests``.
    """
    a = _finite_number(alpha, "alpha", positive=True)
    if isinstance(tests, bool) or not isinstance(tests, int) or tests < 1:
        raise ValueError(f"`tests` must be an integer >= 1, got {tests!r}")
    n = max(0, math.floor(math.log2(tests / a)))
    while 0.5**n >= a / tests:
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class DropPoint:
    """A benchmark evaluation against the stage start: accuracy, items lost and gained, p-value.

    ``pvalue`` is the evaluation's own exact McNemar p-value, ``adjusted`` its Holm-adjusted
    p-value over the stage's evaluations, and ``significant`` is ``adjusted < alpha``.
    """

    step: int
    accuracy: float
    lost: int
    gained: int
    pvalue: float
    significant: bool
    adjusted: float = 1.0


def drop_points(steps: Sequence[int], outcomes: Sequence[np.ndarray], *, alpha: float = 0.05) -> list[DropPoint]:
    """Each evaluation compared with the first one (the stage start), in step order.

    Significance is Holm-corrected over the evaluations after the start (the module docstring).
    """
    _finite_number(alpha, "alpha", positive=True)
    if len(steps) != len(outcomes):
        raise ValueError(f"{len(steps)} steps for {len(outcomes)} outcome vectors")
    if not steps:
        return []
    order = np.argsort(np.asarray(steps), kind="stable")
    start = np.asarray(outcomes[order[0]], dtype=bool)
    raw = []
    for i in order:
        now = np.asarray(outcomes[i], dtype=bool)
        if now.shape != start.shape:
            raise ValueError(f"evaluation at step {steps[i]} has {now.size} items, the first has {start.size}")
        raw.append((int(steps[i]), now, mcnemar_drop_pvalue(start, now)))
    adjusted = [1.0, *holm_adjusted([p for _, _, p in raw[1:]])]
    out = []
    for (step, now, p), adj in zip(raw, adjusted, strict=True):
        out.append(DropPoint(step=step, accuracy=float(now.mean()) if now.size else float("nan"),
                             lost=int(np.count_nonzero(start & ~now)), gained=int(np.count_nonzero(~start & now)),
                             pvalue=p, significant=adj < alpha, adjusted=adj))
    return out


def first_drop(points: Sequence[DropPoint]) -> DropPoint | None:
    """The first significant (Holm-corrected) drop after the stage start, or None."""
    return next((p for p in points[1:] if p.significant), None)


def lead_time(drop_step: int | None, warn_step: int | None) -> int | None:
    """``drop_step - warn_step`` (steps of warning ahead of the drop); None when either is missing."""
    if drop_step is None or warn_step is None:
        return None
    return int(drop_step) - int(warn_step)


def drop_reachable(solved_at_start: int, alpha: float, tests: int) -> bool:
    """Whether any drop can be significant: losing all ``solved_at_start`` items would have to beat ``alpha / tests``."""
    return bool(0.5 ** int(solved_at_start) < alpha / max(1, int(tests)))


#: the lead-time predictors' names as tables and the dashboard word them (the predictors of
#: aclarena.train.lead_time.PREDICTORS)
PREDICTOR_LABELS = {
    "kl_high": "token drift at high-entropy positions",
    "flip_high": "flip rate at high-entropy positions",
    "kl_all": "whole-sequence KL",
    "fkl": "forward KL to the stage start",
    "fkl_current": "forward KL on the current task",
    "razor_fkl": "forward KL on the current task (RL's Razor)",
    "loss": "training loss",
    "fkl_high": "forward KL to the stage start at high-entropy positions",
    "loss_fall": "baseline: fall of the new task's training loss",
    "first_check": "baseline: warn at the first check",
}


def drop_label(drop_step: int | None, reachable: bool | None = None) -> str:
    """A drop step as the tables print it: the step, ``none`` (the test found no drop), or ``unreachable``.

    ``unreachable`` when ``reachable`` is False: too few items were solved at the stage start for
    any drop to be significant, so the absence of a drop is not evidence of no forgetting.
    """
    if drop_step is not None:
        return str(int(drop_step))
    return "unreachable" if reachable is False else "none"


def drop_reachable_in(result: Mapping[str, Any], domain: str) -> bool | None:
    """Whether a lead-time ``result`` (its ``drop_test``) could find a significant drop of ``domain``; None if unrecorded."""
    info = ((result.get("drop_test") or {}).get("domains") or {}).get(domain) or {}
    return info.get("reachable")
