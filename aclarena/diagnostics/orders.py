"""Curriculum-order designs and the maths of an order study (pure: no model, no store).

Does the order of a multi-domain curriculum matter, and which stage harms most once its position is
controlled for? Papers that permuted the order found large effects:

* When Domains Interact (arXiv 2602.01365; GRPO over math, science, logic and puzzles, sequential vs
  mixed): transfer between domains is asymmetric and order-dependent (math -> science 83% / 41% on
  math / science, science -> math 77% / 25%; a poor order costs up to 14 points). The pairwise matrices
  ``I`` and ``T`` below measure that asymmetry per ordered pair.
* Omni-Thinker (arXiv 2507.14783, v3): a schedule ordered by backward transfer beats joint training
  and merging, and simple additive assumptions on accuracy transfer predict a curriculum's outcome.
  The pairwise prediction of a full order's BWT below tests that assumption on the run's own orders.
* Geometry Conflict (arXiv 2605.09608): forgetting in continual post-training as a state-relative
  failure, when the covariance geometry of a new update misaligns with that of the model state (their
  measure drives a data-free merge, GCWM). :func:`predictor_report` tests cheaper, first-order
  diagnostics (the cosine of the two stage updates, the SFT/RL displacement ratio, the drift
  signature) on held-out pairs; their covariance measure is not implemented here, so a null result
  for the cosine says nothing against it. It says so when there are too few pairs to test.

* **Designs** (:func:`design_orders`): ``pairs`` (every ordered pair of the domains: the pairwise
  interference and transfer matrix), ``latin`` (n orders in which every domain holds every position
  once: a Williams square, so for an even n every domain also immediately follows every other once),
  ``all`` (every permutation) or an explicit list ``"math,search;search,math"``.
* **Plan** (:func:`plan_orders`): the prefix tree of the orders, per seed. A node is a prefix; its
  stage is trained once, from its parent prefix, for every order that starts with it.
* **Findings** (:func:`order_findings`), from ``acc[(prefix, domain, replicate)]`` (the accuracy on
  ``domain`` of the checkpoint at the end of ``prefix``; ``()`` is the base):

  - interference ``I[a][b] = acc((a,), a) - acc((a, b), a)`` (how much stage b, right after a,
    lowers a) and transfer ``T[a][b] = acc((a, b), b) - acc((b,), b)`` (how a first changes b);
  - forgetting events: each stage ``e`` at position ``q`` (1-based) of a trained prefix, on each
    earlier domain ``d``: ``acc(prefix[:-1], d) - acc(prefix, d)``, with ``lag`` (1: e right after d);
  - the most harmful stage, position controlled: per stage, the mean forgetting it causes at each
    position, averaged over the positions where every stage was observed (each position weighs the
    same for every stage);
  - per full order: final average accuracy and BWT (Lopez-Paz and Ranzato, arXiv 1706.08840:
    ``1/(T-1) sum_{i<T} R[T,i] - R[i,i]``), best and worst with the share of seed resamples in which
    each is best;
  - the pairwise prediction of a full order's BWT: ``-1/(T-1) sum_i sum_{j>i} I[d_i][d_j]`` against
    the measured BWT, over orders of three or more stages.

Intervals over seeds are Student-t 95% intervals of the mean (n seeds, n - 1 degrees of freedom;
none below two seeds): with three seeds they are wide, as they should be.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.errors import AclarenaError, did_you_mean

DESIGNS = ("pairs", "latin", "all")
Prefix = tuple[str, ...]
#: (prefix, domain, replicate) -> accuracy
Acc = Mapping[tuple[Prefix, str, int], float]


# --- designs ----------------------------------------------------------------------------------------------


def williams_square(n: int) -> list[list[int]]:
    """n rows of 0..n-1: each value once per row and per column; for even n, each ordered adjacent pair of
    different values once over the rows (E. J. Williams, 1949). Odd n: a plain cyclic Latin square."""
    if n < 1:
        raise ValueError(f"`n` must be >= 1, got {n}")
    if n % 2:
        return [[(i + j) % n for j in range(n)] for i in range(n)]
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    return [[(x + i) % n for x in first] for i in range(n)]


def design_orders(spec: str, domains: Sequence[str]) -> list[Prefix]:
    """The orders of ``spec`` over ``domains`` (the parent curriculum's stages, in its order).

    Raises :class:`AclarenaError` (one line) for an unknown design or domain, a repeated domain, an
    empty order, or an order given twice.
    """
    domains = list(domains)
    text = spec.strip()
    if not text:
        raise AclarenaError("--orders names no design; use pairs, latin, all, or orders such as 'math,search;search,math'")
    if len(set(domains)) != len(domains):
        raise AclarenaError(f"the curriculum repeats a domain ({', '.join(domains)}); an order study needs each once")
    if text == "pairs":
        if len(domains) < 2:
            raise AclarenaError("--orders pairs needs a curriculum of at least 2 domains; this one has "
                                f"{len(domains)} ({', '.join(domains)})")
        return [(a, b) for a in domains for b in domains if a != b]
    if text == "latin":
        return [tuple(domains[i] for i in row) for row in williams_square(len(domains))]
    if text == "all":
        return [tuple(p) for p in itertools.permutations(domains)]
    if "," not in text and ";" not in text and text not in domains:
        raise AclarenaError(f"unknown design {text!r}{did_you_mean(text, DESIGNS)}; use one of {', '.join(DESIGNS)}, "
                            "or orders of domains such as 'math,search;search,math'")
    orders: list[Prefix] = []
    for part in text.split(";"):
        names = [x.strip() for x in part.split(",")]
        if not part.strip() or any(not x for x in names):
            raise AclarenaError(f"--orders {spec!r} has an empty order or domain; write orders as 'math,search;"
                                "search,math' (domains by commas, orders by semicolons)")
        for x in names:
            if x not in domains:
                raise AclarenaError(f"unknown domain {x!r} in order {part.strip()!r}{did_you_mean(x, domains)}; "
                                    f"this curriculum's domains are {', '.join(domains)}")
        dup = next((x for x in names if names.count(x) > 1), None)
        if dup is not None:
            raise AclarenaError(f"order {part.strip()!r} repeats the domain {dup!r}; an order trains each domain once")
        if tuple(names) in orders:
            raise AclarenaError(f"order {part.strip()!r} is given twice in --orders; give each order once")
        orders.append(tuple(names))
    return orders


# --- the plan: a prefix tree per seed ---------------------------------------------------------------------


@dataclass(frozen=True)
class OrderPlan:
    """The stages an order study trains: ``nodes`` (every distinct non-empty prefix, parents first), per
    seed; ``orders`` the design; ``users[prefix]`` the orders that start with it."""

    orders: tuple[Prefix, ...]
    seeds: int
    nodes: tuple[Prefix, ...]
    users: Mapping[Prefix, tuple[Prefix, ...]] = field(default_factory=dict)

    @property
    def stages(self) -> int:
        """Stages trained over every seed (each node once per seed)."""
        return len(self.nodes) * self.seeds

    @property
    def unshared_stages(self) -> int:
        """Stages trained if no prefix were shared: the sum of the orders' lengths, per seed."""
        return sum(len(o) for o in self.orders) * self.seeds

    def shared(self) -> list[tuple[Prefix, tuple[Prefix, ...]]]:
        """The prefixes that more than one order starts with, and those orders."""
        return [(p, self.users[p]) for p in self.nodes if len(self.users[p]) > 1]

    def lines(self, name: Callable[[Prefix], str]) -> list[str]:
        """The plan in words (``study --orders ... --dry-run``), each prefix's checkpoint called ``name(prefix)``
        (:func:`aclarena.train.naming.order_node_name`)."""
        out = [f"{len(self.orders)} orders x {self.seeds} seeds: {self.stages} stages to train "
               f"({len(self.nodes)} per seed; {self.unshared_stages} without sharing prefixes)"]
        out += ["  order " + " -> ".join(o) for o in self.orders]
        out.append("stages per seed (parent -> stage):")
        out += [f"  {name(p[:-1])} -> {name(p)}" + (f"   shared by {len(self.users[p])} orders"
                                                             if len(self.users[p]) > 1 else "") for p in self.nodes]
        return out

    def to_dict(self, name: Callable[[Prefix], str]) -> dict[str, Any]:
        """The plan as JSON, each prefix's checkpoint called ``name(prefix)``."""
        return {"orders": [list(o) for o in self.orders], "seeds": self.seeds, "stages": self.stages,
                "stages_per_seed": len(self.nodes), "unshared_stages": self.unshared_stages,
                "nodes": [{"prefix": list(p), "name": name(p), "parent": name(p[:-1]),
                           "orders": len(self.users[p])} for p in self.nodes],
                "shared": [{"prefix": list(p), "orders": [list(o) for o in os_]} for p, os_ in self.shared()]}


def plan_orders(orders: Sequence[Prefix], seeds: int) -> OrderPlan:
    """The prefix tree of ``orders``: each distinct prefix once (shorter first, then in design order)."""
    if seeds < 1:
        raise AclarenaError(f"--seeds must be >= 1, got {seeds}")
    if not orders:
        raise AclarenaError("the design has no order")
    users: dict[Prefix, list[Prefix]] = {}
    for o in orders:
        for k in range(1, len(o) + 1):
            users.setdefault(tuple(o[:k]), []).append(tuple(o))
    nodes = sorted(users, key=lambda p: (len(p), list(users).index(p)))
    return OrderPlan(tuple(tuple(o) for o in orders), seeds, tuple(nodes), {p: tuple(u) for p, u in users.items()})


# --- statistics over seeds --------------------------------------------------------------------------------


def t_interval(values: Sequence[float | None], level: float = 0.95) -> dict[str, Any]:
    """Mean, sample std and the Student-t interval of the mean of the finite values (None below two)."""
    from scipy import stats

    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return {"mean": None, "spread": None, "low": None, "high": None, "n": 0}
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return {"mean": m, "spread": None, "low": None, "high": None, "n": 1}
    s = statistics.stdev(xs)
    h = float(stats.t.ppf((1 + level) / 2, len(xs) - 1)) * s / math.sqrt(len(xs))
    return {"mean": m, "spread": s, "low": m - h, "high": m + h, "n": len(xs)}


def _row(values: Sequence[float | None], **keys: Any) -> dict[str, Any]:
    return {**keys, "values": [None if v is None or not math.isfinite(v) else float(v) for v in values],
            **t_interval(values)}


def _get(acc: Acc, prefix: Prefix, domain: str, r: int) -> float | None:
    v = acc.get((tuple(prefix), domain, r))
    return None if v is None or not math.isfinite(v) else float(v)


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def pair_matrices(acc: Acc, domains: Sequence[str], replicates: Sequence[int]) -> dict[str, Any]:
    """Interference ``I[a][b]`` and transfer ``T[a][b]`` per seed, where the pair's nodes were measured."""
    rows = []
    for a in domains:
        for b in domains:
            if a == b or not any(_get(acc, (a, b), a, r) is not None for r in replicates):
                continue
            inter = [_sub(_get(acc, (a,), a, r), _get(acc, (a, b), a, r)) for r in replicates]
            trans = [_sub(_get(acc, (a, b), b, r), _get(acc, (b,), b, r)) for r in replicates]
            rows.append({**_row(inter, first=a, second=b),
                         "transfer": _row(trans)})
    return {"domains": list(domains), "pairs": rows}


def forgetting_events(acc: Acc, nodes: Sequence[Prefix], replicates: Sequence[int]) -> list[dict[str, Any]]:
    """Every (stage at its position, earlier domain) of the trained prefixes: the drop it caused, per seed."""
    out = []
    for p in nodes:
        if len(p) < 2:
            continue
        for i, d in enumerate(p[:-1]):
            vals = [_sub(_get(acc, p[:-1], d, r), _get(acc, p, d, r)) for r in replicates]
            out.append(_row(vals, stage=p[-1], position=len(p), domain=d, domain_position=i + 1,
                            lag=len(p) - 1 - i, prefix=list(p)))
    return out


def _stratified(events: Sequence[Mapping[str, Any]], stages: Sequence[str], reps: Sequence[int]) -> tuple[
        list[int], dict[str, list[float | None]]]:
    """Per stage, per seed: the mean over the common positions of the mean forgetting it causes there."""
    at: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for e in events:
        at.setdefault((e["stage"], e["position"]), []).append(e)
    positions = sorted({q for _, q in at})
    common = [q for q in positions if all((s, q) in at for s in stages)]
    per: dict[str, list[float | None]] = {}
    for s in stages:
        vals: list[float | None] = []
        for k in range(len(reps)):
            by_q = []
            for q in common:
                xs = [e["values"][k] for e in at[(s, q)] if e["values"][k] is not None]
                if xs:
                    by_q.append(statistics.fmean(xs))
            vals.append(statistics.fmean(by_q) if by_q and len(by_q) == len(common) else None)
        per[s] = vals
    return common, per


def harm_by_stage(events: Sequence[Mapping[str, Any]], stages: Sequence[str], replicates: Sequence[int],
                  n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The most harmful stage with its position controlled for: per stage, its position-stratified mean
    forgetting (over the positions where every stage was observed), with intervals over seeds and the share of
    seed resamples in which each stage is the most harmful."""
    reps = list(replicates)
    common, per = _stratified(events, stages, reps)
    rows = [_row(per[s], stage=s) for s in stages]
    out: dict[str, Any] = {"positions": common, "stages": rows, "most_harmful": None, "p_most_harmful": {}}
    if not common:
        out["reason"] = "no position at which every stage was observed after another: use --orders pairs or latin"
        return out
    ok = [r for r in rows if r["mean"] is not None]
    if not ok:
        out["reason"] = "no forgetting measured"
        return out
    out["p_most_harmful"] = _p_best({s: per[s] for s in stages}, n_boot, seed, larger=True)
    top = max(r["mean"] for r in ok)
    tied = [r["stage"] for r in ok if abs(r["mean"] - top) <= 1e-12]
    if len(tied) > 1:
        out["reason"] = f"tie: {', '.join(tied)} harm the same ({top:+.3f})"
        return out
    out["most_harmful"] = tied[0]
    return out


def _p_best(values: Mapping[str, Sequence[float | None]], n_boot: int, seed: int, larger: bool) -> dict[str, float]:
    """Share of seed resamples (the same seeds for every candidate: paired) in which each candidate is best."""
    names = list(values)
    a = np.array([[np.nan if v is None else v for v in values[n]] for n in names], dtype=np.float64)
    if a.size == 0 or a.shape[1] < 2:  # one seed: resampling it says nothing
        return {}
    rng = np.random.default_rng(seed)
    k = a.shape[1]
    wins = np.zeros(len(names))
    for _ in range(n_boot):
        idx = rng.integers(0, k, k)
        sub = a[:, idx]
        ok = np.isfinite(sub).any(axis=1)
        if not ok.any():
            continue
        m = np.full(len(names), -np.inf if larger else np.inf)
        m[ok] = np.nanmean(sub[ok], axis=1)
        top = m.max() if larger else m.min()
        tied = np.isclose(m, top, rtol=0, atol=1e-12)
        wins[tied] += 1 / tied.sum()  # a tie is shared, never credited to the first listed
    return {n: float(w / n_boot) for n, w in zip(names, wins, strict=True)}


def order_scores(acc: Acc, orders: Sequence[Prefix], replicates: Sequence[int], n_boot: int = 2000,
                 seed: int = 0) -> dict[str, Any]:
    """Per full order: final average accuracy and BWT per seed with intervals; best and worst by each."""
    rows: list[dict[str, Any]] = []
    for o in orders:
        avg: list[float | None] = []
        bwt: list[float | None] = []
        for r in replicates:
            final = [_get(acc, o, d, r) for d in o]
            avg.append(statistics.fmean(final) if all(v is not None for v in final) else None)  # type: ignore[arg-type]
            if len(o) < 2:
                bwt.append(None)
                continue
            drops = [_sub(_get(acc, o, d, r), _get(acc, o[: i + 1], d, r)) for i, d in enumerate(o[:-1])]
            bwt.append(statistics.fmean(drops) if all(v is not None for v in drops) else None)  # type: ignore[arg-type]
        rows.append({"order": list(o), "final_avg": _row(avg), "bwt": _row(bwt)})
    out: dict[str, Any] = {"orders": rows}
    for key in ("final_avg", "bwt"):
        ok = [r for r in rows if r[key]["mean"] is not None]
        if not ok:
            out[key] = None
            continue
        best, worst = max(ok, key=lambda r: r[key]["mean"]), min(ok, key=lambda r: r[key]["mean"])
        if best[key]["mean"] - worst[key]["mean"] <= 1e-12:
            out[key] = {"best": None, "worst": None, "reason": f"every order scores the same ({best[key]['mean']:+.3f})"}
            continue
        p = _p_best({"->".join(r["order"]): r[key]["values"] for r in ok}, n_boot, seed, larger=True)
        diff = [_sub(x, y) for x, y in zip(best[key]["values"], worst[key]["values"], strict=True)]
        out[key] = {"best": best["order"], "worst": worst["order"], "p_best": p,
                    "best_minus_worst": _row(diff)}
    return out


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Pearson r, None when either side has no variance or there are fewer than 3 points."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(xa) < 3 or np.std(xa) == 0 or np.std(ya) == 0:
        return None
    return float(np.corrcoef(xa, ya)[0, 1])


def pairwise_prediction(acc: Acc, orders: Sequence[Prefix], replicates: Sequence[int]) -> dict[str, Any]:
    """Does the pairwise matrix predict the full orders? Per order of 3+ stages and seed: predicted BWT
    ``-1/(T-1) sum_i sum_{j>i} I[d_i][d_j]`` (the pair nodes' interference of that seed) vs the measured BWT."""
    reps = list(replicates)
    rows, xs, ys = [], [], []
    for o in orders:
        if len(o) < 3:
            continue
        pred, meas = [], []
        for r in reps:
            inter = [_sub(_get(acc, (o[i],), o[i], r), _get(acc, (o[i], o[j]), o[i], r))
                     for i in range(len(o)) for j in range(i + 1, len(o))]
            drops = [_sub(_get(acc, o, d, r), _get(acc, o[: i + 1], d, r)) for i, d in enumerate(o[:-1])]
            p = -sum(inter) / (len(o) - 1) if all(v is not None for v in inter) else None  # type: ignore[arg-type]
            m = statistics.fmean(drops) if all(v is not None for v in drops) else None  # type: ignore[arg-type]
            pred.append(p)
            meas.append(m)
            if p is not None and m is not None:
                xs.append(p)
                ys.append(m)
        rows.append({"order": list(o), "predicted_bwt": _row(pred), "measured_bwt": _row(meas)})
    out: dict[str, Any] = {"orders": rows, "points": len(xs)}
    if not rows:
        out["reason"] = "no order of 3 or more stages: a pair's BWT is its own interference"
    elif len(xs) < 3:
        out["reason"] = ("fewer than 3 (order, seed) points with every pair measured: train --orders pairs into the "
                         "same run folder (shared prefixes are reused)")
    else:
        out["r"] = pearson(xs, ys)
        out["mae"] = float(np.mean(np.abs(np.asarray(xs) - np.asarray(ys))))
    return out


def _spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    from scipy import stats

    if len(x) < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return None
    return float(stats.spearmanr(x, y).statistic)


def predictor_report(features: Mapping[tuple[str, str], Mapping[str, Sequence[float | None]]],
                     interference: Mapping[tuple[str, str], Sequence[float | None]], *, min_pairs: int = 4,
                     n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Does a diagnostic of an ordered pair predict its measured interference?

    ``features[(a, b)][name]`` and ``interference[(a, b)]`` hold one value per seed. Per feature, over the
    pairs where both are known (seed means): Pearson and Spearman r, and a 95% percentile-bootstrap interval
    of Pearson r over pairs; then the held-out test: leave one pair out, fit ``y = alpha + beta x`` on the
    others' (pair, seed) points, predict the left-out pair's seeds; report the out-of-sample R² (against
    predicting the training pairs' mean) and the correlation of the predictions with the measured values.
    Below ``min_pairs`` pairs there is no test: ``status`` says so.
    """
    names = sorted({k for f in features.values() for k in f})
    out: dict[str, Any] = {"features": {}, "pairs": sorted(f"{a}->{b}" for a, b in interference)}
    rng = np.random.default_rng(seed)
    for name in names:
        pts: list[tuple[tuple[str, str], list[tuple[float, float]]]] = []
        for pair, ys in interference.items():
            xs = (features.get(pair) or {}).get(name) or []
            both = [(float(x), float(y)) for x, y in zip(xs, ys, strict=False)
                    if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
            if both:
                pts.append((pair, both))
        res: dict[str, Any] = {"pairs": len(pts), "points": sum(len(p) for _, p in pts)}
        if len(pts) < min_pairs:
            res["status"] = f"too few pairs ({len(pts)} < {min_pairs}): no correlation or held-out test"
            out["features"][name] = res
            continue
        mx = np.array([statistics.fmean(x for x, _ in p) for _, p in pts])
        my = np.array([statistics.fmean(y for _, y in p) for _, p in pts])
        res["pearson"], res["spearman"] = pearson(mx, my), _spearman(mx, my)
        boots = []
        for _ in range(n_boot):
            idx = rng.integers(0, len(mx), len(mx))
            r = pearson(mx[idx], my[idx])
            if r is not None:
                boots.append(r)
        res["pearson_low"], res["pearson_high"] = ((float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975)))
                                                   if len(boots) >= n_boot // 2 else (None, None))
        pred, true, base = [], [], []
        for i, (_, held) in enumerate(pts):
            train = [pt for j, (_, p) in enumerate(pts) if j != i for pt in p]
            tx, ty = np.array([x for x, _ in train]), np.array([y for _, y in train])
            if np.std(tx) == 0:
                beta, alpha = 0.0, float(ty.mean())
            else:
                beta, alpha = (float(c) for c in np.polyfit(tx, ty, 1))
            for x, y in held:
                pred.append(alpha + beta * x)
                true.append(y)
                base.append(float(ty.mean()))
        t, pr, b = np.array(true), np.array(pred), np.array(base)
        sse, sst = float(((t - pr) ** 2).sum()), float(((t - b) ** 2).sum())
        res["held_out"] = {"r2": (1 - sse / sst) if sst > 0 else None, "r": pearson(pr, t),
                           "mae": float(np.abs(t - pr).mean()), "mae_mean_only": float(np.abs(t - b).mean())}
        res["status"] = "ok"
        out["features"][name] = res
    return out


def order_findings(acc: Acc, orders: Sequence[Prefix], domains: Sequence[str], nodes: Sequence[Prefix],
                   replicates: Sequence[int]) -> dict[str, Any]:
    """Every finding of an order study from the accuracies (see the module docstring)."""
    reps = list(replicates)
    events = forgetting_events(acc, nodes, reps)
    stages = [d for d in domains if any(e["stage"] == d for e in events)]
    full = [o for o in orders if len(o) == max(len(x) for x in orders)]
    return {
        "matrix": pair_matrices(acc, domains, reps),
        "events": events,
        "harm": harm_by_stage(events, stages, reps),
        "by_position": forgetting_by_position(acc, full, reps),
        "orders": order_scores(acc, orders, reps),
        "pairwise_prediction": pairwise_prediction(acc, orders, reps),
    }


def forgetting_by_position(acc: Acc, orders: Sequence[Prefix], replicates: Sequence[int]) -> list[dict[str, Any]]:
    """Per (domain, its position in the order): its final forgetting ``acc(prefix to d, d) - acc(order, d)``,
    over the orders that place it there (per seed: their mean)."""
    cells: dict[tuple[str, int], list[Prefix]] = {}
    for o in orders:
        for i, d in enumerate(o):
            cells.setdefault((d, i + 1), []).append(o)
    out = []
    for (d, pos), os_ in sorted(cells.items()):
        vals: list[float | None] = []
        for r in replicates:
            xs = [_sub(_get(acc, o[:pos], d, r), _get(acc, o, d, r)) for o in os_]
            ok = [x for x in xs if x is not None]
            vals.append(statistics.fmean(ok) if ok and len(ok) == len(xs) else None)
        out.append(_row(vals, domain=d, position=pos, orders=len(os_)))
    return out


def _ci(row: dict[str, Any] | None, d: int = 3) -> str:
    if not row or row.get("mean") is None:
        return "-"
    s = f"{row['mean']:+.{d}f}"
    if row.get("low") is not None:
        s += f" [{row['low']:+.{d}f}, {row['high']:+.{d}f}]"
    return s + f" (n={row.get('n', 0)})"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}"


def summary_lines(data: Mapping[str, Any]) -> list[str]:
    """The order study's findings in words (the same numbers as orders.json)."""
    f = data["findings"]
    seeds = len(data["seeds"])
    out = [f"order study: {len(data['orders'])} orders of {', '.join(data['domains'])}, {seeds} seeds "
           "(mean [95% t interval over seeds])"]
    for r in f["matrix"]["pairs"]:
        out.append(f"  interference {r['first']} -> {r['second']}: {r['first']}/id drops {_ci(r)}; "
                   f"transfer to {r['second']}: {_ci(r['transfer'])}")
    h = f["harm"]
    if h.get("most_harmful"):
        p = h["p_most_harmful"].get(h["most_harmful"])
        out.append(f"  most harmful stage (positions {', '.join(map(str, h['positions']))}, each weighed the same): "
                   f"{h['most_harmful']} " + ("(one seed: no resampling)" if p is None
                                              else f"(most harmful in {p:.0%} of seed resamples)"))
        out += [f"    {r['stage']}: {_ci(r)}" for r in h["stages"]]
    else:
        out.append(f"  most harmful stage: not measured: {h.get('reason')}")
    for key, what in (("final_avg", "final average accuracy"), ("bwt", "BWT")):
        o = f["orders"].get(key)
        if o and o.get("best") is None:
            out.append(f"  {what}: no best order: {o.get('reason')}")
        elif o:
            out.append(f"  {what}: best {' -> '.join(o['best'])}, worst {' -> '.join(o['worst'])}, best minus worst "
                       f"{_ci(o['best_minus_worst'])}")
    for r in f["orders"]["orders"]:
        out.append(f"    {' -> '.join(r['order'])}: final avg {_ci(r['final_avg'])}, BWT {_ci(r['bwt'])}")
    pp = f["pairwise_prediction"]
    out.append("  pairwise matrix predicts the orders' BWT: " + (
        f"r = {_r(pp['r'])}, MAE {pp['mae']:.3f} over {pp['points']} (order, seed) points of {len(pp['orders'])} "
        "orders (no interval: the points of one order are not independent)" if pp.get("mae") is not None
        else f"not tested: {pp.get('reason')}"))
    for name, res in (data.get("predictors") or {}).get("features", {}).items():
        if res.get("status") != "ok":
            out.append(f"  does {name} predict interference? {res.get('status')}")
            continue
        ho = res["held_out"]
        out.append(f"  does {name} predict interference? Pearson r {_r(res['pearson'])} [{_r(res['pearson_low'])}, "
                   f"{_r(res['pearson_high'])}] over {res['pairs']} pairs; held out: R² {_r(ho['r2'])}, MAE "
                   f"{ho['mae']:.3f} vs {ho['mae_mean_only']:.3f} for the mean")
    return out
