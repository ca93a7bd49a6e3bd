"""``aclarena-diag checkpoints``: list a run's checkpoints and whether each can be loaded."""

from __future__ import annotations

import argparse

from aclarena.cli._common import add_verb, human_count, manifest_of, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "checkpoints",
        help="list a run's checkpoints: lineage, size, dtype, tokenizer, loadable or why not",
        examples=(
            "aclarena-diag checkpoints --run runs/demo",
            "aclarena-diag checkpoints --run runs/demo --json",
        ),
    )
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle weights (pytorch_model.bin)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.checkpoints import checkpoints

    result = checkpoints(args.run, allow_pickle=args.allow_pickle, manifest=manifest_of(args))
    if args.json:
        print_json(result.to_dict())
    else:
        rows = result.rows
        shown = [r | {"parameters": human_count(r["parameters"]),
                      "status": "ok" if r["loadable"] else f"no: {r['problem']}"} for r in rows]
        print_table(shown, ["name", "kind", "domain", "phase", "parent", "parameters", "dtype", "tokenizer", "status"],
                    title=f"run {result.run} ({len(rows)} checkpoints, base {result.base or '-'})")
    return 0
