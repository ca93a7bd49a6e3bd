"""``aclarena-diag compare``: the study-shaped comparison table of the consolidation methods.

Rows: the single-task oracles and the sequential end point (reference), then each
consolidation (its replicates together), then MLE routed by ``--router``; columns: in-domain
suites, then out-of-domain ones; cells: mean ± std over replicates. Read from the capability
matrix (run ``eval`` first); the work is :func:`aclarena.analysis.compare.compare`.
"""

from __future__ import annotations

import argparse
from typing import Any

from aclarena.cli._common import add_verb, manifest_of, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "compare",
        help="the study-shaped table: consolidation methods x suites (mean ± std over replicates), oracles and the "
             "sequential end point as reference rows",
        examples=(
            "aclarena-diag compare --run runs/demo",
            "aclarena-diag compare --run runs/demo --router learned --score avg",
            "aclarena-diag compare --run runs/demo --json",
        ),
    )
    p.add_argument("--router", default="rule", help="router whose choices make the MLE row: rule, learned, bandit "
                                                   "(default rule)")
    p.add_argument("--score", default="greedy", choices=("greedy", "avg"), help="greedy accuracy or avg@k (default greedy)")
    p.add_argument("--settings", metavar="ID", help="use only capability cells of this eval settings id")
    p.add_argument("--repair-stage", metavar="OLD,NEW",
                   help="score every consolidated model against the stage OLD -> NEW with the four-part repair score "
                        "(default: each repair against its own stage)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.compare import NO_METHODS, compare
    from aclarena.errors import AclarenaError

    pair = None
    if args.repair_stage is not None:
        parts = [p.strip() for p in args.repair_stage.split(",")]
        if len(parts) != 2 or not all(parts):
            raise AclarenaError(f"--repair-stage {args.repair_stage!r} must be OLD,NEW, e.g. seq-search,seq-ecom")
        pair = (parts[0], parts[1])
    result = compare(args.run, router=args.router, score=args.score, settings=args.settings,
                     manifest=manifest_of(args), repair_pair=pair)
    cmp = result.comparison
    if args.json:
        print_json(result.to_dict())
        return 0
    rows = []
    for r in cmp.rows:
        row: dict[str, Any] = {"model": r.label}
        for s in cmp.suites:
            row[s] = r.cells[s].text()
        rows.append(row)
    heads = ["model"] + [f"{s} (id)" if s in cmp.in_domain else s for s in cmp.suites]
    print_table(rows, ["model", *cmp.suites], headers=heads,
                title=f"consolidation methods ({cmp.score}; mean ± std over replicates)",
                caption="in-domain suites first, then out-of-domain; reference rows: oracles, sequential end point")
    if result.repairs:
        print_table([_score_row(r) for r in result.repairs],
                    ["checkpoint", "stage", "healing", "preservation", "non_damage", "target_retention"],
                    title="repairs: four-part score (value [95% bootstrap interval]; suites in docs/consolidation.md)",
                    caption="healing: share of the stage's loss won back; preservation: share of its held-out gains "
                            "kept; non-damage: accuracy kept where it changed nothing; target retention: share of "
                            "its own gain kept")
    for n in [*cmp.notes, *([] if result.has_methods else [NO_METHODS])]:
        print(f"note: {n}")
    return 0


def _score_row(r: Any) -> dict[str, Any]:
    import math

    from aclarena.diagnostics.repair_score import PARTS

    row: dict[str, Any] = {"checkpoint": r.checkpoint, "stage": f"{r.old} -> {r.new}"}
    for p in PARTS:
        part = r.score.part(p)
        row[p] = "-" if math.isnan(part.value) else (
            f"{part.value:.2f} [{part.ci[0]:.2f}, {part.ci[1]:.2f}] ({len(part.suites)} suites)")
    return row
