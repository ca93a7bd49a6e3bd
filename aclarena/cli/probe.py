"""``aclarena-diag probe``: freeze a reference checkpoint's generations as a probe set."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from aclarena.analysis.probe import DEFAULT_DOMAIN_N, describe, freeze_probe
from aclarena.cli._common import (
    add_load_options,
    add_verb,
    load_options,
    manifest_of,
    print_json,
    print_table,
    print_warnings,
    quiet_libraries,
)


def add_probe_source_options(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompts", metavar="FILE.jsonl",
                     help='prompts, one JSON object per line: {"messages": [...], "tools": [...]} or {"prompt": "..."}')
    src.add_argument("--domain", metavar="D", help="sample prompts of domain D: the run's own suites of that domain "
                     "(their few-shot examples included), else the mini arena's (math, search, ecom, if)")
    src.add_argument("--from-traces", metavar="FILE.jsonl", dest="from_traces",
                     help="import complete conversations instead of generating (assistant tokens are scored)")
    p.add_argument("-n", type=int, default=None, metavar="N",
                   help=f"number of prompts (default: all lines of a file, {DEFAULT_DOMAIN_N} for --domain)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="T", help="tokens to generate per prompt (default 128)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="sampling temperature; 0 = greedy (default)")
    p.add_argument("--seed", type=int, default=0, help="random seed for prompts and sampling (default 0)")
    p.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                   help="generate with transformers (hf, default) or vLLM (GPU machines, the gpu extra)")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "probe",
        help="freeze generations of a reference checkpoint as a probe set (for `tokens`)",
        description="Generate from the reference checkpoint on prompts (or import traces) and store the token ids, "
        "the mask of the tokens the model generated, the texts and the generation settings.",
        examples=(
            "aclarena-diag probe --ref seq-math --run runs/demo --domain math -n 64",
            "aclarena-diag probe --ref seq-math --run runs/mine --prompts prompts.jsonl --max-new-tokens 256",
            "aclarena-diag probe --ref seq-ecom --run runs/mine --from-traces rollouts.jsonl --name ecom-traces",
        ),
    )
    p.add_argument("--ref", required=True, metavar="NAME", help="the reference checkpoint (a manifest name)")
    p.add_argument("--name", metavar="P", help="name of the probe set (default: the reference's name)")
    add_probe_source_options(p)
    p.add_argument("--batch-size", type=int, default=8, metavar="B", help="prompts per generate call (default 8)")
    p.add_argument("--force", action="store_true", help="replace an existing probe set of that name (and its scores)")
    add_load_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.distributed import world

    with world(args.device) as w:
        return _run(args, w)


def _run(args: argparse.Namespace, w: Any) -> int:
    from aclarena.probes.generation import GenerationSettings
    from aclarena.store import ResultsStore

    quiet_libraries()
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                                  batch_size=args.batch_size)
    probe = freeze_probe(args.run, args.ref, name=args.name, prompts_file=args.prompts, domain=args.domain,
                         traces_file=args.from_traces, n=args.n, settings=settings, load=load_options(args),
                         force=args.force, show_progress=not args.json, world=w, engine=args.engine,
                         manifest=manifest_of(args))
    if probe is None:  # another rank than 0: its share is with rank 0, which writes
        return 0
    row = describe(probe)
    if args.json:
        print_json(row)
    else:
        print_table([row], ["probe", "reference", "source", "sequences", "tokens", "scored", "mean_scored_per_sequence"],
                    headers=["probe", "reference", "source", "sequences", "tokens", "scored", "scored/seq"],
                    title=f"probe set stored in {ResultsStore(args.run).path}")
    if row.get("prompts") and not args.json:
        print(f"note: prompts from {row['prompts']}")
    for line in row["notes"]:
        print(f"aclarena-diag probe: note: {line}", file=sys.stderr)
    print_warnings(probe.warnings, "probe")
    return 0
