"""``aclarena-diag consolidate``: consolidated models from the stage checkpoints, added to the manifest.

Each method (:data:`aclarena.consolidate.methods.METHODS`) consolidates every replicate of the
curriculum asked for (``--seeds N``: the run's first N chains; a run with fewer chains
repeats its first with another seed, which only methods with a seed of their own use).
Outputs go to ``<run>/checkpoints/<name>`` with ``kind = "consolidated"`` and ``method`` in the
manifest, so ``eval``, ``tokens``, ``vectors`` and ``compare`` include them; each is recorded
in results.h5 under ``consolidate/<name>``. A rerun reuses finished outputs. Methods and
settings: docs/consolidation.md. The work is :func:`aclarena.analysis.consolidate.consolidate`.
"""

from __future__ import annotations

import argparse
from typing import Any

from aclarena.cli._common import add_verb, manifest_of, print_json, print_table
from aclarena.errors import AclarenaError


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise AclarenaError(f"{what} {text!r} must be comma-separated numbers, e.g. 0.25,0.5,1") from None
    if not values:
        raise AclarenaError(f"{what} is empty; give e.g. 0.25,0.5,1")
    return values


def register(sub: argparse._SubParsersAction) -> None:
    from aclarena.consolidate.methods import METHODS

    listing = "; ".join(f"{m.name}: {m.summary}" for m in METHODS.values())
    p = add_verb(
        sub,
        "consolidate",
        help="consolidate the stage checkpoints (MMOPD, SDFT, merges, MLE) into new checkpoints of the run",
        description=f"Consolidate the curriculum's checkpoints and add the results to the manifest. Methods: {listing}.",
        examples=(
            "aclarena-diag consolidate --run runs/demo --method merge-uniform",
            "aclarena-diag consolidate --run runs/demo --method merge-ta --lambdas 0.25,0.5,1 --sources oracles",
            "aclarena-diag consolidate --run runs/demo --method mle --seeds 3 --routers rule,learned,bandit",
        ),
    )
    p.add_argument("--method", required=True, metavar="NAME", help=f"one of {', '.join(METHODS)}")
    p.add_argument("--seeds", type=int, default=1, metavar="N", help="replicates to consolidate (default 1)")
    p.add_argument("--force", action="store_true", help="redo outputs that are already there")
    g = p.add_argument_group("merges")
    g.add_argument("--sources", metavar="WHAT",
                   help="stages (the end of each stage, default), oracles, or comma-separated checkpoint names")
    g.add_argument("--lambdas", metavar="L,...", help="merge-ta: the λ sweep (default 0.25,0.5,0.75,1)")
    g.add_argument("--lam", type=float, metavar="L", help="merge-ties / merge-dare: λ (default 1 for TIES, 1/K for DARE)")
    g.add_argument("--density", type=float, help="merge-ties: share of each task vector kept (default 0.2)")
    g.add_argument("--drop", type=float, help="merge-dare: drop rate p (default 0.5)")
    g.add_argument("--name", metavar="PREFIX",
                   help="name of the output(s) instead of the method's (merge-ta: PREFIX-l<λ>; mle: PREFIX-<domain>; "
                        "replicate r >= 1 adds -s<r>)")
    t = p.add_argument_group("training methods (mmopd, sdft, mle)")
    t.add_argument("--n", type=int, metavar="N", help="tasks or prompts per domain (default: sized to the run)")
    t.add_argument("--steps", type=int, metavar="N", help="optimizer steps (mle: per expert)")
    t.add_argument("--batch", type=int, metavar="N",
                   help="per-device batch size (sdft: records per optimizer step, a multiple of the domains, "
                        "read in micro-batches of one domain's share)")
    t.add_argument("--lr", type=float, metavar="LR", help="learning rate")
    t.add_argument("--trl", action="append", default=[], metavar="FIELD=VALUE",
                   help="a trl config override (repeatable), e.g. --trl gradient_accumulation_steps=2")
    t.add_argument("--teachers", metavar="WHICH",
                   help="mmopd: each domain's teacher: oracle (default) or stage (the end of its stage)")
    t.add_argument("--divergence", metavar="D",
                   help="mmopd: per-token divergence: reverse KL (default), forward KL or js")
    t.add_argument("--start", metavar="FROM",
                   help="sdft: train from the base (default) or from the sequential end point (end)")
    t.add_argument("--lora-r", type=int, metavar="R", help="mle: LoRA rank of each expert (default 8)")
    t.add_argument("--lora-alpha", type=int, metavar="A", help="mle: LoRA alpha (default 2 x rank)")
    t.add_argument("--target-modules", metavar="M,...",
                   help="mle: modules the experts adapt (default q,k,v,o,gate,up,down projections)")
    r = p.add_argument_group("mle")
    r.add_argument("--routers", metavar="R,...",
                   help="routers to train and score: rule, learned, bandit (default all)")
    r.add_argument("--fallback", metavar="POLICY",
                   help="when no expert fits: backbone (serve the frozen backbone, default) or refuse (the MLE row "
                        "of `compare` then has no score for such suites)")
    r.add_argument("--router-reward", metavar="SIGNAL",
                   help="the bandit's success signal: measured (the experts' scores in the capability matrix), "
                        "simulated (0.8 on an expert's own domain, 0.1 elsewhere) or auto (measured when evaluated)")
    r.add_argument("--routers-only", action="store_true", help="train and score the routers only (no expert training)")
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> Any:
    """The method's options from the flags given (an option flag the method does not take is one line)."""
    from aclarena.consolidate.options import options_for

    given = {key: getattr(args, key) for key in ("sources", "density", "drop", "lam", "name", "teachers",
                                                  "divergence", "start", "n", "steps", "batch", "lr", "lora_r",
                                                  "lora_alpha", "target_modules", "fallback", "router_reward")
             if getattr(args, key) is not None}
    if args.lambdas is not None:  # `--lambdas ''` is refused, not read as the default
        given["lambdas"] = _floats(args.lambdas, "--lambdas")
    if args.routers is not None:
        given["routers"] = tuple(x.strip() for x in args.routers.split(",") if x.strip())
    if args.trl:
        given["trl"] = tuple(args.trl)
    if args.routers_only:
        given["routers_only"] = True
    return options_for(args.method, given)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.consolidate import consolidate

    result = consolidate(args.run, args.method, seeds=args.seeds, options=_options(args), force=args.force,
                         show_progress=not args.json, manifest=manifest_of(args))
    produced, notes = result.outputs, result.notes
    if args.json:
        print_json(result.to_dict())
        return 0
    if produced:
        print_table(produced, ["checkpoint", "method", "replicate", "parent", "on", "seconds", "status"],
                    title=f"consolidate --method {result.method}")
    for n in notes:
        print(f"note: {n}")
    if produced:
        print(f"next: aclarena-diag eval --run {args.run} --checkpoints "
              f"{','.join(p['checkpoint'] for p in produced)}; then aclarena-diag compare --run {args.run}")
    return 0
