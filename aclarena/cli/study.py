"""``aclarena-diag study``: the study's findings over several seeds (aclarena.analysis.study).

Parses, calls :func:`aclarena.analysis.study.run_study` with this CLI's verb runner, prints the
findings table (mean ± std over seeds, the study's number beside) and the time of each part.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from aclarena.cli._common import add_verb, print_json, print_table
from aclarena.errors import AclarenaError


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "study",
        help="the study's findings over several seeds: train the curriculum per seed, evaluate, analyse, "
             "write findings.json",
        examples=(
            "aclarena-diag study --run runs/study --seeds 3",
            "aclarena-diag study --run runs/study-tiny --seeds 2 --config examples/tiny.toml -n 4",
            "aclarena-diag study --run runs/study --seeds 3 --json   # findings.json on stdout too",
        ),
        run_option=False,
    )
    p.add_argument("--run", "--out", dest="run", default="runs/study", metavar="DIR",
                   help="run folder (default runs/study); rerun to resume")
    p.add_argument("--seeds", type=int, default=3, metavar="N",
                   help="curricula to train (seeds SEED..SEED+N-1, one shared base); default 3")
    p.add_argument("--config", default=None, metavar="TOML",
                   help="curriculum config (default: the mini preset, as `demo`)")
    p.add_argument("-n", type=int, default=100, metavar="N", help="eval tasks per suite, greedy (default 100)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.study import run_study
    from aclarena.cli.demo import verb
    from aclarena.train.config import load_config
    from aclarena.train.presets import preset_path

    path = Path(args.config) if args.config else preset_path("mini")
    if not path.is_file():
        raise AclarenaError(f"--config {path}: no such file; name a curriculum TOML such as examples/mini.toml")
    cfg = load_config(path)
    show = not args.json and sys.stderr.isatty()

    def on_part(name: str, seconds: float) -> None:
        if not args.json:
            print(f"  study: {name} {seconds:.1f} s", file=sys.stderr, flush=True)

    t0 = time.monotonic()
    result = run_study(cfg, args.run, seeds=args.seeds, run_verb=verb, n=args.n, show_progress=show,
                       config_text=path.read_text(encoding="utf-8"), on_part=on_part)
    if args.json:
        print_json({"out": str(result.out), **result.to_json()})
        return 0
    print_table([_row(r) for r in result.rows], ["finding", "quantity", "study", "mini", "seeds"],
                headers=["finding", "quantity", "study", "mini arena (mean ± std)", "per seed"],
                title=f"findings over {len(result.seeds)} seeds ({', '.join(map(str, result.seeds))})")
    print(f"total {time.monotonic() - t0:.1f} s (" + ", ".join(f"{k} {v:.1f} s" for k, v in result.part_times.items())
          + ")")
    for k, v in result.errors.items():
        print(f"note: the {k} step did not finish: {v}", file=sys.stderr)
    print(f"Findings as JSON: {result.out / 'findings.json'}")
    return 0


def _row(r: dict[str, Any]) -> dict[str, str]:
    d = r.get("digits", 2)

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.{d}f}"

    mini = f(r["mean"]) + ("" if r["spread"] is None else f" ± {f(r['spread'])}")
    return {"finding": r["finding"], "quantity": r["quantity"], "study": r["study"] or "-", "mini": mini,
            "seeds": ", ".join(f(v) for v in r["values"])}
