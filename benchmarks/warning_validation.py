"""Held-out validation of the early warning with negative controls (issue 44 item 1).

    python benchmarks/warning_validation.py --from runs/demo --out runs/val \
        --json-out docs/results/warning_validation.json          # measure every cell, then judge
    python benchmarks/warning_validation.py --out runs/val --json-out ... --judge-only   # re-judge the stored cells

What it does. From a finished (or math-finished) quick run (``--from``: its ``seq-math``
checkpoint and its ``curriculum.toml``), each *cell* (a condition and a seed) gets a run folder
``<out>/<condition>-s<seed>`` holding a copy of the math stage's checkpoints and the quick
curriculum with that condition's changes, and one ``aclarena-diag monitor --lead-time``
measurement (:func:`aclarena.train.lead_time.measure_lead_time`): the condition's stage retrained
from ``seq-math`` with the drift monitor at every step and the ground truth (``-n`` fixed math
items, greedy) on the dense schedule (every step for the first ``--dense`` steps of each phase,
then x1.25 apart, and the end), ``--strict`` (a cell whose stage start could not show a
significant drop is refused before training). Conditions (:data:`CONDITIONS`):

* ``search-sft``: the quick search stage's SFT phase (the stage that forgets math), shortened to
  ``--sft-steps`` at 4x its learning rate (1.6e-3: at the recipe's 4e-4 a first 40-step probe showed no
  significant math drop, too slow to time a warning against in a short run);
* ``search-sft-low-lr``: the same at a twentieth of that learning rate (8e-5; a negative control);
* ``math-rl``: continued GRPO on math from the math stage's end (``--same-domain --phases rl``:
  same domain, RL only; a negative control).

Whether a cell has a significant drop is the ground truth's, never the condition's: the first
evaluation whose exact one-sided McNemar test against the stage start is Holm-significant over
the stage's evaluations. Then every cell's series are judged
(:func:`aclarena.diagnostics.warning_validation.compare`): thresholds fitted on the cells of the
fit seeds only (``--fit-seeds``), reported on the other seeds' cells, per predictor on the
monitor's every-step series (a warning at the first checked step where the value reaches the
threshold), against warning at the first check and a fitted threshold on the fall of the new
task's training loss. Costs (seconds of ground truth and of monitor checks) come from each cell.
The result file stores every cell's table, its ground truth, the series and the command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: condition -> (stage, changes to the quick curriculum, lead-time options)
CONDITIONS: dict[str, dict[str, Any]] = {
    "search-sft": {"stage": "search", "phases": ("sft",), "lr_scale": 4.0, "expect": "drop"},
    "search-sft-low-lr": {"stage": "search", "phases": ("sft",), "lr_scale": 0.2, "expect": "control"},
    "math-rl": {"stage": "math", "phases": ("rl",), "same_domain": True, "expect": "control"},
}
PREDICTORS = ("kl_high", "flip_high", "kl_all", "fkl", "fkl_high", "razor_fkl")
CHECKPOINTS = ("base", "seq-math-sft", "seq-math")


def _set_in_table(text: str, table: str, key: str, value: str) -> str:
    """Set ``key = value`` in the TOML ``[table]`` of ``text`` (added at the table's top when absent)."""
    head = re.search(rf"^\[{re.escape(table)}\]\s*$", text, flags=re.M)
    if head is None:
        raise SystemExit(f"the curriculum has no [{table}] table")
    end = re.search(r"^\[", text[head.end():], flags=re.M)
    stop = head.end() + (end.start() if end else len(text) - head.end())
    body = text[head.end():stop]
    line = re.compile(rf"^{re.escape(key)}\s*=.*$", flags=re.M)
    body = line.sub(f"{key} = {value}", body, count=1) if line.search(body) else f"\n{key} = {value}" + body
    return text[:head.end()] + body + text[stop:]


def stage_block(text: str, domain: str) -> tuple[int, int]:
    """The span of the ``[[stages]]`` block whose domain is ``domain``."""
    starts = [m.start() for m in re.finditer(r"^\[\[stages\]\]", text, flags=re.M)] + [len(text)]
    for a, b in zip(starts, starts[1:], strict=False):
        if re.search(rf'^domain\s*=\s*"{domain}"', text[a:b], flags=re.M):
            return a, b
    raise SystemExit(f"the curriculum has no {domain} stage")


def cell_curriculum(text: str, condition: str, seed: int, sft_steps: int, rl_steps: int) -> str:
    """The quick curriculum with ``condition``'s changes, seed ``seed`` and per-step logging (the loss baseline)."""
    cond = CONDITIONS[condition]
    text = _set_in_table(text, "run", "seed", str(seed))
    for kind in ("sft", "rl"):
        text = _set_in_table(text, f"defaults.{kind}", "logging_steps", "1")
        text = _set_in_table(text, f"defaults.{kind}", "report_to", '"none"')
    a, b = stage_block(text, cond["stage"])
    block = text[a:b]
    for kind, steps in (("sft", sft_steps), ("rl", rl_steps)):
        if kind in cond["phases"] and f"[stages.{kind}.trl]" in block:  # only the retrained phases change
            block = _set_in_table(block, f"stages.{kind}.trl", "max_steps", str(steps))
    if cond.get("lr_scale"):
        m = re.search(r"^\[stages\.sft\.trl\][^\[]*?^learning_rate\s*=\s*([0-9.eE+-]+)", block, flags=re.M | re.S)
        if m is None:
            raise SystemExit(f"the {cond['stage']} stage's SFT has no learning_rate to scale")
        block = _set_in_table(block, "stages.sft.trl", "learning_rate", f"{float(m.group(1)) * cond['lr_scale']:.3g}")
    return text[:a] + block + text[b:]


def prepare(src: Path, out: Path, condition: str, seed: int, sft_steps: int, rl_steps: int) -> Path:
    run = out / f"{condition}-s{seed}"
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    for name in CHECKPOINTS:
        if not (run / "checkpoints" / name).exists():
            shutil.copytree(src / "checkpoints" / name, run / "checkpoints" / name)
    if not (run / "aclarena.toml").exists():
        shutil.copy(src / "aclarena.toml", run / "aclarena.toml")
    text = cell_curriculum((src / "curriculum.toml").read_text(encoding="utf-8"), condition, seed, sft_steps, rl_steps)
    (run / "curriculum.toml").write_text(text, encoding="utf-8")
    return run


def measure(run: Path, condition: str, args: argparse.Namespace) -> dict[str, Any]:
    from aclarena.train.lead_time import LeadTimeSettings, measure_lead_time

    cond = CONDITIONS[condition]
    settings = LeadTimeSettings(stage=cond["stage"], every_n_steps=1, n=args.n, dense=args.dense,
                                phases=cond.get("phases"), same_domain=bool(cond.get("same_domain")), strict=True)
    return measure_lead_time(run, settings)


def cells(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(condition, seed) in seed order (the fit seeds first when they are the smallest), or ``--cells``' in its order."""
    if args.cells:
        out = []
        for c in args.cells.split(","):
            cond, _, seed = c.strip().rpartition("-s")
            if cond not in CONDITIONS or not seed.isdigit():
                raise SystemExit(f"--cells: {c!r} is not <condition>-s<seed>; conditions: {', '.join(CONDITIONS)}")
            out.append((cond, int(seed)))
        return out
    return [(c, s) for s in sorted(set(args.seeds) | set(args.control_seeds)) for c in args.conditions
            if s in (args.seeds if CONDITIONS[c]["expect"] == "drop" else args.control_seeds)]


def judge(results: dict[str, dict[str, Any]], fit_seeds: list[int]) -> dict[str, Any]:
    """Every cell's series on the monitor's grid, thresholds fitted on the fit seeds' cells, the comparison."""
    from aclarena.analysis.study_validation import monitor_grid_series
    from aclarena.diagnostics.warning_validation import FIRST_CHECK, compare

    series = []
    ids: dict[str, int] = {}
    for name, res in sorted(results.items()):
        seed = int(name.rsplit("-s", 1)[1])
        ids[name] = len(ids)
        for s in monitor_grid_series(ids[name], res):
            series.append((name, seed, s))
    fit_ids = [ids[n] for n, seed, _ in series if seed in fit_seeds]
    out = compare([s for _, _, s in series], [*PREDICTORS, FIRST_CHECK, "loss_fall"], fit_ids)
    names = {v: k for k, v in ids.items()}
    for part in ("fit", "held_out"):
        out[part]["cells"] = [names[i] for i in out[part].pop("runs")]
    out["cells"] = [{"cell": name, "seed": seed, "fit": seed in fit_seeds, "domain": s.domain,
                     "drop_step": s.drop_step} for name, seed, s in series]
    return out


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float as None (the result files are strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def costs(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Seconds of ground truth and of monitor checks per cell (median and range over the cells), and per call."""
    import statistics

    rows = {k: v.get("cost") or {} for k, v in results.items()}

    def summary(xs: list[float]) -> dict[str, float] | None:
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} if xs else None

    gt = [c["ground_truth_s"] for c in rows.values() if "ground_truth_s" in c]
    mon = [c["monitor_checks_s"] + c.get("monitor_setup_s", 0.0) for c in rows.values() if "monitor_checks_s" in c]
    per_gt = [c["ground_truth_s"] / c["ground_truth_evaluations"] for c in rows.values()
              if c.get("ground_truth_evaluations")]
    per_check = [c["monitor_checks_s"] / c["monitor_checks"] for c in rows.values() if c.get("monitor_checks")]
    total = [v["time_s"] for v in results.values() if "time_s" in v]
    cpu = [c["cpu_s"] for c in rows.values() if "cpu_s" in c]
    return {"cells": len(rows), "ground_truth_s": summary(gt), "monitor_s": summary(mon),
            "per_evaluation_s": summary(per_gt), "per_check_s": summary(per_check), "cell_wall_s": summary(total),
            "cell_cpu_s": summary(cpu), "wall_s_total": sum(total), "cpu_s_total": sum(cpu) if cpu else None,
            "note": "wall seconds on 2 CPU cores shared with other jobs (load average 5-7); CPU seconds are this "
                    "process's own"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="src", type=Path, default=Path("runs/demo"), help="a quick run with seq-math trained")
    p.add_argument("--out", type=Path, default=Path("runs/val"), help="folder of the cells' run folders")
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--conditions", default=",".join(CONDITIONS), help="comma-separated (default: all)")
    p.add_argument("--seeds", default="0,1,2,3", help="comma-separated training seeds (default 0,1,2,3)")
    p.add_argument("--control-seeds", default="0,1,2", help="seeds of the negative controls (default 0,1,2)")
    p.add_argument("--fit-seeds", default="0", help="seeds whose cells fit the thresholds (default 0)")
    p.add_argument("--sft-steps", type=int, default=30)
    p.add_argument("--rl-steps", type=int, default=20)
    p.add_argument("-n", type=int, default=50, help="ground-truth items (default 50)")
    p.add_argument("--dense", type=int, default=10, help="ground truth every step for the first K steps (default 10)")
    p.add_argument("--judge-only", action="store_true", help="judge the cells already measured under --out")
    p.add_argument("--cells", default=None, help="measure only these cells, in this order (search-sft-s1,...)")
    p.add_argument("--costs", type=Path, nargs="*", default=[],
                   help="with --judge-only: the measuring pass's --json-out, whose cells' CPU seconds and errors are kept")
    args = p.parse_args(argv)
    args.conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    for c in args.conditions:
        if c not in CONDITIONS:
            raise SystemExit(f"unknown condition {c!r}; conditions: {', '.join(CONDITIONS)}")
    args.seeds = [int(x) for x in args.seeds.split(",")]
    args.control_seeds = [int(x) for x in args.control_seeds.split(",")]
    fit_seeds = [int(x) for x in args.fit_seeds.split(",")]
    from aclarena.progress import quiet_libraries

    quiet_libraries()
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    t0 = time.monotonic()
    for condition, seed in cells(args):
        name = f"{condition}-s{seed}"
        run = args.out / name
        if args.judge_only:
            from aclarena.results.lead_time import lead_time_key, read_lead_time
            from aclarena.store import ResultsStore

            key = lead_time_key(CONDITIONS[condition]['stage'])
            store = ResultsStore(run)
            if store.exists() and store.has(key):
                with store.reader() as r:
                    results[name] = read_lead_time(r, key).result
            continue
        args.out.mkdir(parents=True, exist_ok=True)
        try:  # one measuring process per cell: several passes can share the list (each skips the cells taken)
            fd = os.open(args.out / f"{name}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            print(f"{name}: taken by another pass ({args.out / (name + '.lock')}), skipped", file=sys.stderr, flush=True)
            continue
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        run = prepare(args.src, args.out, condition, seed, args.sft_steps, args.rl_steps)
        c0 = time.process_time()
        print(f"[{time.strftime('%H:%M:%S')}] {name}: measuring", file=sys.stderr, flush=True)
        try:
            results[name] = measure(run, condition, args)
        except Exception as e:  # noqa: BLE001 (a refused or failed cell is recorded, the others go on)
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            print(f"{name}: {errors[name]}", file=sys.stderr, flush=True)
            continue
        results[name]["cost"]["cpu_s"] = time.process_time() - c0
        gt = results[name]["ground_truth"]
        print(f"[{time.strftime('%H:%M:%S')}] {name}: drop at "
              f"{[next((q['step'] for q in pts[1:] if q['significant']), None) for pts in gt.values()]}, "
              f"{results[name]['time_s']:.0f} s", file=sys.stderr, flush=True)
    for path in args.costs if args.judge_only else []:  # the measuring passes' CPU seconds and errors
        before = json.loads(path.read_text(encoding="utf-8"))
        for k, v in (before.get("cells") or {}).items():
            if k in results and "cpu_s" in (v.get("cost") or {}):
                results[k]["cost"]["cpu_s"] = v["cost"]["cpu_s"]
        errors.update({k: e for k, e in (before.get("errors") or {}).items() if k not in results})
    try:
        report = judge(results, fit_seeds) if results else {}
    except ValueError as e:  # a measuring pass without fit (or held-out) cells: judged later with --judge-only
        report = {"status": "not judged", "reason": str(e)}
    cmd = "python " + shlex.join(["benchmarks/warning_validation.py", *(argv if argv is not None else sys.argv[1:])])
    doc = {"made_by": {"command": cmd, "date": time.strftime("%Y-%m-%d", time.gmtime()),
                       "machine": f"2 shared CPU cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"},
           "settings": {"conditions": {c: CONDITIONS[c] for c in args.conditions}, "seeds": args.seeds,
                        "control_seeds": args.control_seeds,
                        "fit_seeds": fit_seeds, "sft_steps": args.sft_steps, "rl_steps": args.rl_steps, "n": args.n,
                        "dense": args.dense, "monitor_every": 1},
           "wall_s": time.monotonic() - t0, "errors": errors, "validation": report,
           "costs": costs(results),
           "cells": {k: {kk: v[kk] for kk in ("stage", "phases", "parent", "steps", "table", "ground_truth",
                                                "drop_test", "cost", "time_s", "start_check", "series") if kk in v}
                     for k, v in results.items()}}
    text = json.dumps(finite(doc), indent=1, allow_nan=False)
    if args.json_out is not None:
        args.json_out.write_text(text + "\n", encoding="utf-8")
    print(json.dumps(report.get("rows", []) and {"beats": report["beats"], "held_out": report["held_out"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
