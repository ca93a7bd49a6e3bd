"""Benchmark: what the study's validation costs a seed, old code against new, side by side (issue 42, item 3).

    python benchmarks/validation_time.py --root /work/runs/study-time-1seed \\
        --json-out docs/results/validation_time_1seed.json

Reads a finished ``benchmarks/study_time.py --seeds 1`` root (its ``old/`` and ``new/`` runs and the two
checkouts ``old-src/``, ``new-src/``). A one-seed study runs no validation (it fits on seed 0 and reports on the
others), so that benchmark's times leave it out; this one measures a seed's share of it, both sides started
together, one torch thread each (as the studies ran):

* ``old``: the old code's validation of seed 0 (``measure_lead_time``, as its study calls it per seed): the
  e-commerce stage retrained with the monitor and the ground truth;
* ``new``: the same retrain with the new code (``reuse_chain=False``). A study of two or more seeds lets the ground
  truth ride the chain's own stage instead (nothing retrained), so what the new study pays a seed is the retrain
  less the stage's own training; the latter is read from the new study's log (the stage's phases, as timed there,
  beside the old study).

Printed and written: both retrains' seconds, the new stage's own time, the riding cost that leaves (an estimate:
two measurements from two runs), and, with the one-seed study timing (``--timing``), what three seeds would take
by that arithmetic: a projection, not the 3-seed side by side the issue asks for. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RUN_ONE = r"""
import json, sys, time
from pathlib import Path
from aclarena.analysis.study import _check_options
from aclarena.train.config import load_config
from aclarena.train.curriculum import CONFIG_COPY
from aclarena.train.lead_time import LeadTimeSettings, measure_lead_time

run, stage, lead_n, extra = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
cfg = load_config(run / CONFIG_COPY)
lead_n, lead_every = _check_options(cfg, 2, 1, lead_n, None, stage)
mon = getattr(cfg, "monitor", None)
every = min(mon.every_n_steps if mon is not None else 5, lead_every)
settings = LeadTimeSettings(stage=stage, n=lead_n, eval_every=lead_every, every_n_steps=every, replicate=0)
t0 = time.monotonic()
result = measure_lead_time(run, settings, force=True, **extra)
print("RESULT " + json.dumps({"seconds": time.monotonic() - t0, "source": result.get("source", "retrain"),
                              "eval_every": lead_every, "every_n_steps": every}))
"""
DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")


def seconds(text: str) -> float:
    """``1h2m3s``, ``5m30s``, ``54s`` in seconds."""
    m = DURATION.match(text)
    if not m or not any(m.groups()):
        raise ValueError(f"not a duration: {text!r}")
    h, mi, s = m.groups()
    return int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0)


def stage_seconds(log: Path, stage: str) -> float:
    """The chain's ``seq-<stage>`` phases' times, as the study's log printed them (``end: ... in 5m30s``)."""
    pat = re.compile(rf"end: seq-{re.escape(stage)}(?:-sft)? \(\w+\).* in (\S+) \(")
    found = [seconds(m.group(1)) for line in log.read_text(encoding="utf-8").splitlines() if (m := pat.search(line))]
    if not found:
        raise SystemExit(f"{log}: no phase of seq-{stage} ended in it; is the study finished?")
    return sum(found)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="a finished benchmarks/study_time.py --seeds 1 root")
    ap.add_argument("--stage", default="ecom", help="the stage the validation watches (default ecom)")
    ap.add_argument("--lead-n", type=int, default=100, help="validation items per earlier domain (default 100)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per side (default 1)")
    ap.add_argument("--timing", help="that root's study timing JSON: adds the 3-seed projection")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    root = Path(args.root)
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    t0 = time.monotonic()
    for side, extra in (("old", {}), ("new", {"reuse_chain": False})):
        src, run = root / f"{side}-src", root / side
        if not (src / "aclarena").is_dir() or not run.is_dir():
            raise SystemExit(f"{root}: no {side}-src/ or {side}/; give a benchmarks/study_time.py root")
        with (root / f"validation-{side}.log").open("w", encoding="utf-8") as log:  # the child keeps its own handle
            procs[side] = subprocess.Popen([sys.executable, "-c", RUN_ONE, str(run), args.stage, str(args.lead_n),
                                            json.dumps(extra)], env=env | {"PYTHONPATH": str(src)},
                                           stdout=log, stderr=subprocess.STDOUT)
    ended: dict[str, float] = {}
    while len(ended) < len(procs):  # each side's end, for the time the other ran alone
        for side, p in procs.items():
            if side not in ended and p.poll() is not None:
                ended[side] = time.monotonic() - t0
        time.sleep(1.0)
    out: dict[str, Any] = {}
    for side, p in procs.items():
        log_path = root / f"validation-{side}.log"
        line = next((x for x in log_path.read_text(encoding="utf-8").splitlines() if x.startswith("RESULT ")), None)
        if p.returncode or line is None:
            print(f"{side}: failed (exit {p.returncode}); see {log_path}", file=sys.stderr)
            return 1
        out[side] = json.loads(line[len("RESULT "):]) | {"ended_after_s": ended[side]}
    stage_new = stage_seconds(root / "new-0.log", args.stage)
    riding = out["new"]["seconds"] - stage_new
    report: dict[str, Any] = {"root": str(root), "stage": args.stage, "lead_n": args.lead_n, "threads": args.threads,
                              "retrain_s": {s: out[s]["seconds"] for s in out}, "sides": out,
                              "new_stage_in_chain_s": stage_new, "new_riding_s_estimate": riding}
    print(f"a seed's validation: old retrain {out['old']['seconds']:.0f} s, new retrain {out['new']['seconds']:.0f} s; "
          f"the new chain's {args.stage} stage {stage_new:.0f} s, so riding it costs ~{riding:.0f} s a seed")
    if args.timing:
        t = json.loads(Path(args.timing).read_text(encoding="utf-8"))
        walls = {s: t["jobs"][s]["wall_s"] for s in ("old", "new")}
        old3 = 3 * walls["old"] + 3 * out["old"]["seconds"]
        new3 = 3 * walls["new"] + 3 * max(riding, 0.0)
        report["projection_3_seeds"] = {"old_s": old3, "new_s": new3, "ratio": new3 / old3,
                                        "how": "3 x (one-seed study + one seed's validation); the old validation "
                                               "retrains, the new one rides the chain (retrain less the stage)"}
        print(f"3 seeds by that arithmetic (a projection): old {old3:,.0f} s, new {new3:,.0f} s -> {new3 / old3:.2f}")
    if args.json_out:
        from aclarena.reproducibility import made_by

        cmd = "python benchmarks/validation_time.py " + " ".join(sys.argv[1:])
        report = {"made_by": made_by(cmd)} | report
        Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
