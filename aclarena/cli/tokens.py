"""``aclarena-diag tokens``: teacher-forced entropy and drift of later checkpoints on a frozen probe set.

The work (reference caching, resumable passes, gathering across ranks) is
:func:`aclarena.analysis.tokens.tokens`.
"""

from __future__ import annotations

import argparse
from typing import Any

from aclarena.cli._common import (
    add_load_options,
    add_verb,
    load_options,
    manifest_of,
    print_json,
    print_table,
    print_warnings,
)
from aclarena.errors import AclarenaError


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "tokens",
        help="teacher-forced entropy and drift (KL, JS, flips) of later checkpoints on a reference's probe set",
        description="Every checkpoint scores the reference's frozen generations teacher-forced; per position: "
        "entropy, log-prob of the reference token, top-k, exact KL(p_ref || p_ckpt) and JS. Per checkpoint: how "
        "drift splits between high- and low-entropy positions. Finished checkpoints are skipped on a rerun.",
        examples=(
            "aclarena-diag tokens --ref seq-math --run runs/demo",
            "aclarena-diag tokens --ref seq-math --run runs/mine --against seq-search,seq-ecom --high nats=1.5",
            "aclarena-diag tokens --ref seq-math --run runs/mine --probe math-traces --json",
        ),
    )
    p.add_argument("--ref", required=True, metavar="NAME", help="the reference checkpoint (a manifest name)")
    p.add_argument("--probe", metavar="P", help="probe set to score (default: the one named like --ref; made with "
                   "defaults from the reference's domain when missing)")
    p.add_argument("--against", default="later", metavar="WHICH",
                   help="later (default: every descendant of --ref and every consolidated checkpoint), all, or a "
                        "comma-separated list of names")
    p.add_argument("--high", default="q=0.06", metavar="SPEC",
                   help="high-entropy set: q=FRACTION of positions (default q=0.06) or nats=THRESHOLD")
    p.add_argument("--eps", type=float, default=0.05, help="|Δ log-prob| below which a position barely moves (0.05)")
    p.add_argument("--batch-size", type=int, default=8, metavar="B", help="sequences per forward pass (default 8)")
    p.add_argument("--chunk-size", type=int, default=None, metavar="C",
                   help="positions per output-head chunk (default: both models' logits in 640 MiB)")
    p.add_argument("--topk", type=int, default=5, metavar="K", help="alternatives kept per position (default 5)")
    p.add_argument("--force", action="store_true", help="rescore checkpoints even when finished results exist")
    add_load_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.tokens import TokensOptions, tokens
    from aclarena.distributed import world

    options = TokensOptions(probe=args.probe, against=args.against, high=args.high, eps=args.eps,
                            batch_size=args.batch_size, chunk_size=args.chunk_size, topk=args.topk, force=args.force,
                            load=load_options(args))
    with world(args.device) as w:
        result = tokens(args.run, args.ref, options, world=w, show_progress=not args.json, manifest=manifest_of(args))
    if result is None:  # another rank than 0: its share is with rank 0, which writes and prints
        return 0
    _print(args, result)
    flagged = result.flagged_message()
    if flagged is not None:
        raise AclarenaError(flagged)
    return 0


def _print(args: argparse.Namespace, result: Any) -> None:
    rows, ref, high, warnings = list(result.rows), result.reference, result.high, list(result.warnings)
    if args.json:
        print_json(result.to_dict())
        print_warnings(warnings, "tokens")
        return
    cols = ["checkpoint", "n_valid", "kl_mean", "kl_mean_high", "kl_mean_low", "kl_share_high", "flip_rate_high",
            "flip_rate_low", "barely_moved_low", "concentration_area", "status"]
    heads = ["checkpoint", "positions", "KL mean", "KL high", "KL low", "KL share high", "flips high", "flips low",
             "barely moved (low)", "conc. area", "status"]
    print_table(rows, cols, headers=heads,
                title=f"token drift against {ref} on probe {result.probe!r} ({result.n_sequences} sequences, "
                      f"{result.n_positions} scored positions; high = {high})",
                caption="KL in nats; high/low: reference entropy strata; barely moved: |Δ log-prob| < "
                        f"{args.eps:g}; conc. area 0.5 = drift unrelated to entropy, 1 = all at the top")
    print_warnings(warnings, "tokens")
