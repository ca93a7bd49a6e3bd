"""``aclarena-diag consolidate``: consolidated models from the stage checkpoints, added to the manifest.

Each method (:data:`aclarena.consolidate.methods.METHODS`) consolidates every replicate of the
curriculum asked for (``--seeds N``: the run's first N chains; a run with fewer chains
repeats its first with another seed, which only methods with a seed of their own use).
Outputs go to ``<run>/checkpoints/<name>`` with ``kind = "consolidated"`` and ``method`` in the
manifest, so ``eval``, ``tokens``, ``vectors`` and ``compare`` include them; each is recorded
in results.h5 under ``consolidate/<name>``. A rerun reuses finished outputs. Methods and
settings: docs/consolidation.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from aclarena.cli._common import add_verb, manifest_of, print_json, print_table, progress
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
    g.add_argument("--sources", default="stages", metavar="WHAT",
                   help="stages (the end of each stage, default), oracles, or comma-separated checkpoint names")
    g.add_argument("--lambdas", metavar="L,...", help="merge-ta: the λ sweep (default 0.25,0.5,0.75,1)")
    g.add_argument("--lam", type=float, metavar="L", help="merge-ties / merge-dare: λ (default 1 for TIES, 1/K for DARE)")
    g.add_argument("--density", type=float, default=0.2, help="merge-ties: share of each task vector kept (default 0.2)")
    g.add_argument("--drop", type=float, default=0.5, help="merge-dare: drop rate p (default 0.5)")
    g.add_argument("--name", metavar="PREFIX", help="name of the output(s) instead of the method's")
    t = p.add_argument_group("training methods (mmopd, sdft, mle)")
    t.add_argument("--n", type=int, metavar="N", help="tasks or prompts per domain (default: sized to the run)")
    t.add_argument("--steps", type=int, metavar="N", help="optimizer steps (mle: per expert)")
    t.add_argument("--batch", type=int, metavar="N", help="per-device batch size (sdft: a multiple of the domains)")
    t.add_argument("--lr", type=float, metavar="LR", help="learning rate")
    t.add_argument("--trl", action="append", default=[], metavar="FIELD=VALUE",
                   help="a trl config override (repeatable), e.g. --trl gradient_accumulation_steps=2")
    t.add_argument("--teachers", default="oracle", metavar="WHICH",
                   help="mmopd: each domain's teacher: oracle (default) or stage (the end of its stage)")
    t.add_argument("--divergence", default="reverse", metavar="D",
                   help="mmopd: per-token divergence: reverse KL (default), forward KL or js")
    t.add_argument("--start", default="base", metavar="FROM",
                   help="sdft: train from the base (default) or from the sequential end point (end)")
    t.add_argument("--lora-r", type=int, default=8, metavar="R", help="mle: LoRA rank of each expert (default 8)")
    t.add_argument("--lora-alpha", type=int, metavar="A", help="mle: LoRA alpha (default 2 x rank)")
    t.add_argument("--target-modules", metavar="M,...",
                   help="mle: modules the experts adapt (default q,k,v,o,gate,up,down projections)")
    r = p.add_argument_group("mle")
    r.add_argument("--routers", default="rule,learned,bandit", metavar="R,...",
                   help="routers to train and score: rule, learned, bandit (default all)")
    r.add_argument("--fallback", default="backbone", metavar="POLICY",
                   help="when no expert fits: backbone (serve the frozen backbone, default) or refuse (the MLE row "
                        "of `compare` then has no score for such suites)")
    r.add_argument("--router-reward", default="auto", metavar="SIGNAL",
                   help="the bandit's success signal: measured (the experts' scores in the capability matrix), "
                        "simulated (0.8 on an expert's own domain, 0.1 elsewhere) or auto (measured when evaluated)")
    r.add_argument("--routers-only", action="store_true", help="train and score the routers only (no expert training)")
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {"method": args.method, "sources": args.sources, "density": args.density, "drop": args.drop,
                            "lam": args.lam, "name": args.name}
    if args.lambdas is not None:  # `--lambdas ''` is refused, not read as the default
        opts["lambdas"] = _floats(args.lambdas, "--lambdas")
    opts["routers"] = [x.strip() for x in args.routers.split(",") if x.strip()]
    opts |= {"fallback": args.fallback, "router_reward": args.router_reward,
             "routers_only": args.routers_only}
    for key in ("teachers", "divergence", "start", "n", "steps", "batch", "lr", "trl", "lora_r", "lora_alpha",
                "target_modules"):
        if getattr(args, key, None) is not None:
            opts[key] = getattr(args, key)
    return opts


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from aclarena.consolidate.methods import (
        RESULT_ROOT,
        RESULT_TYPE,
        RESULT_VERSION,
        Job,
        get_method,
        run_method,
    )
    from aclarena.consolidate.sources import pick
    from aclarena.store import Json, ResultsStore, load_manifest, write_manifest
    from aclarena.store.manifest import manifest_path

    method = get_method(args.method)
    manifest = manifest_of(args)
    options = _options(args)
    lineages = pick(manifest, args.seeds)
    store = ResultsStore(args.run)
    run_dir = Path(args.run)
    notes: list[str] = []
    produced: list[dict[str, Any]] = []
    show = not args.json
    with progress(enabled=show) as bar:
        task = bar.add_task(f"consolidate {method.name}", total=len(lineages))
        for lin in lineages:
            if lin.repeat and not method.seeded:
                notes.append(f"replicate {lin.replicate}: the run has one chain and {method.name} has no seed of its "
                             "own, so it would repeat replicate 0; skipped")
                bar.advance(task)
                continue
            seed = lin.seed if lin.seed is not None else lin.replicate
            job = Job(run_dir=run_dir, manifest=manifest, lineage=lin, options=options, seed=seed, force=args.force,
                      progress=lambda text: bar.update(task, description=f"consolidate {text}"))
            for out in run_method(method, job):
                manifest = load_manifest(run_dir)
                existing = manifest.checkpoints.get(out.spec.name)
                if existing is not None and existing.kind != "consolidated":
                    raise AclarenaError(f"{out.spec.name!r} is already a {existing.kind} checkpoint of the manifest; "
                                        "give the consolidation another --name")
                manifest.add(out.spec, replace_existing=True)
                write_manifest(manifest, run_dir)
                text = manifest_path(run_dir).read_text(encoding="utf-8")
                data: dict[str, Any] = {"settings": Json(dict(out.settings))} | dict(out.data)
                store.write(f"{RESULT_ROOT}/{out.spec.name}", data, result_type=RESULT_TYPE,
                            result_version=RESULT_VERSION,
                            attrs={"method": method.name, "replicate": lin.replicate, "seed": seed,
                                   "seconds": out.seconds, "reused": out.reused, "settings": dict(out.settings)},
                            overwrite=True, manifest_text=text)
                produced.append({"checkpoint": out.spec.name, "method": method.name, "replicate": lin.replicate,
                                 "seed": seed, "parent": out.spec.parent, "on": out.spec.on, "domain": out.spec.domain,
                                 "seconds": round(out.seconds, 2), "status": "reused" if out.reused else "made",
                                 "settings": dict(out.settings)})
            notes.extend(job.notes)
            bar.advance(task)
    if args.json:
        print_json({"method": method.name, "outputs": produced, "notes": notes})
        return 0
    if produced:
        print_table(produced, ["checkpoint", "method", "replicate", "parent", "on", "seconds", "status"],
                    title=f"consolidate --method {method.name}")
    for n in notes:
        print(f"note: {n}")
    if produced:
        print(f"next: aclarena-diag eval --run {args.run} --checkpoints "
              f"{','.join(p['checkpoint'] for p in produced)}; then aclarena-diag compare --run {args.run}")
    return 0
