"""A synthetic order study written into a run's store (the Orders page and figure tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

D3 = ["math", "search", "ecom"]
#: each later stage lowers every earlier domain by HARM[stage] (plus 0.01 per seed): ecom harms most
HARM = {"math": 0.02, "search": 0.05, "ecom": 0.20}


def truth(prefix: tuple[str, ...], d: str, r: int) -> float:
    if d not in prefix:
        return 0.0
    return 0.6 - sum(HARM[e] for e in prefix[prefix.index(d) + 1:]) + 0.01 * r * (len(prefix) > 1)


def synthetic_study(design: str = "pairs", seeds: int = 3) -> dict[str, Any]:
    """What orders.json holds for ``design`` over :data:`D3` with accuracies from :func:`truth`."""
    from aclarena.diagnostics.orders import design_orders, order_findings, plan_orders
    from aclarena.train.naming import order_node_name as node_name

    orders = design_orders(design, D3)
    pairs = design_orders("pairs", D3)
    plan = plan_orders(orders + [p for p in pairs if p not in orders], seeds)
    reps = list(range(seeds))
    acc = {(p, d, r): truth(p, d, r) for p in ((), *plan.nodes) for d in D3 for r in reps}
    return {"design": design, "domains": D3, "orders": [list(o) for o in orders], "seeds": reps,
            "plan": plan.to_dict(node_name), "cells": {node_name(p): {d: [acc[(p, d, r)] for r in reps] for d in D3}
                                              for p in ((), *plan.nodes)},
            "findings": order_findings(acc, orders, D3, plan.nodes, reps), "pairs": [], "predictors": {},
            "part_times": {}, "errors": {}}


def write_study(run_dir: Path, data: dict[str, Any]) -> None:
    from aclarena.results.orders import OrderStudyData, write_orders_result

    write_orders_result(run_dir, OrderStudyData.from_json(data))
