"""Experiment: does a pretraining command rebuild the same base? Compare a rebuilt base with a reference.

    python experiments/rebuild_check.py --reference aclarena/models/mini_base \\
        --rebuilt runs/mini-base/checkpoints/base --out docs/results/archive/mini-base/mini_base_rebuild.json
    python experiments/rebuild_check.py --reference docs/results/archive/mini-base/mini_base_8m_pretraining_log.json \\
        --rebuilt runs/sweep/8m/run/checkpoints/base --out docs/results/archive/mini-base/sweep_8m_rebuild.json

The reference is a base folder (the shipped base, or any ``checkpoints/base`` of ``train``) or only
its committed trainer log (``train_log.json``, when the folder is gone). Every file the reference
folder holds is compared by SHA-256 (a file the rebuild lacks differs), except the log, whose wall
times differ by nature; the log is compared entry by entry on every training metric (loss, gradient
norm, token accuracy, entropy, learning rate, tokens seen). One JSON object goes to ``--out``; the exit code is 1 when anything differs,
so a rebuild that drifts says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aclarena.models.shipped import SHIP_FILES, sha256

LOG = "train_log.json"
METRICS = ("loss", "grad_norm", "mean_token_accuracy", "entropy", "learning_rate", "num_tokens", "train_loss")
FILES = tuple(name for name in SHIP_FILES if name != LOG)  # the log holds wall times: compared by metric below


def load_log(path: Path) -> list[dict]:
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: cannot read the trainer log {path} ({e}); name a base folder or its train_log.json") from None
    if not isinstance(log, list) or not log:
        raise SystemExit(f"error: {path} is not a trainer log (a non-empty list of logged steps)")
    return log


def compare(reference: Path, rebuilt: Path) -> dict:
    ref_log = load_log(reference if reference.is_file() else reference / LOG)
    new_log = load_log(rebuilt / LOG)
    # strict=False: a log of another length is caught by `identical` below, the common steps are compared here
    differing = [{"index": i, "step": a.get("step"), "metric": k, "reference": a.get(k), "rebuilt": b.get(k)}
                 for i, (a, b) in enumerate(zip(ref_log, new_log, strict=False)) for k in METRICS
                 if (k in a or k in b) and a.get(k) != b.get(k)]
    files = {}
    if reference.is_dir():
        for name in FILES:
            if (reference / name).is_file():  # a file the rebuild lacks is a difference, not a skip
                files[name] = (rebuilt / name).is_file() and sha256(reference / name) == sha256(rebuilt / name)
    runtime = [log[-1].get("train_runtime") for log in (ref_log, new_log)]
    return {"reference": str(reference), "rebuilt": str(rebuilt),
            "log_entries": [len(ref_log), len(new_log)], "log_metrics_compared": list(METRICS),
            "log_values_differing": len(differing), "first_differences": differing[:5],
            "scope": "files and trainer log" if files else "trainer log only (the reference has no files to hash)",
            "files_identical": files, "train_runtime_s": {"reference": runtime[0], "rebuilt": runtime[1]},
            "identical": len(ref_log) == len(new_log) and not differing and all(files.values())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", required=True, type=Path, help="a base folder, or its train_log.json")
    p.add_argument("--rebuilt", required=True, type=Path, help="the rebuilt base folder (checkpoints/base of `train`)")
    p.add_argument("--out", type=Path, help="write the comparison here as JSON")
    p.add_argument("--command", default="", help="the command that rebuilt it (recorded with the result)")
    args = p.parse_args()
    if not args.reference.exists():
        raise SystemExit(f"error: the reference {args.reference} does not exist; name a base folder or a train_log.json")
    result = compare(args.reference, args.rebuilt)
    if args.command:
        result["command"] = args.command
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
