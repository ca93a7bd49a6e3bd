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
    from aclarena.models.checkpoint import inspect_all

    manifest = manifest_of(args)
    infos = inspect_all(manifest, args.run, allow_pickle=args.allow_pickle)
    rows = []
    for info in infos:
        s = info.spec
        rows.append({
            "name": s.name,
            "kind": s.kind,
            "domain": s.domain,
            "phase": s.phase,
            "parent": s.parent,
            "on": s.on,
            "source": info.source,
            "location": info.location,
            "architecture": info.architecture,
            "parameters": info.n_parameters,
            "dtype": info.dtype,
            "tokenizer": info.tokenizer_fingerprint,
            "loadable": info.loadable,
            "problem": info.problem,
        })
    if args.json:
        print_json({"run": manifest.name, "base": manifest.base, "checkpoints": rows})
    else:
        shown = [r | {"parameters": human_count(r["parameters"]),
                      "status": "ok" if r["loadable"] else f"no: {r['problem']}"} for r in rows]
        print_table(shown, ["name", "kind", "domain", "phase", "parent", "parameters", "dtype", "tokenizer", "status"],
                    title=f"run {manifest.name} ({len(rows)} checkpoints, base {manifest.base or '-'})")
    return 0
