"""``aclarena-diag repair``: training-free repair of what a stage forgot, from its two checkpoints.

``--from OLD --to NEW``: the stage that forgot took OLD to NEW. Methods: ``svd-restore`` (the
update's top ``--rank-percent`` singular directions back to OLD; a comma list makes one checkpoint
per value), ``dg-hard`` (the Donoho–Gavish hard threshold of each update matrix), ``layer-rollback``
(layer blocks back to OLD: ``--layers``, or ``--select first|displacement|cosine`` with
``--fraction``/``--count``; ``--modules`` restricts any method to tensors matching fnmatch patterns).
LoRA stages are repaired on their factors into an adapter. Outputs are consolidated checkpoints of
the run; the work is :func:`aclarena.analysis.repair.repair`.
Methods and results: docs/consolidation.md.
"""

from __future__ import annotations

import argparse

from aclarena.cli._common import add_verb, manifest_of, print_json, print_table, progress, progress_enabled


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "repair",
        help="repair what a stage forgot from its two checkpoints (svd-restore, dg-hard, layer-rollback), no training",
        description="Repair what a stage forgot from its two checkpoints (svd-restore, dg-hard, layer-rollback), no "
                    "training. When OLD or NEW is a LoRA adapter (the other being the model it is on, or another "
                    "adapter on that model), the repair works on the adapters' factors and writes an adapter on "
                    "that model; an adapter on another adapter (a chain of adapter stages) counts as the sum of "
                    "its chain's factors on the full model at the chain's end.",
        examples=(
            "aclarena-diag repair --run runs/demo --from seq-search --to seq-ecom --method svd-restore "
            "--rank-percent 10,25,50 --name ecom-svd",
            "aclarena-diag repair --run runs/demo --from seq-search --to seq-ecom --method dg-hard --name ecom-dg",
            "aclarena-diag repair --run runs/demo --from seq-search --to seq-ecom --method layer-rollback "
            "--select cosine --fraction 0.25 --name ecom-roll",
        ),
    )
    p.add_argument("--from", dest="old", required=True, metavar="OLD", help="the checkpoint before the stage")
    p.add_argument("--to", dest="new", required=True, metavar="NEW", help="the checkpoint after it (the one repaired)")
    p.add_argument("--method", required=True, metavar="M", help="svd-restore, dg-hard or layer-rollback")
    p.add_argument("--name", required=True, metavar="OUT",
                   help="the output checkpoint (svd-restore with several percents: OUT-r<percent> each)")
    p.add_argument("--rank-percent", metavar="R[,R...]",
                   help="svd-restore: percent of each update's singular directions restored to OLD, in (0, 100] "
                        "(default 25; a comma list sweeps)")
    p.add_argument("--modules", metavar="PAT[,PAT...]", default="",
                   help="repair only tensors whose names match these fnmatch patterns, e.g. '*.mlp.*'")
    p.add_argument("--layers", metavar="I,J-K", help="layer-rollback: the layers to roll back, e.g. 0-1")
    p.add_argument("--select", metavar="HOW",
                   help="layer-rollback: first (default), displacement (largest update) or cosine (lowest cosine with "
                        "the new domain's oracle)")
    p.add_argument("--fraction", type=float, default=0.25, help="layer-rollback: share of layers (default 0.25)")
    p.add_argument("--count", type=int, metavar="N", help="layer-rollback: number of layers instead of --fraction")
    p.add_argument("--compute-dtype", default="float32", metavar="DT", help="SVD precision: float32 (default), float64")
    p.add_argument("--force", action="store_true", help="redo outputs that are already there")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.repair import RepairOptions, repair

    options = RepairOptions(method=args.method, name=args.name, percents=args.rank_percent, modules=args.modules,
                            layers=args.layers, select=args.select, fraction=args.fraction, count=args.count,
                            compute_dtype=args.compute_dtype, force=args.force)
    with progress(enabled=progress_enabled(args)) as bar:
        task = bar.add_task("repair", total=None, unit="tensors")
        result = repair(args.run, args.old, args.new, options, manifest=manifest_of(args),
                        progress=lambda text: bar.update(task, description=f"repair {text}", completed=0),
                        on_tensor=lambda done, total: bar.update(task, completed=done, total=total))
    if args.json:
        print_json(result.to_dict())
        return 0
    rows = [o.row() | {"parameters": ", ".join(f"{k}={v}" for k, v in o.parameters.items() if k != "method"),
                       "layers": ",".join(o.layers)} for o in result.outputs]
    print_table(rows, ["checkpoint", "method", "parameters", "tensors_repaired", "energy_removed", "directions_kept",
                       "layers", "seconds", "status"], title=f"repair {args.new} from {args.old}")
    for o in result.outputs:
        for note in o.notes:
            print(f"note: {o.checkpoint}: {note}")
    names = ",".join(o.checkpoint for o in result.outputs)
    print(f"next: aclarena-diag eval --run {args.run} --checkpoints {names}; then aclarena-diag compare --run {args.run}")
    return 0
