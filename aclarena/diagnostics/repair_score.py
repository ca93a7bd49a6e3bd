"""The four-part score of a repair: healing, preservation, non-damage and target retention.

"Spectral Unforgetting" (Abro & Tahir, 2026, arXiv 2605.20296) scores a post-hoc repair with a
partition-conditional metric, because an average over benchmarks hides per-benchmark failures and
a plain recovery score rewards a model that simply reverts to the checkpoint before the
fine-tune. The search corpus held the paper's abstract (which names the four parts) but not its
equations, so the parts are defined here as follows; OLD is the checkpoint before the stage, NEW
the one after it, REP the repair of NEW, and ``acc`` a suite's mean per-item score.

The suites are split first. The **target** suites are the new stage's own (given by the caller:
the in-domain suites of NEW's domain). Every other suite is **held out** and is put in one part
by the stage's effect on it, ``acc_NEW − acc_OLD``, with its paired percentile-bootstrap interval
(items resampled together for both checkpoints): **damaged** when the interval lies below 0,
**improved** when it lies above 0, **unchanged** otherwise (the difference is within what the item
sample explains). Then, with sums over the suites of a part::

    healing          = Σ_damaged (acc_REP − acc_NEW) / Σ_damaged (acc_OLD − acc_NEW)
    preservation     = Σ_improved (acc_REP − acc_OLD) / Σ_improved (acc_NEW − acc_OLD)
    non-damage       = Σ_unchanged acc_REP / Σ_unchanged acc_NEW
    target retention = Σ_target (acc_REP − acc_OLD) / Σ_target (acc_NEW − acc_OLD)

Healing is the share of the stage's loss the repair won back (1: all of it, 0: none, < 0: worse
than NEW); preservation the share of the stage's held-out gains it kept; non-damage the accuracy
it keeps, relative to NEW, where the stage changed nothing measurable (1: no new damage);
target retention the share of the stage's own gain it kept. A part is NaN where its partition is
empty or its denominator is not positive (a target the stage did not improve). Intervals: the
items of every suite are resampled (the same items for OLD, NEW and REP) and the part recomputed
with the partition held fixed; resamples whose denominator is not positive are dropped and
counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

PARTS = ("healing", "preservation", "non_damage", "target_retention")
ROLES = ("target", "held-out")


@dataclass(frozen=True)
class SuiteOutcomes:
    """One suite's aligned per-item scores (in [0, 1], one per item) of OLD, NEW and the repair."""

    suite: str
    role: str  # "target" or "held-out"
    old: np.ndarray
    new: np.ndarray
    rep: np.ndarray

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"`role` must be one of {', '.join(ROLES)}, got {self.role!r}")
        n = len(self.old)
        if n == 0 or len(self.new) != n or len(self.rep) != n:
            raise ValueError(f"suite {self.suite}: OLD, NEW and the repair need the same non-zero number of items, "
                             f"got {len(self.old)}, {len(self.new)}, {len(self.rep)}")


@dataclass(frozen=True)
class Part:
    """One part of the score: value, percentile-bootstrap interval, the suites it is over, and how
    many resamples had no positive denominator (dropped)."""

    value: float
    ci: tuple[float, float]
    suites: tuple[str, ...]
    dropped: int = 0


@dataclass(frozen=True)
class RepairScore:
    """The four parts and the partition of the suites (suite -> target, damaged, improved, unchanged)."""

    healing: Part
    preservation: Part
    non_damage: Part
    target_retention: Part
    partition: dict[str, str] = field(default_factory=dict)
    effects: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # suite -> NEW−OLD and its CI
    n_items: dict[str, int] = field(default_factory=dict)

    def part(self, name: str) -> Part:
        if name not in PARTS:
            raise ValueError(f"`name` must be one of {', '.join(PARTS)}, got {name!r}")
        p: Part = getattr(self, name)
        return p


def _quantiles(values: np.ndarray, level: float) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(v, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _ratio(num: float, den: float, *, positive: bool = True) -> float:
    return num / den if (den > 0 if positive else den != 0) else math.nan


def partition(old: np.ndarray, new: np.ndarray, *, n_boot: int = 1000, level: float = 0.95,
              seed: int = 0) -> tuple[str, tuple[float, float, float]]:
    """``damaged`` / ``improved`` / ``unchanged`` from the paired bootstrap interval of ``mean(new) − mean(old)``,
    and (difference, low, high)."""
    old, new = np.asarray(old, dtype=float), np.asarray(new, dtype=float)
    diff = float(new.mean() - old.mean())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(old), (n_boot, len(old)))
    boots = new[idx].mean(axis=1) - old[idx].mean(axis=1)
    lo, hi = _quantiles(boots, level)
    kind = "damaged" if hi < 0 else "improved" if lo > 0 else "unchanged"
    return kind, (diff, lo, hi)


def _parts(means: dict[str, tuple[float, float, float]], part_of: dict[str, str]) -> dict[str, float]:
    def sums(kind: str) -> list[tuple[float, float, float]]:
        return [means[s] for s, k in part_of.items() if k == kind]

    d, i, u, t = sums("damaged"), sums("improved"), sums("unchanged"), sums("target")
    return {
        "healing": _ratio(sum(r - n for o, n, r in d), sum(o - n for o, n, r in d)),
        "preservation": _ratio(sum(r - o for o, n, r in i), sum(n - o for o, n, r in i)),
        "non_damage": _ratio(sum(r for o, n, r in u), sum(n for o, n, r in u)),
        "target_retention": _ratio(sum(r - o for o, n, r in t), sum(n - o for o, n, r in t)),
    }


def repair_score(suites: Sequence[SuiteOutcomes], *, n_boot: int = 1000, level: float = 0.95,
                 seed: int = 0) -> RepairScore:
    """The four-part score of a repair over ``suites`` (see the module docstring), with ``level`` intervals."""
    if not suites:
        raise ValueError("no suites to score; evaluate OLD, NEW and the repair on the same suites first")
    if not (isinstance(n_boot, int) and n_boot >= 1):
        raise ValueError(f"`n_boot` must be an integer >= 1, got {n_boot!r}")
    names = [s.suite for s in suites]
    if len(set(names)) != len(names):
        raise ValueError(f"suites repeat in {names}")
    part_of: dict[str, str] = {}
    effects: dict[str, tuple[float, float, float]] = {}
    arrays = {s.suite: (np.asarray(s.old, float), np.asarray(s.new, float), np.asarray(s.rep, float)) for s in suites}
    for k, s in enumerate(suites):
        o, n, _ = arrays[s.suite]
        kind, eff = partition(o, n, n_boot=n_boot, level=level, seed=seed + k)
        effects[s.suite] = eff
        part_of[s.suite] = "target" if s.role == "target" else kind
    point = _parts({name: (float(o.mean()), float(n.mean()), float(r.mean())) for name, (o, n, r) in arrays.items()},
                   part_of)
    rng = np.random.default_rng(seed)
    boots = {p: np.empty(n_boot) for p in PARTS}
    draws = {name: rng.integers(0, len(o), (n_boot, len(o))) for name, (o, _, _) in arrays.items()}
    for b in range(n_boot):
        means = {}
        for name, (o, n, r) in arrays.items():
            ix = draws[name][b]
            means[name] = (float(o[ix].mean()), float(n[ix].mean()), float(r[ix].mean()))
        for p, v in _parts(means, part_of).items():
            boots[p][b] = v
    kinds = {"healing": "damaged", "preservation": "improved", "non_damage": "unchanged", "target_retention": "target"}
    out = {}
    for p in PARTS:
        members = tuple(s for s, k in part_of.items() if k == kinds[p])
        dropped = int(np.sum(~np.isfinite(boots[p]))) if members else 0
        out[p] = Part(point[p], _quantiles(boots[p], level) if members else (math.nan, math.nan), members, dropped)
    return RepairScore(out["healing"], out["preservation"], out["non_damage"], out["target_retention"], part_of,
                       effects, {name: len(o) for name, (o, _, _) in arrays.items()})
