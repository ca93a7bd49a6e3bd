"""``aclarena-diag checkpoints``: list a run's checkpoints and whether each can be loaded."""

from __future__ import annotations

import argparse
import sys

from aclarena.cli._common import add_verb, human_count, manifest_of, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "checkpoints",
        help="list a run's checkpoints: lineage, size, dtype, tokenizer, loadable or why not",
        description=(
            "List a run's checkpoints: lineage, size, dtype, tokenizer, and whether each can be loaded or why not. "
            "Rows that cannot be loaded are counted in a warning on stderr; the exit status is 0 unless --strict "
            "(then 1 when any row is not loadable, after the table). A checkpoint imported from GGUF shows its "
            "source quantization (`aclarena-diag import`); the template column says whether its tokenizer has a chat "
            "template."
        ),
        examples=(
            "aclarena-diag checkpoints --run runs/demo",
            "aclarena-diag checkpoints --run runs/demo --json",
            "aclarena-diag checkpoints --run runs/mine --strict   # exit 1 if any checkpoint cannot be loaded",
        ),
    )
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle weights (pytorch_model.bin)")
    p.add_argument("--strict", action="store_true", help="exit 1 when any checkpoint cannot be loaded")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.checkpoints import checkpoints

    result = checkpoints(args.run, allow_pickle=args.allow_pickle, manifest=manifest_of(args))
    if args.json:
        print_json(result.to_dict())
    else:
        rows = result.rows
        shown = [r | {"parameters": human_count(r["parameters"]),
                      "template": {True: "yes", False: "no", None: "?"}[r["chat_template"]],
                      "status": "ok" if r["loadable"] else f"no: {r['problem']}"} for r in rows]
        shown = [r | {"prompt": r["prompt_format"]} for r in shown]
        columns = ["name", "kind", "domain", "phase", "parent", "parameters", "dtype", "tokenizer", "template",
                   "prompt", "status"]
        if any(r["quantization"] for r in rows):  # imported from GGUF: the quantization the weights went through
            columns.insert(7, "quantization")
        print_table(shown, columns,
                    title=f"run {result.run} ({len(rows)} checkpoints, base {result.base or '-'})",
                    caption="template: whether the tokenizer has a chat template; prompt: how eval, probe and flips "
                            "prompt it (chat: with the template; plain: as text, detected when there is none; "
                            "prompt_format in aclarena.toml chooses)")
    bad = [r for r in result.rows if not r["loadable"]]
    if bad:
        level = "error" if args.strict else "warning"
        print(f"aclarena-diag checkpoints: {level}: {len(bad)} of {len(result.rows)} checkpoint(s) cannot be loaded, "
              f"e.g. {bad[0]['name']}: {bad[0]['problem']}", file=sys.stderr)
        if args.strict:
            return 1
    return 0
