"""``aclarena-diag train``: a sequential curriculum and its single-task oracles, from a TOML config.

Trains the base (the mini arena's, or points at an HF base), every stage's phases in order
and the oracles into ``--out``, registering each checkpoint in the manifest as it finishes
(kind, domain, phase, parent, seed) and its trainer logs in results.h5. Finished phases are
skipped; a killed run resumes from its last trainer checkpoint. docs/training.md describes
the config, the names and the scale path (``accelerate launch``, vLLM).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aclarena.cli._common import add_verb, fmt, print_json, print_phase_table


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "train",
        help="train a curriculum (base, stages with SFT and/or RL phases, single-task oracles) from a TOML config",
        examples=(
            "aclarena-diag train --config examples/mini.toml --out runs/mini",
            "aclarena-diag train --config examples/tiny.toml --out runs/tiny --seeds 3",
            "accelerate launch -m aclarena train --config examples/paper.toml --out runs/paper --trl rl.use_vllm=true",
            "aclarena-diag train --config examples/mini.toml --out runs/mini --stop-on-warning",
        ),
        run_option=False,
    )
    add_train_options(p)
    p.set_defaults(func=run)


def add_train_options(p: argparse.ArgumentParser, *, config_required: bool = True) -> None:
    p.add_argument("--config", required=config_required, metavar="FILE", help="curriculum TOML (see examples/)")
    p.add_argument("--out", "--run", dest="out", required=config_required, metavar="DIR",
                   help="run folder to train into (created if needed; rerun to resume)")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="train N independent curricula (seeds SEED..SEED+N-1) from the same base (default 1)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="the first curriculum's seed (default: the config's)")
    p.add_argument("--trl", action="append", default=[], metavar="[sft.|rl.|base.]FIELD=VALUE",
                   help="trl config override on top of the config file (repeatable), e.g. rl.max_steps=20")
    p.add_argument("--stop-on-warning", action="store_true",
                   help="stop training at the first drift-monitor warning (the config's [monitor] section, or the "
                        "default monitor on every stage after the first; docs/monitor.md)")


def train_from_args(args: argparse.Namespace, *, config_path: str, out: str, show_progress: bool) -> Any:
    """Load the config with the command line's overrides and run it (shared with `demo`)."""
    from dataclasses import replace

    from aclarena.errors import AclarenaError
    from aclarena.train.config import load_config
    from aclarena.train.curriculum import run_curriculum

    cfg = load_config(config_path, overrides=args.trl)
    if args.seed is not None:
        if args.seed < 0:
            raise AclarenaError(f"--seed must be >= 0, got {args.seed}")
        cfg = replace(cfg, seed=args.seed)
    if args.seeds < 1:
        raise AclarenaError(f"--seeds must be >= 1, got {args.seeds}")
    if getattr(args, "stop_on_warning", False):
        from aclarena.train.monitor import with_on_warning

        cfg = with_on_warning(cfg, "stop")
    text = Path(config_path).read_text(encoding="utf-8")
    return run_curriculum(cfg, out, seeds=args.seeds, show_progress=show_progress, config_text=text)


def run(args: argparse.Namespace) -> int:
    run_ = train_from_args(args, config_path=args.config, out=args.out,
                           show_progress=not args.json)
    rows = run_.rows()
    if args.json:
        print_json({"out": str(run_.out), "wall_s": run_.wall_s, "phases": rows})
        return 0
    print_phase_table(rows, title=f"curriculum in {run_.out}")
    trained = sum(r["status"] == "trained" for r in rows)
    print(f"{trained} phase(s) trained, {len(rows) - trained} already there; {fmt(run_.wall_s, 1)} s. "
          f"Next: aclarena-diag eval --run {run_.out}")
    return 0
