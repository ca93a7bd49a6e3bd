"""Benchmark: one SFT step of the mini recipe under three CPU settings, measured side by side (issue 31, item 4).

    python benchmarks/sft_speed.py                        # ecom, 12 steps per try, 2 rounds (~6 min on 2 cores)
    python benchmarks/sft_speed.py --domain math --steps 20 --rounds 3 --json-out t.json

The demo's training is compute-bound: the e-commerce SFT phase (200 steps of 8 conversations of
~580 tokens, 13% of them padding) recorded 428 of the chain's 1,193 s on 2 threads
(docs/results/demo_phase_times.json); this times the steps themselves (1.4 s each, idle). What would make a step cheaper without another recipe is
the CPU's kernels and precision, so this trains the same steps from the shipped base three ways:

* ``avx2-fp32``: what aclarena does (:func:`aclarena.reproducibility.pin_cpu_kernels` pins the AVX2
  code paths, so two x86 machines train the same bits), float32;
* ``native-fp32``: ``ACLARENA_CPU_KERNELS=native`` (each library picks its own kernels: AVX-512
  on a Zen 4 host), float32;
* ``native-bf16``: native kernels and trl's ``bf16 = true`` (autocast to bfloat16; the weights and
  the optimizer stay float32).

Each try is a fresh process (the kernels are chosen when torch is imported); the ways alternate
in rounds, so a load change on the machine touches every way alike. Printed: the median seconds
per step (the first step of each try left out: it warms the allocator), its ratio to
``avx2-fp32``, and the training loss at the first and last step (the same data in the same order;
bfloat16 changes the numbers, and a way whose loss departs from float32's is not a free speed-up).
Nothing is asserted; only the ratios within one run mean anything on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aclarena.reproducibility import OPT_OUT, PORTABLE_ENV, pin_cpu_kernels

REPO = Path(__file__).resolve().parents[1]
WAYS = {
    "avx2-fp32": ({}, {}),
    "native-fp32": ({OPT_OUT: "native"}, {}),
    "native-bf16": ({OPT_OUT: "native"}, {"bf16": True}),
}
# the recipe's SFT settings of each stage (examples/mini.toml): batch 8, its learning rate
LR = {"math": 1e-3, "search": 2e-4, "ecom": 2e-4, "if": 5e-4}


def worker(way: str, domain: str, steps: int, seed: int) -> dict:
    """Train ``steps`` SFT steps of ``domain``'s expert conversations from the shipped base; times per step."""
    pin_cpu_kernels()
    import torch
    from transformers import TrainerCallback

    from aclarena.models.shipped import shipped_base
    from aclarena.train.data import expert_records
    from aclarena.train.phases import run_sft

    times: list[float] = []
    losses: list[float] = []

    class Clock(TrainerCallback):
        t = 0.0

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN003
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003
            times.append(time.perf_counter() - self.t)

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001, ANN003
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    # the phase runner the curriculum uses (its trainer settings and callbacks), with no checkpoints on the way
    with tempfile.TemporaryDirectory() as work:
        run_sft(shipped_base(), expert_records(domain, 8 * steps, seed), Path(work) / "out", seed=seed,
                trl={"max_steps": steps, "learning_rate": LR[domain], "logging_steps": 1, "save_strategy": "no",
                     "report_to": "none", **WAYS[way][1]}, callbacks=[Clock()], work_dir=Path(work) / "work")
    return {"way": way, "step_s": times, "loss": losses, "threads": torch.get_num_threads(),
            "capability": torch.backends.cpu.get_cpu_capability()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="ecom", choices=sorted(LR))
    ap.add_argument("--steps", type=int, default=12, help="SFT steps per try (default 12)")
    ap.add_argument("--rounds", type=int, default=2, help="tries of every way, alternating (default 2)")
    ap.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out", help="also write every try's step times and losses here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.domain, args.steps, args.seed)))
        return 0
    ways = args.ways.split(",")
    if unknown := [w for w in ways if w not in WAYS]:
        raise SystemExit(f"unknown way {unknown[0]!r}; choose from {', '.join(WAYS)}")
    tries = []
    for r in range(args.rounds):
        for way in ways:
            env = {k: v for k, v in os.environ.items() if k not in (*PORTABLE_ENV, OPT_OUT)}
            env.update(WAYS[way][0], HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
            proc = subprocess.run([sys.executable, __file__, "--worker", way, "--domain", args.domain,
                                   "--steps", str(args.steps), "--seed", str(args.seed)],
                                  cwd=REPO, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"{way}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}")
            t = json.loads(proc.stdout.strip().splitlines()[-1])
            t["round"] = r
            tries.append(t)
            print(f"round {r} {way:<12} median {statistics.median(t['step_s'][1:]):.3f} s/step "
                  f"({t['capability']}, {t['threads']} threads)", flush=True)
    print(f"\n{args.domain} SFT, batch 8, {args.steps} steps per try, {args.rounds} rounds "
          f"(first step of each try left out)")
    print(f"{'way':<12} {'s/step':>8} {'vs avx2-fp32':>13} {'loss first':>11} {'loss last':>10}")
    med = {w: statistics.median([s for t in tries if t["way"] == w for s in t["step_s"][1:]]) for w in ways}
    for w in ways:
        t0 = next(t for t in tries if t["way"] == w)
        ref = med.get("avx2-fp32")
        ratio = f"{ref / med[w]:.2f}x" if ref else "-"
        print(f"{w:<12} {med[w]:8.3f} {ratio:>13} {t0['loss'][0]:11.4f} {t0['loss'][-1]:10.4f}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "command": "python benchmarks/sft_speed.py " + " ".join(sys.argv[1:]).replace(f"--json-out {args.json_out}", "").strip(),
            "domain": args.domain, "steps": args.steps, "rounds": args.rounds, "median_step_s": med,
            "speedup_vs_avx2_fp32": {w: med["avx2-fp32"] / med[w] for w in ways} if "avx2-fp32" in med else None,
            "tries": tries, "date": time.strftime("%Y-%m-%d")}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
