"""``aclarena-diag eval``: the capability matrix, every checkpoint on every suite.

Mini-arena suites are played greedily (accuracy per item) and ``--samples k`` times with
sampling (avg@k), for each seed of ``--seeds``; each (checkpoint, suite, settings) cell is
written to results.h5 as soon as it is done, so a rerun skips finished cells and a killed
run resumes. A checkpoint that cannot be loaded or generate becomes an error cell; the
rest of the matrix is still computed (error cells are retried on the next run).
A cell whose 95% interval holds its suite's guessing score (``general``: 0.25, one of four
options) is named in a warning and marked ``at_chance`` in ``--json``: it measures no skill.

``--import-lm-eval NAME=FILE`` reads lm-evaluation-harness results instead (see
:mod:`aclarena.store.lm_eval`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from aclarena.cli._common import add_verb, fmt, manifest_of, print_json, print_table, progress
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
        ),
    )
    p.add_argument("--checkpoints", metavar="A,B,...", help="checkpoints to score (default: every one in the manifest)")
    p.add_argument("--suites", default="id,ood,general", metavar="S,...",
                   help="suites or groups: id, ood, general, all, a domain (math) or a suite (math/id); "
                        "default id,ood,general")
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
    p.add_argument("--force", action="store_true", help="recompute (or re-import) cells already in the store")
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


def _manifest_text(run_dir: str) -> str | None:
    try:
        return (Path(run_dir) / "aclarena.toml").read_text(encoding="utf-8")
    except OSError:
        return None


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
    if args.lm_eval_task or args.lm_eval_metric:
        raise AclarenaError("--lm-eval-task and --lm-eval-metric go with --import-lm-eval NAME=FILE")
    from aclarena.envs import resolve_suites, suite_chance
    from aclarena.envs.evaluation import EvalSettings, evaluate_suite, rollouts_per_suite, suite_domain_role
    from aclarena.models.loading import LoadOptions, NonFiniteWeightsError, load_model, load_tokenizer
    from aclarena.store import ResultsStore
    from aclarena.store.capability import (
        RESULT_TYPE,
        RESULT_VERSION,
        at_chance,
        cell_ci95,
        cell_key,
        error_payload,
        read_cells,
        settings_id,
    )

    if getattr(args, "engine", "hf") == "vllm":
        from aclarena.models.vllm_engine import require_vllm

        require_vllm()  # before any cell: a missing vLLM is bad input, not an error cell
        if w.distributed:
            raise AclarenaError("--engine vllm runs one process (vLLM parallelizes itself); do not start it with "
                                "torchrun")
    specs = manifest.resolve_many(args.checkpoints) if args.checkpoints else list(manifest)
    if not specs:
        raise AclarenaError("the manifest has no checkpoints; add some with `aclarena-diag init`")
    suites = resolve_suites(args.suites)
    settings = EvalSettings(n=args.n, seeds=_seeds(args.seeds), samples=args.samples, temperature=args.temperature,
                            top_p=args.top_p, batch_size=args.batch_size)
    options = LoadOptions(dtype=args.dtype, device=w.device(args.device),
                          device_map=getattr(args, "device_map", None))
    ident = settings.identity()
    sid = settings_id(ident)
    store = ResultsStore(args.run)

    def plan() -> tuple[dict[str, list[str]], int]:  # rank 0 alone reads the store
        existing = {}
        if store.exists():
            with store.reader() as r:
                existing = {c.key: c for c in read_cells(r)}
        todo: dict[str, list[str]] = {}
        skipped = 0
        for spec in specs:
            for suite in suites:
                c = existing.get(cell_key(spec.name, suite, sid))
                if c is not None and c.ok and not args.force:
                    skipped += 1
                    continue
                todo.setdefault(spec.name, []).append(suite)
        return todo, skipped

    todo, skipped = w.run_main(plan)
    manifest_text = _manifest_text(args.run)
    computed: set[tuple[str, str]] = set()
    per_suite = rollouts_per_suite(settings)
    with progress(enabled=not args.json and w.is_main) as bar:
        task = bar.add_task("eval", total=sum(len(v) for v in todo.values()) * per_suite)
        for spec in specs:
            pending = todo.get(spec.name, [])
            if not pending:
                continue
            model = tokenizer = None
            load_error = None
            try:
                if args.engine == "vllm":
                    from aclarena.models.vllm_engine import load_llm

                    model = load_llm(spec.name, manifest, args.run, options, seed=settings.seeds[0])
                else:
                    model = load_model(spec, manifest, args.run, options)
                tokenizer = load_tokenizer(spec, manifest, args.run, require_chat_template=True)
            except NonFiniteWeightsError:
                raise  # not a cell at all: a score of such weights would look real (docs/reliability.md)
            except Exception as e:  # any failure becomes an error cell, the rest goes on
                load_error = _one_line(e)
            for suite in pending:
                domain, role = suite_domain_role(suite)
                bar.update(task, description=f"{spec.name} {suite}")
                if load_error is not None:
                    data, attrs = error_payload(checkpoint=spec.name, suite=suite, domain=domain, role=role,
                                                source="arena", settings=ident, error=load_error)
                    bar.advance(task, per_suite)
                else:
                    try:
                        # world only when sharding: one process calls it as before
                        cell = evaluate_suite(model, tokenizer, suite, settings, checkpoint=spec.name,
                                              on_progress=lambda k: bar.advance(task, k),
                                              **({"world": w} if w.distributed else {}))
                    except AclarenaError:
                        raise
                    except Exception as e:  # a failing checkpoint must not stop the matrix
                        cell = error_payload(checkpoint=spec.name, suite=suite, domain=domain, role=role,
                                             source="arena", settings=ident, error=_one_line(e))
                    if not w.is_main:  # rank 0 has this rank's share and writes the cell
                        w.run_main(lambda: None)
                        continue
                    data, attrs = cell
                w.run_main(functools.partial(store.write, cell_key(spec.name, suite, sid), data,
                                             result_type=RESULT_TYPE, result_version=RESULT_VERSION, attrs=attrs,
                                             overwrite=True, manifest_text=manifest_text))
                computed.add((spec.name, suite))
            del model, tokenizer
    if not w.is_main:
        return 0
    rows = []
    with store.reader() as r:
        cells = {c.key: c for c in read_cells(r)}
        for spec in specs:
            for suite in suites:
                c = cells.get(cell_key(spec.name, suite, sid))
                if c is None:
                    continue
                ci95, chance = cell_ci95(r, c) if c.ok else None, suite_chance(suite)
                rows.append({"checkpoint": spec.name, "suite": suite, "status": c.status, "mean": c.mean,
                             "ci95": ci95, "chance": chance, "at_chance": at_chance(ci95, chance), "std": c.std,
                             "avg_k_mean": c.avg_k_mean, "avg_k_std": c.avg_k_std, "n_items": c.n_items,
                             "n_seeds": c.n_seeds, "samples": c.samples, "error": c.error,
                             "computed": (spec.name, suite) in computed, "key": c.key})
    errors = [r for r in rows if r["status"] != "ok"]
    over_seeds = _over_training_seeds(rows, [s.name for s in specs])
    if args.json:
        print_json({"settings": ident, "settings_id": sid, "checkpoints": [s.name for s in specs], "suites": suites,
                    "skipped": skipped, "cells": rows, "over_training_seeds": over_seeds})
    else:
        _print_matrix(rows, [s.name for s in specs], suites, settings.samples, sid, skipped)
        if over_seeds:
            _print_over_seeds(over_seeds, suites)
    _warn_at_chance(rows)
    if errors:
        first = errors[0]
        print(f"aclarena-diag eval: error: {len(errors)} cell(s) failed, e.g. {first['checkpoint']} on "
              f"{first['suite']}: {first['error']}; the rest of the matrix is stored; fix it and rerun to retry them",
              file=sys.stderr)
        return 1
    return 0


def _warn_at_chance(rows: list[dict[str, Any]]) -> None:
    """One stderr line per suite whose score is indistinguishable from guessing on some checkpoint."""
    from aclarena.envs import suite_chance
    from aclarena.store.capability import at_chance_line

    for suite in dict.fromkeys(r["suite"] for r in rows if r["at_chance"]):
        names = [r["checkpoint"] for r in rows if r["suite"] == suite and r["at_chance"]]
        print(f"aclarena-diag eval: warning: {at_chance_line(suite, suite_chance(suite), names)}", file=sys.stderr)


def _over_training_seeds(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Mean ± std (ddof 1) over the curricula of `train --seeds N` (``seq-math``, ``seq-math-s1``, ...)."""
    import statistics

    from aclarena.train.naming import replicate_groups

    by = {(r["checkpoint"], r["suite"]): r for r in rows if r["status"] == "ok" and r["mean"] is not None}
    out = []
    for stem, members in replicate_groups(names).items():
        for suite in dict.fromkeys(r["suite"] for r in rows):
            vals = [float(by[(m, suite)]["mean"]) for m in members if (m, suite) in by]
            if len(vals) >= 2:
                out.append({"checkpoint": stem, "suite": suite, "mean": statistics.fmean(vals),
                            "std": statistics.stdev(vals), "n_curricula": len(vals),
                            "members": [m for m in members if (m, suite) in by]})
    return out


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


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text and not isinstance(e, AclarenaError) else (
        text[0] if text else type(e).__name__)


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
    from aclarena.store import ResultsStore
    from aclarena.store.capability import RESULT_TYPE, RESULT_VERSION, cell_key, read_cells
    from aclarena.store.lm_eval import import_payloads, parse_tag

    tags = dict(parse_tag(t) for t in args.lm_eval_task)
    metric: dict[str, str] = {}
    for m in args.lm_eval_metric:
        task, _, name = m.rpartition("=")
        metric[task or "*"] = name
    store = ResultsStore(args.run)
    existing = set()
    if store.exists():
        with store.reader() as r:
            existing = {c.key for c in read_cells(r)}
    items = []
    rows = []
    seen_tasks: set[str] = set()
    for entry in args.import_lm_eval:
        name, sep, file = entry.partition("=")
        if not sep or not name or not file:
            raise AclarenaError(f"--import-lm-eval {entry!r} must look like NAME=FILE (a checkpoint of the manifest "
                                "and an lm-eval results JSON)")
        spec = manifest.resolve(name.strip())
        for suite, settings, data, attrs in import_payloads(spec.name, file.strip(), tags=tags, metric=metric):
            seen_tasks.add(suite.split("/", 1)[1])
            key = cell_key(spec.name, suite, settings)
            status = "imported"
            if key in existing and not args.force:
                status = "already in the store"
            else:
                items.append((key, data, RESULT_TYPE, RESULT_VERSION, attrs))
            rows.append({"checkpoint": spec.name, "suite": suite, "metric": attrs["metric"], "value": attrs["mean"],
                         "stderr": attrs["stderr"], "items": attrs["n_items"], "domain": attrs["domain"] or None,
                         "role": attrs["role"], "status": status})
    unknown = sorted(set(tags) - seen_tasks)
    if unknown:
        from aclarena.errors import unknown_name

        raise unknown_name("lm-eval task in --lm-eval-task", unknown[0], seen_tasks)
    if items:
        store.write_many(items, overwrite=True, manifest_text=_manifest_text(args.run))
    if args.json:
        print_json({"imported": sum(r["status"] == "imported" for r in rows), "cells": rows})
    else:
        print_table(rows, ["checkpoint", "suite", "metric", "value", "stderr", "items", "domain", "role", "status"],
                    title="lm-evaluation-harness import")
    return 0
