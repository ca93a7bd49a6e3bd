"""``aclarena-diag signatures``: the drift signature of every update of a run (SFT phase, RL phase,
stage, consolidation), on the parent's own frozen generations of the update's domain.

A verb of its own rather than ``tokens --phases``: ``tokens`` scores many checkpoints against one
reference on one probe set, while each update here has its own parent, probe set and domain, and
its result (intervals over sequences, per update) is stored and read as a unit. The work is
:func:`aclarena.analysis.signatures.signatures`.
"""

from __future__ import annotations

import argparse
from typing import Any

from aclarena.cli._common import (
    add_load_options,
    add_verb,
    fmt_share,
    fmt_sig,
    load_options,
    manifest_of,
    print_json,
    print_table,
    print_warnings,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "signatures",
        help="drift signature of each update (SFT phase, RL phase, stage, consolidation) on its parent's generations",
        description="For every update parent -> child: the parent's greedy generations of the update's domain are "
        "frozen (probe set PARENT.DOMAIN, made when missing), the child is scored teacher-forced against the parent, "
        "and the update's signature is computed: KL share at the top-entropy positions, low-entropy positions barely "
        "moved, KL share at the first K reply tokens (format takeover), flip rates high/low, concentration area, mean "
        "KL, each with a bootstrap interval over sequences. Results go to results.h5 (signatures/<update>/<domain>); "
        "a rerun with the same settings reads them back.",
        examples=(
            "aclarena-diag signatures --run runs/demo",
            "aclarena-diag signatures --run runs/demo --updates seq-math-sft,seq-math,base..seq-math -n 64",
            "aclarena-diag signatures --run runs/mine --updates seq-search-sft --first-k 8 --json",
        ),
    )
    p.add_argument("--updates", default=None, metavar="LIST",
                   help="comma-separated updates: a checkpoint (the update that made it from its parent) or "
                        "PARENT..CHILD (default: every stage phase, every multi-phase stage, every consolidation)")
    # defaults None: the analysis's own defaults apply (its module imports torch, which --help must not)
    p.add_argument("-n", type=int, default=None, metavar="N",
                   help="prompts per probe set made for a parent (default 32; a stored one is reused)")
    p.add_argument("--max-new-tokens", type=int, default=None, metavar="T",
                   help="tokens the parent generates per prompt (default 64)")
    p.add_argument("--first-k", type=int, default=None, metavar="K",
                   help="tokens at the start of each reply counted for the format-takeover share (default 12)")
    p.add_argument("--high", default="q=0.06", metavar="SPEC",
                   help="high-entropy set: q=FRACTION of positions (default q=0.06) or nats=THRESHOLD")
    p.add_argument("--eps", type=float, default=0.05, help="|Δ log-prob| below which a position barely moves (0.05)")
    p.add_argument("--n-boot", type=int, default=None, metavar="B",
                   help="bootstrap resamples of the sequences (default 1000)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--batch-size", type=int, default=8, metavar="B", help="sequences per forward pass (default 8)")
    p.add_argument("--force", action="store_true", help="recompute signatures even when stored with these settings")
    add_load_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.signatures import SignaturesOptions, signatures

    given = {k: getattr(args, k) for k in ("n", "max_new_tokens", "first_k", "n_boot") if getattr(args, k) is not None}
    options = SignaturesOptions(updates=args.updates, high=args.high, eps=args.eps, level=args.level, seed=args.seed,
                                batch_size=args.batch_size, force=args.force, load=load_options(args), **given)
    result = signatures(args.run, options, show_progress=not args.json, manifest=manifest_of(args))
    if args.json:
        print_json(result.to_dict())
    else:
        _print(result)
        for note in result.notes:
            print(f"note: {note}")
    print_warnings(list(result.warnings), "signatures")
    return 0


def _ci(row: dict[str, Any], m: str) -> str:
    """Value [low, high]: shares with three decimals, the KL mean (nats, any scale) with three significant
    digits, so that one column holds one format."""
    f = fmt_sig if m == "kl_mean" else fmt_share
    return f"{f(row[m])} [{f(row[m + '_low'])}, {f(row[m + '_high'])}]"


def _print(result: Any) -> None:
    s = result.settings
    rows = [{**r, **{m: _ci(r, m) for m in ("kl_share_high", "barely_moved_low", "kl_share_first_k",
                                               "concentration_area", "kl_mean")},
             "flips": f"{fmt_share(r['flip_rate_high'])} / {fmt_share(r['flip_rate_low'])}",
             "chance": f"{fmt_share(r['high_share'])} / {fmt_share(r['first_k_share'])}"} for r in result.rows]
    print_table(rows, ["update", "kind", "domain", "n_sequences", "kl_share_high", "barely_moved_low",
                       "kl_share_first_k", "flips", "concentration_area", "kl_mean", "chance"],
                headers=["update", "kind", "domain", "seqs", "KL share high", "barely moved (low)",
                         f"KL share first {s['first_k']}", "flips high / low", "conc. area", "KL mean",
                         "chance high / first"],
                title=f"drift signatures of updates (high = {s['high']}; {int(100 * s['level'])}% bootstrap intervals "
                      f"over sequences, {s['n_boot']} resamples)",
                caption="on the parent's own greedy generations of the update's domain; KL(p_parent || p_child) in "
                        f"nats; barely moved: |Δ log-prob| < {s['eps']:g}; chance: the share of positions in the high "
                        "set and in the first-k set")
