"""Benchmark: wall time of `aclarena-diag demo`, per training phase and per analysis step.

    python benchmarks/demo_time.py                       # the mini demo into a fresh folder (~15 min on 2 idle cores)
    python benchmarks/demo_time.py --preset tiny         # toy size (~2 min)
    python benchmarks/demo_time.py --threads 2           # as on a 2-core machine (torch threads)
    python benchmarks/demo_time.py --from /tmp/mini-run  # only print the times of a finished demo run

Targets (issue 6): the mini demo in at most 15 minutes on 2 CPU cores (stretch: 8), the tiny
preset in at most 2 minutes. The demo records every phase's and step's time in its run folder
(summary.json); this script runs it in a fresh subprocess, then prints those times, the total
and its ratio to the target. Other processes on the machine slow it down: report the load
(printed before and after) with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = {"mini": 15 * 60, "tiny": 2 * 60}
STRETCH_S = {"mini": 8 * 60, "tiny": None}


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def report(summary: dict, wall: float | None, preset: str) -> None:
    print(f"{'phase':<22} {'status':<10} {'steps':>6} {'time':>9}")
    for p in summary["phase_times"]:
        t = "-" if p["time_s"] is None else f"{p['time_s']:.1f} s"
        print(f"{p['name']:<22} {p['status']:<10} {p['steps'] or '-':>6} {t:>9}")
    print(f"training (sum of phases): {summary['training_s']:.1f} s")
    for k, v in summary["step_times"].items():
        print(f"step {k:<18} {v:9.1f} s")
    total = wall if wall is not None else summary["total_s"]
    target = TARGET_S[preset]
    line = f"total {total:.1f} s = {total / target:.2f} x the {target // 60}-minute target"
    if STRETCH_S.get(preset):
        line += f", {total / STRETCH_S[preset]:.2f} x the {STRETCH_S[preset] // 60}-minute stretch"
    print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="mini", choices=("mini", "tiny"))
    ap.add_argument("--out", help="run folder (default: a fresh temporary one, removed afterwards)")
    ap.add_argument("--threads", type=int, help="torch/OpenMP threads (default: torch's)")
    ap.add_argument("--from", dest="src", help="print the times of a finished demo folder instead of running")
    args = ap.parse_args()
    if args.src:
        s = json.loads((Path(args.src) / "summary.json").read_text())
        report(s, None, s.get("preset", args.preset))
        return 0
    tmp = None if args.out else tempfile.mkdtemp(prefix="aclarena-demo-bench-")
    out = Path(args.out or Path(tmp) / "run")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    print(f"load before: {load()}", flush=True)
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "aclarena", "demo", "--preset", args.preset, "--out", str(out),
                           "--json"], cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t
    print(f"load after: {load()}")
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return proc.returncode
    report(json.loads(proc.stdout)["summary"], wall, args.preset)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
