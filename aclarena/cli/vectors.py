"""``aclarena-diag vectors``: task-vector cosines against oracle directions, distances, projections.

One streamed pass over the run's checkpoints computes every inner product of their differences
per tensor (``vectors/gram``); the views (global, per layer, per tensor, embeddings in or out),
distances to the oracles along the chain, projections of stage updates on oracle directions and
``--pair`` cosines are derived from it (``vectors/summary``, ``vectors/pairs``). See
docs/task-vectors.md for the convention. The work is :func:`aclarena.analysis.vectors.vectors`.
"""

from __future__ import annotations

import argparse
from typing import Any

from aclarena.cli._common import add_verb, fmt, manifest_of, print_json, print_table, progress_enabled


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "vectors",
        help="task-vector cosines vs oracle directions, distances to oracles, projections (streamed from safetensors)",
        description=(
            "Task vectors θ_x − θ_ref of the run's checkpoints: stage updates (ref = parent), cumulative updates "
            "(ref = base) and oracle directions (oracle − base). Prints their cosines with each oracle direction, "
            "the distance of each checkpoint of the chain to each oracle and the projection of each stage update "
            "on each oracle direction. Cosines are over all floating weights flattened (global), per layer block "
            "or per tensor; LoRA adapters count as their update s·B·A, never formed. One pass reads each file "
            "once; an interrupted pass resumes. Convention: docs/task-vectors.md."
        ),
        examples=(
            "aclarena-diag vectors --run runs/demo",
            "aclarena-diag vectors --run runs/demo --by layer --exclude-embeddings",
            "aclarena-diag vectors --run runs/demo --pair mix-sft-base:mix-sft-seq-if --json",
        ),
    )
    p.add_argument("--by", choices=("global", "tensor", "layer"), default="global",
                   help="view: all weights flattened (default), per layer block, or per tensor")
    p.add_argument("--exclude-embeddings", action="store_true",
                   help="leave out the input embeddings and the output head")
    p.add_argument("--pair", action="append", default=[], metavar="A-B:C-D",
                   help="also print the cosine of θ_A − θ_B and θ_C − θ_D (repeatable; 'A - B' with spaces when "
                        "names are ambiguous)")
    p.add_argument("--checkpoints", metavar="NAMES",
                   help="comma-separated checkpoints (default: all); their parents and the base are added")
    p.add_argument("--save-every", type=float, default=120.0, metavar="SECONDS",
                   help="save finished tensors this often so an interrupted pass resumes (default: 120)")
    p.add_argument("--force", action="store_true", help="recompute even if a finished result matches")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.vectors import VectorsOptions, vectors

    options = VectorsOptions(checkpoints=args.checkpoints, pairs=tuple(args.pair), force=args.force,
                             save_every=args.save_every)
    result = vectors(args.run, options, show_progress=progress_enabled(args), manifest=manifest_of(args))
    if args.json:
        print_json(result.to_dict(args.by, args.exclude_embeddings))
    else:
        print_summary(result.summary(args.exclude_embeddings), args.by, args.exclude_embeddings,
                      result.pair_rows(args.by, args.exclude_embeddings), result.computed)
    return 0


def print_summary(s: Any, by: str, exclude_embeddings: bool, pair_rows: list[dict[str, Any]], computed: bool) -> None:
    labels = [v.label for v in s.vectors]
    what = "without embeddings/head" if exclude_embeddings else "all floating weights"
    oracle_idx = s.oracle_vector_index()
    columns = [(o.name, oi) for o, oi in zip(s.oracles, oracle_idx, strict=True) if oi is not None]
    if not columns:
        columns = [(lab, i) for i, lab in enumerate(labels) if s.vectors[i].kind == "update"]
    from aclarena.analysis.vectors import view_rows

    groups, cos, norms = view_rows(s, by)
    rows = []
    for gi, g in enumerate(groups):
        for vi, lab in enumerate(labels):
            row: dict[str, Any] = {"group": g, "vector": lab, "norm": norms[gi, vi]}
            for name, ci in columns:
                row[name] = cos[gi, vi, ci]
            rows.append(row)
    keys = (["group"] if by != "global" else []) + ["vector", "norm"] + [c for c, _ in columns]
    heads = [k if k in ("group", "vector", "norm") else f"cos {k}" for k in keys]
    status = "computed" if computed else "reused"
    print_table(rows, keys, headers=heads, title=f"task-vector cosines ({by}, {what}; {status})")
    if s.oracles and by == "global":
        drows = []
        for ci, c in enumerate(s.distance_checkpoints):
            r: dict[str, Any] = {"checkpoint": c + ("" if s.on_chain[ci] else " (off chain)")}
            for oi, o in enumerate(s.oracles):
                r[o.name] = s.distance[ci, oi]
            drows.append(r)
        print_table(drows, ["checkpoint"] + [o.name for o in s.oracles],
                    headers=["checkpoint"] + [f"‖θ − {o.name}‖" for o in s.oracles], title="distance to each oracle")
        if s.projection_vectors:
            prows = []
            for si, vi in enumerate(s.projection_vectors):
                r = {"update": labels[vi]}
                for oi, o in enumerate(s.oracles):
                    r[o.name] = f"{fmt(float(s.projection_coef[si, oi]))} (cos {fmt(float(s.projection_cos[si, oi]))})"
                prows.append(r)
            print_table(prows, ["update"] + [o.name for o in s.oracles],
                        headers=["stage update"] + [f"along {o.name}" for o in s.oracles],
                        title="projection of each stage update on each oracle direction (⟨Δ, o⟩/‖o‖², cosine)")
    if pair_rows:
        print_table(pair_rows, ["pair", "group", "cos"], title="cosine of the asked pairs of differences")
    for note in s.notes:
        print(f"note: {note}")
