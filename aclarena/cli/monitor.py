"""``aclarena-diag monitor``: the drift monitor's series and warnings, or the lead-time measurement.

Without ``--lead-time`` it reads ``series.h5`` (written under SWMR by a training run with a
drift monitor) and prints, per monitored phase, the metrics of every check and the
warnings; ``--follow`` keeps reading as the run appends (Ctrl-C ends it). With
``--lead-time`` it retrains a stage of a finished curriculum with the monitor and a
ground-truth evaluation of the earlier domains every M steps, and reports how many steps
before the first significant benchmark drop each predictor warned (docs/monitor.md).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from aclarena.cli._common import add_verb, fmt, print_json, print_table
from aclarena.errors import AclarenaError

SHOWN = ("kl_high", "flip_high", "kl_all", "fkl", "fkl_high", "kl_share_high")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "monitor",
        help="print the drift monitor's series and warnings of a training run (--follow: live), or measure lead time",
        examples=(
            "aclarena-diag monitor --run runs/mini",
            "aclarena-diag monitor --run runs/mini --follow --label seq-ecom-sft",
            "aclarena-diag monitor --run runs/demo --lead-time --stage ecom",
        ),
    )
    p.add_argument("--label", metavar="PHASE", help="only this monitored phase (default: all)")
    p.add_argument("--follow", action="store_true", help="keep printing new checks and warnings as they land (Ctrl-C ends)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between reads with --follow (default 1)")
    p.add_argument("--last", type=int, default=None, metavar="N", help="show only the last N checks per probe set")
    g = p.add_argument_group("lead time (--lead-time)")
    g.add_argument("--lead-time", action="store_true",
                   help="retrain a stage with the monitor and a ground-truth evaluation; store and print the lead times")
    g.add_argument("--stage", default="ecom", metavar="DOMAIN", help="the stage to measure (default ecom)")
    g.add_argument("--eval-every", type=int, default=5, metavar="M", help="ground-truth evaluation every M steps (default 5)")
    g.add_argument("--every", type=int, default=None, metavar="N",
                   help="monitor every N steps (default: the run's [monitor] every_n_steps, else 5)")
    g.add_argument("-n", type=int, default=50, metavar="N", help="fixed evaluation items per earlier domain (default 50)")
    g.add_argument("--alpha", type=float, default=0.05, help="significance of a benchmark drop (default 0.05)")
    g.add_argument("--replicate", type=int, default=0, metavar="R",
                   help="the replicate of a `train --seeds N` run (names ending in -s<R>; default 0)")
    g.add_argument("--dense", type=int, default=None, metavar="K",
                   help="ground truth at every step for the first K steps of each phase, then sparser (x1.25 each "
                        "time) and at the end, instead of every --eval-every steps")
    g.add_argument("--phases", default=None, metavar="KINDS",
                   help="retrain only these phase kinds of the stage, comma-separated (rl: its GRPO phase alone)")
    g.add_argument("--same-domain", action="store_true",
                   help="continue the stage's own domain from the stage's end (a negative control: nothing else to lose)")
    g.add_argument("--strict", action="store_true",
                   help="evaluate the stage start first; refuse before training when no drop could be significant")
    g.add_argument("--force", action="store_true", help="measure again even if the stored table has the same settings")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.lead_time:
        return run_lead_time(args)
    if args.interval <= 0:
        raise AclarenaError(f"--interval must be > 0, got {args.interval}")
    if args.last is not None and args.last < 1:
        raise AclarenaError(f"--last must be >= 1, got {args.last}")
    if args.follow:
        return follow(args)
    from aclarena.results.monitor_series import load_monitor, monitor_labels
    from aclarena.store.series import read_series

    with read_series(args.run) as r:
        labels = _pick(monitor_labels(r), args.label)
        views = [load_monitor(r, lab) for lab in labels]
    if args.json:
        print_json({"run": str(Path(args.run)), "labels": [_view_json(v, args.last) for v in views]})
        return 0
    for v in views:
        _print_view(v, args.last)
    return 0


def _pick(labels: list[str], label: str | None) -> list[str]:
    from aclarena.errors import unknown_name

    if not labels:
        raise AclarenaError("series.h5 has no drift-monitor series; train with a [monitor] section or a "
                            "DriftMonitorCallback first")
    if label is None:
        return labels
    if label not in labels:
        raise unknown_name("monitored phase", label, labels)
    return [label]


def _rows(cols: dict[str, Any], last: int | None) -> list[dict[str, Any]]:
    n = len(cols.get("step", []))
    start = 0 if last is None else max(0, n - last)
    out = []
    for i in range(start, n):
        row = {}
        for k, v in cols.items():
            if k in ("session", "time"):
                continue
            x = v[i].item() if hasattr(v[i], "item") else v[i]
            if isinstance(x, bytes):  # fixed-width text columns (bench: suite, outcomes)
                x = x.decode("utf-8", "replace")
            row[k] = None if isinstance(x, float) and not math.isfinite(x) else x
        out.append(row)
    return out


def _view_json(v: Any, last: int | None) -> dict[str, Any]:
    return {"label": v.label, "sessions": v.sessions, "settings": v.settings,
            "probes": {k: _rows(c, last) for k, c in v.probes.items()}, "train": _rows(v.train, last),
            "bench": _rows(v.bench, last), "events": v.events}


def _print_view(v: Any, last: int | None) -> None:
    rows = []
    for probe, cols in v.probes.items():
        for r in _rows(cols, last):
            rows.append({"probe": probe, **r})
    every = v.settings.get("every_n_steps", "?")
    print_table(rows, ["probe", "step", *SHOWN], title=f"drift monitor: {v.label} (every {every} steps)",
                caption="kl_* / flip_*: against the probe's reference checkpoint; fkl*: forward KL to the stage start")
    if v.events:
        print_table([{**e, "value": fmt(e["value"]), "limit": fmt(e["limit"])} for e in v.events],
                    ["step", "series", "metric", "value", "rule", "limit", "action"],
                    title=f"warnings: {v.label}")
    else:
        print(f"no warnings in {v.label}")


# --- --follow ---------------------------------------------------------------------------------


def _line(label: str, probe: str, row: dict[str, Any]) -> str:
    parts = "  ".join(f"{k} {fmt(row.get(k), 4)}" for k in SHOWN if k in row)
    return f"{label}  step {row['step']:>5}  {probe}  {parts}"


def follow(args: argparse.Namespace) -> int:
    """Print new checks and warnings as they land; Ctrl-C ends it (exit 0)."""
    from aclarena.results.monitor_series import load_monitor, monitor_labels
    from aclarena.store import SERIES_NAME
    from aclarena.store.series import SeriesReader

    path = Path(args.run) / SERIES_NAME
    if not Path(args.run).is_dir():
        raise AclarenaError(f"run folder {args.run} does not exist")
    seen: set[tuple[Any, ...]] = set()
    reader: SeriesReader | None = None
    waiting_said = False
    # Ctrl-C sets a flag instead of raising: a KeyboardInterrupt that lands inside a weakref or __del__
    # callback (h5py's objects are collected all the time here) is printed as "Exception ignored" and lost,
    # and the follower then ran on (seen in CI). An ignored SIGINT (a job started in the background) stays so.
    stop = threading.Event()
    own_sigint = (threading.current_thread() is threading.main_thread()
                  and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN)
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set()) if own_sigint else None
    try:
        while not stop.is_set():
            if reader is None or reader.stale():
                if reader is not None:
                    reader.close()
                    reader = None
                if path.is_file():
                    try:
                        reader = SeriesReader(args.run)
                    except AclarenaError:
                        reader = None  # being replaced right now: try again
                elif not waiting_said and not args.json:
                    print(f"waiting for {path} (start a training run with a monitor)...", file=sys.stderr, flush=True)
                    waiting_said = True
            if reader is not None:
                reader.refresh()
                labels = monitor_labels(reader)
                if args.label is not None:
                    labels = [x for x in labels if x == args.label]
                for label in labels:
                    _emit_new(load_monitor(reader, label), seen, args.json)
            stop.wait(args.interval)
        return 0
    finally:
        if own_sigint:
            signal.signal(signal.SIGINT, previous)
        if reader is not None:
            reader.close()


def _emit_new(v: Any, seen: set[tuple[Any, ...]], as_json: bool) -> None:
    for probe, cols in v.probes.items():
        for r in _rows(cols, None):
            key: tuple[Any, ...] = (v.label, "probe", probe, r["step"], tuple(sorted((k, r[k]) for k in SHOWN if k in r)))
            if key in seen:
                continue
            seen.add(key)
            out = {"type": "check", "label": v.label, "probe": probe, **r}
            print(json.dumps(out) if as_json else _line(v.label, probe, r), flush=True)
    for e in v.events:
        key = (v.label, "event", e["step"], e["series"], e["metric"], e["rule"], e["time"])
        if key in seen:
            continue
        seen.add(key)
        if as_json:
            print(json.dumps({"type": "warning", "label": v.label, **e}), flush=True)
        else:
            what = "crossed" if e["rule"] == "threshold" else "broke its trend, limit"
            print(f"{v.label}  step {e['step']:>5}  WARNING {e['metric']} on {e['series']} = {fmt(e['value'])} {what} "
                  f"{fmt(e['limit'])} (action: {e['action']})", flush=True)


# --- --lead-time ------------------------------------------------------------------------------


def run_lead_time(args: argparse.Namespace) -> int:
    from aclarena.progress import quiet_libraries
    from aclarena.train.lead_time import LeadTimeSettings, measure_lead_time

    quiet_libraries()
    phases = None if args.phases is None else tuple(x.strip() for x in args.phases.split(",") if x.strip())
    settings = LeadTimeSettings(stage=args.stage, eval_every=args.eval_every, every_n_steps=args.every, n=args.n,
                                alpha=args.alpha, replicate=args.replicate, dense=args.dense, phases=phases,
                                same_domain=args.same_domain, strict=args.strict)
    result = measure_lead_time(args.run, settings, force=args.force, show_progress=not args.json)
    if args.json:
        print_json(result)
        return 0
    print_lead_time(result)
    return 0


def print_lead_time(result: dict[str, Any]) -> None:
    from aclarena.figures.monitor import LEAD_COLUMNS, lead_time_rows

    print_table(
        lead_time_rows(result), [k for k, _, _ in LEAD_COLUMNS], headers=[h for _, h, _ in LEAD_COLUMNS],
        title=f"lead time of each warning, {result['stage']} stage ({result['steps']} steps; ground truth "
              + (f"every step for the first {result['settings']['dense']} steps of each phase, then sparser"
                 if result['settings'].get('dense') else f"every {result['settings']['eval_every']} steps")
              + f", on {result['settings']['n']} fixed items)",
        caption="lead = drop step - warning step (> 0: warned before the drop); drop = first evaluation whose exact "
                "one-sided McNemar test against the stage start is significant at "
                f"{result['settings']['alpha']} after Holm's correction over the stage's evaluations",
    )
    domains = result.get("drop_test", {}).get("domains", {})
    for d, pts in result["ground_truth"].items():
        acc = ", ".join(f"{p['step']}: {p['accuracy']:.2f}" for p in pts)
        print(f"{d}: accuracy by step {acc}")
        info = domains.get(d)
        if info is not None and not info["reachable"]:
            print(f"note: {d}: {info['solved_at_start']} items solved at the stage start, too few for any drop to be "
                  f"significant over {info['tests']} evaluations (a 'none' there is not evidence of no forgetting)")
    if result.get("source") == "chain":
        print("measured on the chain's own training of the stage (its ground truth rode along): nothing retrained")
    print(f"took {result['time_s']:.1f} s")
