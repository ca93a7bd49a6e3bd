"""Benchmark: where a demo's time goes, per part (issue 42, "measure first").

    python benchmarks/demo_budget.py --summary runs/demo/summary.json --json-out docs/results/demo_budget.json
    python benchmarks/demo_budget.py --summary docs/results/demo.json --preset mini   # the committed mini demo

For every SFT phase of the demo's curriculum it rebuilds the phase's training records (the same
generator, n and seed as training), renders them with the base's chat template and reports the
tokens per example, the tokens per step at the phase's batch size and the share of a padded batch
that is padding (the expected share over random batches of that size: trl pads each batch to its
longest example; packing is off). Beside it, from the demo's ``summary.json``: each trained phase's
steps, seconds and seconds per step, and each analysis step's seconds (eval, probe, tokens,
signatures, vectors, displacement, forgetting, lead time, consolidation, repair, compare), with
each part's share of their sum (model loading between phases is not in it). The machine's load is printed before and after: times measured
beside other jobs are longer than on the idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def sft_tokens(preset: str, draws: int = 400) -> dict[str, dict[str, Any]]:
    """Per SFT job of the preset's curriculum (chain and oracles): tokens per example and padding share."""
    from transformers import AutoTokenizer

    from aclarena.models.shipped import shipped_base
    from aclarena.train.config import load_config
    from aclarena.train.data import expert_records
    from aclarena.train.plan import plan
    from aclarena.train.presets import preset_path

    cfg = load_config(preset_path(preset))
    tok = AutoTokenizer.from_pretrained(shipped_base())
    batch_default = int(cfg.defaults.get("sft", {}).get("per_device_train_batch_size", 8))
    out: dict[str, dict[str, Any]] = {}
    rng = np.random.default_rng(0)
    for job in plan(cfg):
        if job.kind == "base" or job.phase != "sft" or not job.trains:
            continue
        spec = job.spec
        records = expert_records(job.domain, min(spec.n, 800), job.seed)
        lengths = []
        for r in records:
            tools = r.get("tools")
            tools = json.loads(tools) if isinstance(tools, str) else tools
            ids = tok.apply_chat_template(r["messages"], tools=tools, tokenize=True)
            ids = ids["input_ids"] if not isinstance(ids, list) else ids
            lengths.append(len(ids))
        lens = np.asarray(lengths)
        batch = int(spec.trl.get("per_device_train_batch_size", batch_default))
        padded = [rng.choice(lens, batch, replace=False) for _ in range(draws)]
        out[job.name] = {"domain": job.domain, "examples_measured": len(lens), "batch": batch,
                         "tokens_mean": float(lens.mean()), "tokens_min": int(lens.min()), "tokens_max": int(lens.max()),
                         "tokens_per_step": float(lens.mean() * batch),
                         "padded_tokens_per_step": float(np.mean([b.max() * batch for b in padded])),
                         "padding_share": float(np.mean([1 - b.sum() / (b.max() * batch) for b in padded]))}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", required=True, help="a demo's summary.json (runs/demo/summary.json)")
    ap.add_argument("--preset", default=None, help="the demo's preset (default: the summary's)")
    ap.add_argument("--json-out", help="write the budget here")
    args = ap.parse_args()
    before = load()
    s = json.loads(Path(args.summary).read_text(encoding="utf-8"))
    preset = args.preset or s["preset"]
    tokens = sft_tokens(preset)
    # the parts' sum: a summary of a rerun that read the training back has a short total_s of its own
    total = sum(p["time_s"] or 0.0 for p in s["phase_times"]) + sum(v for k, v in s["step_times"].items() if k != "train")
    phases = []
    for p in s["phase_times"]:
        if p["time_s"] is None or p["status"] in ("reused", "shipped") or p["name"] == "base":
            continue
        row: dict[str, Any] = {"phase": p["name"], "steps": p["steps"], "time_s": p["time_s"],
                               "s_per_step": p["time_s"] / p["steps"] if p["steps"] else None,
                               "share_of_total": p["time_s"] / total}
        row.update({k: v for k, v in tokens.get(p["name"], {}).items() if k != "examples_measured"})
        phases.append(row)
    steps = [{"step": k, "time_s": v, "share_of_total": v / total} for k, v in s["step_times"].items() if k != "train"]
    training = sum(p["time_s"] for p in phases)
    print(f"{preset} demo: total {total:.0f} s, training {training:.0f} s ({training / total:.0%})")
    print(f"{'phase':<22} {'steps':>6} {'time':>8} {'s/step':>7} {'tok/ex':>7} {'pad':>5} {'share':>6}")
    for p in phases:
        pad = f"{p['padding_share']:.0%}" if "padding_share" in p else "-"
        tok = f"{p['tokens_mean']:.0f}" if "tokens_mean" in p else "-"
        sps = f"{p['s_per_step']:.2f}" if p["s_per_step"] else "-"
        print(f"{p['phase']:<22} {p['steps']:>6} {p['time_s']:>7.1f}s {sps:>7} {tok:>7} {pad:>5} "
              f"{p['share_of_total']:>6.1%}")
    for r in steps:
        print(f"step {r['step']:<17} {'':>6} {r['time_s']:>7.1f}s {'':>7} {'':>7} {'':>5} {r['share_of_total']:>6.1%}")
    after = load()
    print(f"load average before {before}, after {after}")
    if args.json_out:
        from aclarena.reproducibility import made_by

        cmd = f"python benchmarks/demo_budget.py --summary {args.summary}" + (f" --preset {args.preset}" if args.preset else "")
        Path(args.json_out).write_text(json.dumps({
            "made_by": made_by(cmd), "summary_made_by": s.get("made_by"), "preset": preset,
            "eval_tasks_per_suite": s.get("eval_tasks_per_suite"), "total_s": total, "training_s": training,
            "phases": phases, "analysis_steps": steps, "load_before": before, "load_after": after,
            "threads": os.environ.get("OMP_NUM_THREADS"), "date": time.strftime("%Y-%m-%d")}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
