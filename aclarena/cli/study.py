"""``aclarena-diag study``: the study's findings over several seeds (aclarena.analysis.study).

Parses, calls :func:`aclarena.analysis.study.run_study`, prints the findings table (mean ± std over
seeds, the study's number beside) and the time of each part.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
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
            "aclarena-diag study --run runs/study --seeds 3 --full --validate   # every consolidation; validation required",
            "aclarena-diag study --orders pairs --run runs/orders --seeds 3 --dry-run   # the stages an order design trains",
            "aclarena-diag study --orders 'math,search;search,math' --config examples/quick.toml --run runs/orders-quick",
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
    p.add_argument("--consolidations", metavar="M,...",
                   help="consolidation methods compared with the sequential end and the oracles (default: the merges, "
                        "merge-uniform,merge-ties; 'none' for none)")
    p.add_argument("--full", action="store_true", help="also the consolidations that train: SDFT, MLE, MMOPD")
    p.add_argument("--no-vectors", dest="vectors", action="store_false",
                   help="skip the task-vector cosines (they train SDFT from the base and from the end per seed)")
    p.add_argument("--no-signatures", dest="signatures", action="store_false",
                   help="skip the drift signatures of every phase, stage and consolidation (they generate "
                        "32 of each parent's replies per domain and score the child on them)")
    v = p.add_mutually_exclusive_group()
    v.add_argument("--validate", dest="validation", action="store_const", const="require",
                   help="require the monitor's held-out validation: exit 1 (after writing findings.json) when it "
                        "cannot be done, e.g. with one seed")
    v.add_argument("--no-validate", dest="validation", action="store_const", const="skip",
                   help="skip the held-out validation (its ground truth, evaluated while each seed's ecom stage trains, "
                        "or a retrain of that stage when the config's [monitor] does not watch it)")
    p.add_argument("--lead-n", type=int, metavar="N",
                   help="validation: ground-truth items per earlier domain (default 20; 6 on the tiny preset)")
    p.add_argument("--lead-every", type=int, metavar="STEPS",
                   help="validation: ground-truth evaluation every STEPS steps (default 10; 2 on the tiny preset)")
    p.add_argument("--lead-stage", metavar="DOMAIN",
                   help="validation: the stage watched (default ecom, else the last stage); "
                        "name the stage where the earlier skills drop")
    o = p.add_argument_group("order study (docs/study.md, 'Does the order matter?')")
    o.add_argument("--orders", metavar="SPEC",
                   help="train a design of curriculum orders instead of the one chain: pairs (every ordered pair of "
                        "the config's domains), latin (each domain at each position once), all (every permutation), "
                        "or orders such as 'math,search;search,math'; shared prefixes are trained once")
    o.add_argument("--dry-run", action="store_true", help="with --orders: print the stages it would train and the "
                                                          "shared prefixes, train nothing")
    o.add_argument("--max-stages", type=int, default=None, metavar="N",
                   help="with --orders: the most stages (over every seed) trained without --yes (default 48)")
    o.add_argument("--yes", action="store_true", help="with --orders: train a design over --max-stages")
    o.add_argument("--no-diagnostics", dest="diagnostics", action="store_false",
                   help="with --orders: skip the per-pair diagnostics (cosine, SFT/RL ratio, drift signature)")
    p.set_defaults(func=run, validation="auto")


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.study import parse_consolidations, run_study
    from aclarena.train.config import load_config
    from aclarena.train.presets import preset_path

    path = Path(args.config) if args.config else preset_path("mini")
    if not path.is_file():
        raise AclarenaError(f"--config {path}: no such file; name a curriculum TOML such as examples/mini.toml")
    cfg = load_config(path)
    show = not args.json
    if args.orders is not None:
        return run_orders_cli(args, cfg, path)
    for flag, given in (("--dry-run", args.dry_run), ("--yes", args.yes), ("--max-stages", args.max_stages is not None)):
        if given:
            raise AclarenaError(f"{flag} applies to an order study; add --orders SPEC (e.g. --orders pairs)")
    methods = parse_consolidations(args.consolidations, args.full)

    on_start, on_part = _part_lines(args, "study")

    command = study_command(args)
    t0 = time.monotonic()
    result = run_study(cfg, args.run, seeds=args.seeds, n=args.n, show_progress=show,
                       config_text=path.read_text(encoding="utf-8"), on_part=on_part, on_start=on_start,
                       consolidations=methods, vectors=args.vectors, validation=args.validation != "skip",
                       lead_n=args.lead_n, lead_every=args.lead_every, lead_stage=args.lead_stage,
                       command=command, signatures=args.signatures)
    v = result.validation
    failed = args.validation == "require" and (v or {}).get("status") != "ok"
    if args.json:
        print_json({"out": str(result.out), **result.to_json()})
        if failed:
            print(f"error: held-out validation not done: {(v or {}).get('reason')}", file=sys.stderr)
        return 1 if failed else 0
    print_table([_row(r) for r in result.rows], ["finding", "quantity", "study", "mini", "seeds"],
                headers=["finding", "quantity", "study", "mini arena (mean ± std)", "per seed"],
                title=f"findings over {len(result.seeds)} seeds ({', '.join(map(str, result.seeds))})")
    print(f"total {time.monotonic() - t0:.1f} s (" + ", ".join(f"{k} {v:.1f} s" for k, v in result.part_times.items())
          + ")")
    if v is not None:
        print_validation(v)
    for k, e in result.errors.items():
        print(f"note: the {k} step did not finish: {e}", file=sys.stderr)
    print(f"Findings as JSON: {result.out / 'findings.json'}")
    if failed:
        print(f"error: held-out validation not done: {v.get('reason') if v else 'skipped'}", file=sys.stderr)
        return 1
    return 0


def study_command(args: argparse.Namespace) -> str:
    """The command line findings.json records as what made it: every option that changes what the study does,
    the curriculum config included."""
    command = f"aclarena-diag study --run {args.run} --seeds {args.seeds} -n {args.n}"
    command += f" --config {args.config}" if args.config else ""
    if args.consolidations is not None:
        command += f" --consolidations {args.consolidations}"
    command += " --full" * args.full + " --no-vectors" * (not args.vectors) + " --no-signatures" * (not args.signatures)
    command += {"require": " --validate", "skip": " --no-validate"}.get(args.validation, "")
    return command + "".join(f" --{k.replace('_', '-')} {getattr(args, k)}"
                             for k in ("lead_n", "lead_every", "lead_stage") if getattr(args, k) is not None)


def print_validation(v: dict[str, Any]) -> None:
    """The held-out validation table, or the one line saying why there is none."""
    from aclarena.diagnostics.early_warning import PREDICTOR_LABELS

    if v.get("status") != "ok":
        print(f"held-out validation of the early warning: not run: {v.get('reason')}")
        return

    def f(x: Any, d: int) -> str:
        return "-" if x is None else f"{x:.{d}f}"

    fit = ",".join(map(str, v["fit_seeds"]))
    print_table([{"predictor": PREDICTOR_LABELS.get(r["predictor"], r["predictor"]), "threshold": f(r["threshold"], 4),
                  "lead": f(r["lead_mean"], 1), "leads": ",".join(map(str, r["leads"])) or "-",
                  "detected": r["detected"], "fa": r["false_alarms"], "miss": r["misses"], "r2": f(r["r2"], 2)}
                 for r in v["predictors"]],
                ["predictor", "threshold", "lead", "leads", "detected", "fa", "miss", "r2"],
                headers=["predictor", f"threshold (fit on seed {fit})", "mean lead (steps)", "leads", "drops warned",
                         "false alarms", "misses", "R² vs drop (all seeds)"],
                title=f"early warning held out: {v.get('stage')} stage, fit on seed {fit}, reported on seeds "
                      f"{', '.join(map(str, v['held_out_seeds']))}")
    for note in v.get("notes", []):
        print(f"note: {note}")


def _row(r: dict[str, Any]) -> dict[str, str]:
    d = r.get("digits", 2)

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.{d}f}"

    mini = f(r["mean"]) + ("" if r["spread"] is None else f" ± {f(r['spread'])}")
    return {"finding": r["finding"], "quantity": r["quantity"], "study": r["study"] or "-", "mini": mini,
            "seeds": ", ".join(f(v) for v in r["values"])}


def run_orders_cli(args: argparse.Namespace, cfg: Any, path: Path) -> int:
    """``study --orders SPEC``: plan (``--dry-run``: print it) or run the order study, print its findings."""
    from aclarena.analysis.orders import DEFAULT_MAX_STAGES, prepare, run_orders
    from aclarena.diagnostics.orders import summary_lines

    max_stages = DEFAULT_MAX_STAGES if args.max_stages is None else args.max_stages
    if args.dry_run:
        setup = prepare(cfg, args.run, args.orders, args.seeds, max_stages=max_stages, check_budget=False)
        if args.json:
            print_json({**setup.plan_json(), "todo_stages": setup.todo_stages, "todo_steps": setup.todo_steps,
                        "max_stages": max_stages})
            return 0
        print("\n".join(setup.lines()))
        if setup.todo_stages > max_stages:
            print(f"over the budget of {max_stages} stages (--max-stages): training it needs --yes")
        return 0

    on_start, on_part = _part_lines(args, "study --orders")

    command = (f"aclarena-diag study --orders '{args.orders}' --run {args.run} --seeds {args.seeds} -n {args.n}"
               + (f" --config {args.config}" if args.config else "") + " --yes" * args.yes
               + (f" --max-stages {args.max_stages}" if args.max_stages is not None else "")
               + " --no-diagnostics" * (not args.diagnostics))
    result = run_orders(cfg, args.run, args.orders, seeds=args.seeds, n=args.n, max_stages=max_stages, yes=args.yes,
                        diagnostics=args.diagnostics, show_progress=not args.json,
                        config_text=path.read_text(encoding="utf-8"), command=command, on_start=on_start,
                        on_part=on_part)
    if args.json:
        print_json({"out": str(result.out), **result.to_json()})
        return 0
    for line in summary_lines(result.to_json()):
        print(line)
    for k, e in result.errors.items():
        print(f"note: the {k} step did not finish: {e}", file=sys.stderr)
    print(f"Order study as JSON: {result.out / 'orders.json'}")
    return 0


def _part_lines(args: argparse.Namespace, label: str) -> tuple[Callable[[str], None], Callable[[str, float], None]]:
    """The start and end line of each part on stderr (none with --json)."""

    def on_start(name: str) -> None:
        if not args.json:
            print(f"  {label}: {name} ...", file=sys.stderr, flush=True)

    def on_part(name: str, seconds: float) -> None:
        if not args.json:
            print(f"  {label}: {name} {seconds:.1f} s", file=sys.stderr, flush=True)

    return on_start, on_part
