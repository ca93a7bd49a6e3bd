"""``aclarena-diag eval``: the capability matrix, every checkpoint on every suite.

Mini-arena suites are played greedily (accuracy per item) and ``--samples k`` times with
sampling (avg@k), for each seed of ``--seeds``; each cell is stored as soon as it is done, so a
rerun skips finished cells and a killed run resumes; a checkpoint that fails becomes an error cell.
A cell whose 95% interval holds its suite's guessing score is named in a warning and marked
``at_chance`` in ``--json``. ``--import-lm-eval NAME=FILE`` reads lm-evaluation-harness results
instead. The work is :mod:`aclarena.analysis.eval` (:func:`~aclarena.analysis.eval.evaluate`,
:func:`~aclarena.analysis.eval.import_lm_eval`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from aclarena.cli._common import add_verb, fmt, manifest_of, print_json, print_table
from aclarena.errors import AclarenaError


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "eval",
        help="score checkpoints on the arena suites (greedy and avg@k): the capability matrix",
        examples=(
            "aclarena-diag eval --run runs/demo",
            "aclarena-diag eval --run runs/demo --checkpoints base,seq-math --suites math,general -n 50 --seeds 0,1,2",
            "aclarena-diag eval --run runs/mine --import-lm-eval seq-math=lm_eval_out/results_2025.json "
            "--lm-eval-task aime24=math/id --lm-eval-task nq_open=search/id",
            "aclarena-diag eval --run runs/real --suites capitals,arith -n 50 --samples 0   # suites of aclarena.toml",
        ),
    )
    p.add_argument("--checkpoints", metavar="A,B,...", help="checkpoints to score (default: every one in the manifest)")
    p.add_argument("--suites", default=None, metavar="S,...",
                   help="suites or groups: id, ood, general, all, a domain (math), a suite (math/id), a suite of "
                        "the manifest's [suites.NAME] (a JSONL task file, docs/custom-suites.md) or custom (all of "
                        "those); default: custom when the manifest has suites, else id,ood,general")
    p.add_argument("-n", type=int, default=100, metavar="N", help="tasks per suite and seed (default 100)")
    p.add_argument("--samples", type=int, default=4, metavar="K",
                   help="sampled rollouts per task for avg@K (0: greedy only; the study uses 16); default 4")
    p.add_argument("--seeds", default="0", metavar="0,1,...", help="task-draw seeds; mean ± std over them (default 0)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature for avg@K (default 1.0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling for avg@K (default 1.0)")
    p.add_argument("--batch-size", type=int, default=32, help="episodes generated together (default 32)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16 (default auto)")
    p.add_argument("--device-map", default=None, metavar="MAP",
                   help="spread a model larger than one GPU over the visible GPUs (e.g. auto; needs accelerate)")
    p.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                   help="generate with transformers (hf, default) or vLLM (GPU machines, the gpu extra)")
    p.add_argument("--force", action="store_true",
                   help="recompute (or re-import) cells already in the store; a rerun that fails keeps the good cell "
                        "stored (exit 1)")
    p.add_argument("--allow-code", action="store_true",
                   help="allow a custom suite's scorer that is a Python callable (package.module:function)")
    p.add_argument("--import-lm-eval", action="append", default=[], metavar="NAME=FILE",
                   help="import an lm-evaluation-harness results JSON for checkpoint NAME (repeatable)")
    p.add_argument("--lm-eval-task", action="append", default=[], metavar="TASK=DOMAIN[/ROLE]",
                   help="tag an imported task with the domain it measures and its role id|ood|general "
                        "(e.g. aime24=math/id, mmlu_redux=general); repeatable")
    p.add_argument("--lm-eval-metric", action="append", default=[], metavar="[TASK=]METRIC",
                   help="headline metric to import (e.g. acc_norm or gsm8k=exact_match,flexible-extract)")
    p.set_defaults(func=run)


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise AclarenaError(f"--seeds {text!r} must be comma-separated integers, e.g. 0,1,2") from None
    if not seeds:
        raise AclarenaError("--seeds is empty; give e.g. 0,1,2")
    return seeds


def run(args: argparse.Namespace) -> int:
    from aclarena.distributed import current, world

    manifest = manifest_of(args)
    if args.import_lm_eval:
        if current().distributed or _launched():
            raise AclarenaError("--import-lm-eval reads files and runs no model: run it as one process, "
                                "not under torchrun")
        return _import(args, manifest)
    with world(args.device) as w:
        return _run(args, manifest, w)


def _launched() -> bool:
    from aclarena.distributed import env_world

    return env_world()[1] > 1


def _run(args: argparse.Namespace, manifest: Any, w: Any) -> int:
    from aclarena.analysis.eval import EvalOptions, evaluate

    if args.lm_eval_task or args.lm_eval_metric:
        raise AclarenaError("--lm-eval-task and --lm-eval-metric go with --import-lm-eval NAME=FILE")
    options = EvalOptions(checkpoints=args.checkpoints, suites=args.suites, n=args.n, samples=args.samples,
                          seeds=_seeds(args.seeds), temperature=args.temperature, top_p=args.top_p,
                          batch_size=args.batch_size, device=args.device, dtype=args.dtype,
                          device_map=getattr(args, "device_map", None), engine=getattr(args, "engine", "hf"),
                          force=args.force, allow_code=args.allow_code)
    result = evaluate(args.run, options, world=w, show_progress=not args.json, manifest=manifest)
    if result is None:  # another rank than 0: its share is with rank 0, which writes and prints
        return 0
    rows, over_seeds = result.cells, result.over_training_seeds
    if args.json:
        print_json(result.to_dict())
    else:
        _print_matrix(rows, result.checkpoints, result.suites, result.samples, result.settings_id, result.skipped)
        if over_seeds:
            _print_over_seeds(over_seeds, result.suites)
    for line in result.notes:
        print(f"aclarena-diag eval: note: {line}", file=sys.stderr)
    for line in result.warnings:
        print(f"aclarena-diag eval: warning: {line}", file=sys.stderr)
    error = result.error_message()
    if error is not None:
        print(f"aclarena-diag eval: error: {error}", file=sys.stderr)
        return 1
    return 0


def _print_over_seeds(rows: list[dict[str, Any]], suites: list[str]) -> None:
    by = {(r["checkpoint"], r["suite"]): r for r in rows}
    table = []
    for stem in dict.fromkeys(r["checkpoint"] for r in rows):
        line: dict[str, Any] = {"checkpoint": stem}
        for s in suites:
            r = by.get((stem, s))
            line[s] = "-" if r is None else f"{fmt(r['mean'], 3)}±{fmt(r['std'], 2)}"
        table.append(line)
    n = max(r["n_curricula"] for r in rows)
    print_table(table, ["checkpoint", *suites], title=f"mean ± std over {n} training seeds (train --seeds)",
                caption="each curriculum's greedy accuracy; std with ddof 1")


def _print_matrix(rows: list[dict[str, Any]], checkpoints: list[str], suites: list[str], k: int, sid: str,
                  skipped: int) -> None:
    by = {(r["checkpoint"], r["suite"]): r for r in rows}
    table = []
    for ck in checkpoints:
        line: dict[str, Any] = {"checkpoint": ck}
        for s in suites:
            r = by.get((ck, s))
            if r is None:
                line[s] = "-"
            elif r["status"] != "ok":
                line[s] = "error"
            else:
                cell = f"{fmt(r['mean'], 3)}" + (f"±{fmt(r['std'], 2)}" if r["n_seeds"] > 1 else "")
                if k:
                    cell += f" ({fmt(r['avg_k_mean'], 3)})"
                line[s] = cell
        table.append(line)
    caption = f"greedy accuracy{' (avg@' + str(k) + ')' if k else ''}; ± = std over seeds; settings {sid}"
    if skipped:
        caption += f"; {skipped} cell(s) already in the store were not recomputed"
    print_table(table, ["checkpoint", *suites], title="capability matrix", caption=caption)
    errs = [r for r in rows if r["status"] != "ok"]
    if errs:
        print_table(errs, ["checkpoint", "suite", "error"], title="error cells")


def _import(args: argparse.Namespace, manifest: Any) -> int:
    from aclarena.analysis.eval import import_lm_eval
    from aclarena.results.lm_eval import parse_tag

    tags = dict(parse_tag(t) for t in args.lm_eval_task)
    metric: dict[str, str] = {}
    for m in args.lm_eval_metric:
        task, _, name = m.rpartition("=")
        metric[task or "*"] = name
    files = []
    for entry in args.import_lm_eval:
        name, sep, file = entry.partition("=")
        if not sep or not name or not file:
            raise AclarenaError(f"--import-lm-eval {entry!r} must look like NAME=FILE (a checkpoint of the manifest "
                                "and an lm-eval results JSON)")
        files.append((name.strip(), file.strip()))
    result = import_lm_eval(args.run, files, tags=tags, metric=metric, force=args.force, manifest=manifest)
    if args.json:
        print_json(result.to_dict())
    else:
        print_table(result.rows, ["checkpoint", "suite", "metric", "value", "stderr", "items", "domain", "role",
                                  "status"], title="lm-evaluation-harness import")
    return 0
