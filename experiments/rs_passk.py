"""pass@k of a run's checkpoints on a domain's train tasks: can a rejection-sampling SFT phase (or an
RL-only stage) start there? (issue 31, item 2)

    python experiments/rs_passk.py --run runs/demo --pairs seq-math:search,base:math -n 50 -k 4 \\
        --out docs/results/rs_sft_passk.json

Samples ``k`` trajectories per task (temperature 1, the arena's rollout loop) from each start with
:func:`aclarena.train.data.rejection_phase_data`, the function a ``data = "rejection"`` phase calls,
and records how many the domain's reward verifies, with a Wilson 95% upper bound when none is.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time


def wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    p = k / n
    return (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--pairs", default="seq-math:search,base:math", help="START:DOMAIN,... (default %(default)s)")
    ap.add_argument("-n", type=int, default=50)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from aclarena.train.data import rejection_phase_data
    from aclarena.train.phases import load_start

    out: dict[str, object] = {"command": "python experiments/rs_passk.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" if len(k) > 1 else f"-{k} {v}" for k, v in vars(args).items()),
        "load_average": os.getloadavg()[0], "pairs": {}}
    for pair in args.pairs.split(","):
        start, domain = pair.split(":")
        t = time.time()
        model, tok = load_start(os.path.join(args.run, "checkpoints", start))
        _, rep = rejection_phase_data(model, tok, domain, args.n, args.k, args.seed, fallback="none")
        rep.pop("fallback_task_ids")
        rep["task_pass_upper95"] = wilson_upper(rep["tasks_solved"], rep["tasks"])
        rep["sample_pass_upper95"] = wilson_upper(rep["correct_samples"], rep["samples"])
        out["pairs"][pair] = {**rep, "seconds": round(time.time() - t, 1)}  # type: ignore[index]
        print(json.dumps(out["pairs"][pair]), flush=True)  # type: ignore[index]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
