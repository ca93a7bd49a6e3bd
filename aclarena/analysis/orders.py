"""The curriculum-order study (``aclarena-diag study --orders SPEC``): train a design of orders with seeds,
sharing prefixes, evaluate every prefix's end, and say whether the order matters and whether the
diagnostics predict it.

:func:`prepare` parses the design against the curriculum and plans it (:mod:`aclarena.diagnostics.orders`),
refusing one over its stage budget unless asked; :func:`run_orders` trains the prefix tree
(:func:`aclarena.train.orders.train_orders`), scores every node and the base on each domain's in-domain
suite (greedy, ``n`` tasks; also the pairs a longer order's pairwise prediction needs, where another design
trained them into the folder: :func:`trained_pairs`), computes the findings
(:func:`aclarena.diagnostics.orders.order_findings`), then per ordered pair a -> b (the nodes of length two)
three diagnostics of the second stage:

* ``cos``: the task-vector cosine of the two stage updates, ``cos(θ_a − θ_base, θ_ab − θ_a)`` (``vectors``);
* ``sft_rl``: ‖Δθ‖ of b's SFT phase over ‖Δθ‖ of its RL phase (``displacement``; stages of two phases);
* ``kl_share_high``: b's drift signature, the share of its KL at the top 6% entropy positions of its
  parent's own generations (``signatures``);

and the exact one-sided McNemar p of a's drop per seed (``flips``' paired counts), and reports, on held-out
pairs, whether each diagnostic predicts the measured interference
(:func:`aclarena.diagnostics.orders.predictor_report`). Everything goes to ``orders.json`` in the run folder
(strict JSON) and to ``orders/summary`` in results.h5 (the Orders page and ``export`` read it). Every part is
resumable, as ``study``'s.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.analysis import steps as analyses
from aclarena.analysis._common import Pair, num
from aclarena.analysis.steps import Parts, attempt, pair_arg
from aclarena.diagnostics.orders import (
    OrderPlan,
    Prefix,
    design_orders,
    order_findings,
    plan_orders,
    predictor_report,
)
from aclarena.errors import AclarenaError
from aclarena.results.orders import OrderStudyData, write_orders_result
from aclarena.train.naming import order_node_name

ORDERS_FILE = "orders.json"
#: stages (over every seed) a design may train without ``--yes``: the mini arena's pairs with 3 seeds
DEFAULT_MAX_STAGES = 48
FEATURES = ("cos", "sft_rl", "kl_share_high")
SIGNATURE_N = 32


@dataclass
class OrderSetup:
    """A planned order study: the design, the plan, the stages still to train and their training steps."""

    spec: str
    domains: list[str]
    orders: list[Prefix]
    plan: OrderPlan
    todo_stages: int
    todo_steps: int | None

    def plan_json(self) -> dict[str, Any]:
        """The plan as JSON, with its checkpoints' names."""
        return self.plan.to_dict(order_node_name)

    def lines(self) -> list[str]:
        steps = "" if self.todo_steps is None else f", {self.todo_steps} training steps"
        return [*self.plan.lines(order_node_name), f"still to train in this run folder: {self.todo_stages} stages{steps}"]


@dataclass
class OrderStudy:
    """What :func:`run_orders` found."""

    out: Path
    setup: OrderSetup
    seeds: list[int]
    cells: dict[str, dict[str, list[float | None]]]
    findings: dict[str, Any]
    pairs: list[dict[str, Any]]
    predictors: dict[str, Any]
    part_times: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)

    def payload(self, made_by: dict[str, Any] | None = None) -> OrderStudyData:
        """The stored form of this study (:mod:`aclarena.results.orders`)."""
        return OrderStudyData.from_json(self.to_json() | ({} if made_by is None else {"made_by": made_by}))

    def to_json(self) -> dict[str, Any]:
        return {"design": self.setup.spec, "domains": self.setup.domains,
                "orders": [list(o) for o in self.setup.orders], "seeds": self.seeds,
                "plan": self.setup.plan_json(), "cells": self.cells, "findings": self.findings,
                "pairs": self.pairs, "predictors": self.predictors, "part_times": self.part_times,
                "errors": self.errors}


def prepare(cfg: Any, out: str | os.PathLike[str], spec: str, seeds: int, *, max_stages: int = DEFAULT_MAX_STAGES,
            yes: bool = False, check_budget: bool = True) -> OrderSetup:
    """Parse and plan ``spec`` on ``cfg``'s domains; refuse (one line) a design over ``max_stages`` stages still
    to train, unless ``yes``."""
    from aclarena.train.orders import order_jobs, to_train

    if max_stages < 1:
        raise AclarenaError(f"--max-stages must be >= 1, got {max_stages}")
    known = [s.domain for s in cfg.stages]
    orders = design_orders(spec, known)
    domains = [d for d in known if any(d in o for o in orders)]  # the design's, in the curriculum's order
    plan = plan_orders(orders, seeds)
    jobs = [j for j in order_jobs(cfg, plan) if j.kind != "base"]
    todo = to_train(out, jobs) if Path(out).exists() else jobs
    stages = len({(j.replicate, _prefix_of(j, plan)) for j in todo})
    steps_each = [j.spec.trl.get("max_steps") if j.spec is not None else None for j in todo]
    steps = sum(s for s in steps_each if isinstance(s, int)) if all(isinstance(s, int) for s in steps_each) else None
    setup = OrderSetup(spec, domains, orders, plan, stages, steps)
    if check_budget and stages > max_stages and not yes:
        raise AclarenaError(f"--orders {spec} with {seeds} seeds would train {stages} stages"
                            f"{'' if steps is None else f' ({steps} training steps)'}, over the budget of {max_stages} "
                            "(--max-stages); pass --yes to train them, or use fewer seeds or a smaller design")
    return setup


def _prefix_of(job: Any, plan: OrderPlan) -> Prefix:
    for p in plan.nodes:
        if job.name in (order_node_name(p, job.replicate), order_node_name(p, job.replicate, job.phase)):
            return p
    raise AssertionError(job.name)


def trained_pairs(cfg: Any, out: str | os.PathLike[str], orders: Sequence[Prefix], plan: OrderPlan) -> list[Prefix]:
    """The ordered pairs that the pairwise prediction of the design's orders of three or more stages needs and the
    design does not train (``(a, c)`` of ``a, b, c``), where the run folder holds them finished for every seed
    (``--orders pairs`` into the same folder), after the first stages among them the design lacks: they are
    evaluated and read like the design's own nodes."""
    from aclarena.train.orders import order_jobs, to_train

    want = sorted({(o[i], o[j]) for o in orders if len(o) >= 3 for i in range(len(o)) for j in range(i + 1, len(o))}
                  - set(plan.nodes))
    if not want or not Path(out).exists():
        return []
    pairs = plan_orders(want, plan.seeds)
    todo = to_train(out, [j for j in order_jobs(cfg, pairs) if j.kind != "base"])
    missing = {_prefix_of(j, pairs) for j in todo}
    ready = [p for p in want if p not in missing and p[:1] not in missing]
    return [*sorted({p[:1] for p in ready} - set(plan.nodes)), *ready]


def accuracies(cells: dict[tuple[str, str], float], nodes: Sequence[Prefix], seeds: int,
               domains: Sequence[str]) -> dict[tuple[Prefix, str, int], float]:
    """``acc[(prefix, domain, replicate)]`` from ``(checkpoint, suite)`` greedy means (the base is every
    replicate's empty prefix)."""
    acc: dict[tuple[Prefix, str, int], float] = {}
    for r in range(seeds):
        for p in ((), *nodes):
            for d in domains:
                v = cells.get((order_node_name(p, r), f"{d}/id"))
                if v is not None:
                    acc[(p, d, r)] = v
    return acc


def run_orders(cfg: Any, out: str | os.PathLike[str], spec: str, *, seeds: int, n: int = 100,
               max_stages: int = DEFAULT_MAX_STAGES, yes: bool = False, diagnostics: bool = True,
               show_progress: bool = False, config_text: str | None = None, command: str | None = None,
               on_start: Callable[[str], None] | None = None,
               on_part: Callable[[str, float], None] | None = None) -> OrderStudy:
    """Plan, train, evaluate and analyse the order design ``spec`` (see the module docstring)."""
    from aclarena.train.orders import train_orders

    if n < 1:
        raise AclarenaError(f"-n must be >= 1, got {n}")
    setup = prepare(cfg, out, spec, seeds, max_stages=max_stages, yes=yes)
    plan, domains = setup.plan, setup.domains
    out = Path(out)
    run = str(out)
    parts = Parts(on_start, on_part)
    times, errors, part, verb = parts.times, parts.errors, parts.part, parts.verb

    part("train", lambda: train_orders(cfg, out, plan, show_progress=show_progress, config_text=config_text))
    extra = trained_pairs(cfg, out, setup.orders, plan)
    nodes = (*plan.nodes, *extra)
    names = ["base", *(order_node_name(p, r) for r in range(seeds) for p in nodes)]
    suites = ",".join(f"{d}/id" for d in domains)
    ev = part("eval", lambda: verb("eval", "eval", functools.partial(analyses.eval_cells, run, names, suites, n)))
    from aclarena.analysis.study_findings import cells_of

    cells = cells_of(ev)
    acc = accuracies(cells, nodes, seeds, domains)
    reps = list(range(seeds))
    found = order_findings(acc, setup.orders, domains, plan.nodes, reps)
    pairs = [p for p in plan.nodes if len(p) == 2]
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {"features": {}, "pairs": []}
    if diagnostics and pairs:
        rows = part("diagnostics", lambda: _pair_diagnostics(run, pairs, reps, verb, errors))
        inter = {(r["first"], r["second"]): r["values"] for r in found["matrix"]["pairs"]}
        feats = {(r["first"], r["second"]): {f: r[f] for f in FEATURES} for r in rows}
        report = predictor_report(feats, inter)
    table = {order_node_name(p): {d: [acc.get((p, d, r)) for r in reps] for d in domains} for p in ((), *nodes)}
    result = OrderStudy(out=out, setup=setup, seeds=[cfg.seed + r for r in reps], cells=table, findings=found,
                        pairs=rows, predictors=report, part_times=times, errors=errors)
    write_orders(result, command=command or f"aclarena-diag study --orders {spec} --run {out} --seeds {seeds} -n {n}")
    return result


def _pair_diagnostics(run: str, pairs: Sequence[Prefix], reps: Sequence[int], verb: Callable[..., Any],
                      errors: dict[str, str]) -> list[dict[str, Any]]:
    """Per ordered pair and seed: cos, SFT/RL ratio, KL share at the top 6% (b's stage), McNemar p of a's drop."""
    from aclarena.analysis.paired import paired_change

    disp = verb("displacement", "displacement", lambda: analyses.displacement(run))
    norms = {} if disp is None else disp.stage_norms()
    # per (pair, seed): a's update from the base and b's from a, each as its two checkpoints
    asked: dict[tuple[Prefix, int], Pair] = {
        (p, r): ((order_node_name(p[:1], r), "base"), (order_node_name(p, r), order_node_name(p[:1], r))) for p in pairs for r in reps}
    vec = verb("vectors", "vectors", functools.partial(analyses.vectors, run, [pair_arg(x) for x in asked.values()]))
    cos = {} if vec is None else vec.asked_cosines()
    updates = [f"{order_node_name(p[:1], r)}..{order_node_name(p, r)}" for p in pairs for r in reps]
    sig = verb("signatures", "signatures", functools.partial(analyses.signatures, run, SIGNATURE_N, updates))
    # b's stage signed on a's generations: by its parent and child checkpoints and the domain
    kl = {} if sig is None else {(s.parent, s.child, s.domain): s.value("kl_share_high") for s in sig.signed()}
    out = []
    for p in pairs:
        a, b = p
        row: dict[str, Any] = {"first": a, "second": b, "cos": [], "sft_rl": [], "kl_share_high": [], "p_drop": [],
                               "lost": [], "gained": []}
        for r in reps:
            row["cos"].append(num(cos.get(asked[(p, r)])))
            sft, rl = norms.get(order_node_name(p, r, "sft")), norms.get(order_node_name(p, r))
            row["sft_rl"].append(num(sft / rl) if isinstance(sft, int | float) and isinstance(rl, int | float) and rl
                                 else None)
            row["kl_share_high"].append(num(kl.get((order_node_name(p[:1], r), order_node_name(p, r), b))))
            pc, err = attempt("flips", functools.partial(paired_change, run, order_node_name(p[:1], r), order_node_name(p, r),
                                                         [f"{a}/id"]))
            got = (pc or {}).get(f"{a}/id", {})
            if err or "error" in got:
                errors[f"mcnemar {a}->{b}{'' if not r else f' seed {r}'}"] = err or got["error"]
            row["p_drop"].append(num(got.get("p_drop")))
            row["lost"].append(got.get("lost"))
            row["gained"].append(got.get("gained"))
        out.append(row)
    return out


def write_orders(result: OrderStudy, *, command: str) -> Path:
    """``orders.json`` in the run folder (strict JSON, written whole then renamed) and ``orders/summary`` in
    results.h5."""
    from aclarena.reproducibility import made_by

    payload = result.payload(made_by(command))
    path = analyses.write_report(result.out / ORDERS_FILE, payload.to_json())
    write_orders_result(result.out, payload)
    return path

