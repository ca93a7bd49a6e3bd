"""``aclarena-diag forgetting``: continual-learning metrics of the capability matrix.

Stage order is the manifest's chain of ``kind = "stage"`` checkpoints from the base; each
stage's domain is measured on its in-domain suite; oracles are the ``kind = "oracle"``
checkpoints of each domain. Formulas and sources: docs/cl-metrics.md. The work is
:func:`aclarena.analysis.forgetting.forgetting`.
"""

from __future__ import annotations

import argparse

from aclarena.cli._common import add_verb, manifest_of, parse_suite_of, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "forgetting",
        help="continual-learning metrics (ACC, BWT, FWT, forgetting, retention, sample-wise) of the capability matrix",
        examples=(
            "aclarena-diag forgetting --run runs/demo",
            "aclarena-diag forgetting --run runs/mine --suite-of math=lm-eval/aime24 --json",
        ),
    )
    p.add_argument("--chain", metavar="NAME", help="last stage of the chain to measure (when the manifest has several)")
    p.add_argument("--suite-of", action="append", default=[], metavar="DOMAIN=SUITE",
                   help="suite measuring a stage's domain (default DOMAIN/id); repeatable")
    p.add_argument("--settings", metavar="ID", help="use only cells of this eval settings id (default: latest cells)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.forgetting import LABELS, forgetting

    manifest = manifest_of(args)
    suite_of = parse_suite_of(args.suite_of)
    out = forgetting(args.run, chain=args.chain, suite_of=suite_of, settings=args.settings,
                     manifest=manifest).to_dict()
    if args.json:
        print_json(out)
        return 0
    print_table([{"metric": LABELS[k], "value": v} for k, v in out["summary"].items()], ["metric", "value"],
                title="continual-learning metrics, chain " + " -> ".join(out["chain"]),
                caption="higher is better for accuracy, transfer and retention; lower for forgetting")
    print_table(out["domains"], ["domain", "suite", "base", "after_own_stage", "best_before_final", "final",
                                 "forgetting_max", "forgetting_first_last", "oracle_score", "retention",
                                 "sample_forgetting"],
                title="per stage domain")
    cols = ["suite", *out["chain"], "peak_at", "peak_drop"]
    rows = [{"suite": s["suite"], **dict(zip(out["chain"], s["scores"], strict=True)), "peak_at": s["peak_at"],
             "peak_drop": s["peak_drop"]} for s in out["along_chain"]]
    print_table(rows, cols, title="every suite along the chain", caption="peak_drop = best before the end - final")
    flips = [{"suite": s["suite"], "chance": s["chance"], **t} for s in out["along_chain"] for t in s["transitions"]]
    if flips:
        print_table(flips, ["suite", "chance", "from", "to", "n", "forgotten", "gained", "sample_forgetting",
                            "sample_forgetting_chance_adjusted", "sample_forgetting_2510_17776",
                            "sample_backward_transfer", "sample_backward_transfer_chance_adjusted"],
                    title="sample-wise flips on suites a guess can solve, plain and chance-adjusted",
                    caption="chance_adjusted: aclarena's know-or-guess estimate (unclipped); 2510_17776: the "
                            "estimator of that paper's code, max(0, p10 - (1-a0)(1-a1)/(k-1)); two different "
                            "numbers, never compare one with the other (docs/cl-metrics.md)")
    if out["consolidated"]:
        print_table(out["consolidated"], ["checkpoint", "average_accuracy", "backward_transfer", "forgetting_max",
                                          "retention_vs_oracle"],
                    title="consolidated models in place of the last stage")
    for note in out["notes"]:
        print(f"note: {note}")
    return 0
