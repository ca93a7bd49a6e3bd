"""Benchmark: the study's wall time summed seed by seed, old recipe against new (issue 42, item 3).

    python benchmarks/study_by_seed.py \\
        --seed docs/results/study_timing_half_1seed_kv.json docs/results/validation_time_1seed.json \\
        --seed docs/results/study_timing_half_seed1.json docs/results/validation_time_seed1.json \\
        --seed docs/results/study_timing_half_seed2.json docs/results/validation_time_seed2.json \\
        --json-out docs/results/study_timing_half_by_seed.json

The 3-seed side by side in one run (``benchmarks/study_time.py``) takes the old study about four hours at one
thread, longer than a working session on a machine that keeps nothing from one session to the next. The study is
its seeds' work (each seed's curriculum, evaluation and analyses, and each seed's share of the validation: the old
code retrains the watched stage per seed, the new code rides the chain's own stage) plus seconds of pooling, so it
can be timed one seed at a time, each seed side by side on one machine in one run:

* ``benchmarks/study_time.py --seeds 1 --first-seed K``: seed K's study, both recipes started together;
* ``benchmarks/validation_time.py`` on that root: seed K's validation, both codes started together.

This script adds them up per recipe: a seed's old time is its study plus its validation retrain, its new time its
study plus the riding estimate (the retrain less the chain's own stage, as ``validation_time.py`` prints it). It
reports each seed's ratio and the ratio of the sums (each seed's machine weighs in with its own speed; the pairs
are fair, their sum is not one run). Nothing is asserted; a seed given twice, a timing of more than one seed, or
pairs run with other study options are refused in one line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TARGET_RATIO = 0.5
SAME = ("n", "lead_n", "lead_stage", "threads", "old_commit")  # settings every seed's pair shares, and the recipes
SEEDED = re.compile(r"\.seed(\d+)\.toml$")  # how study_time.py --first-seed names its config copies (seeded())


def seed_of(settings: dict[str, Any]) -> int:
    """The seed a one-seed timing trained: ``--first-seed K`` names its configs ``*.seedK.toml``; else 0 (the mini
    configs' own ``[run] seed``)."""
    found = {int(m.group(1)) if (m := SEEDED.search(settings[f"{k}_config"])) else 0 for k in ("old", "new")}
    if len(found) != 1:
        raise SystemExit(f"error: the old and the new config train other seeds ({settings['old_config']}, "
                         f"{settings['new_config']}); time one seed with the same --first-seed on both")
    return found.pop()


def read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {path}: cannot read it as a result ({type(e).__name__}); give a file the "
                         f"benchmark wrote") from None


def one_seed(timing_path: Path, validation_path: Path) -> dict[str, Any]:
    """A seed's old and new time: its study (side by side) plus its validation (side by side)."""
    t, v = read(timing_path), read(validation_path)
    st = t["settings"]
    if st["seeds"] != 1 or "ratio_new_old" not in t:
        raise SystemExit(f"error: {timing_path}: not a finished one-seed timing (seeds {st['seeds']}); "
                         f"give benchmarks/study_time.py --seeds 1 results")
    if v.get("stage") != st["lead_stage"] or v.get("lead_n") != st["lead_n"]:
        raise SystemExit(f"error: {validation_path}: validates stage {v.get('stage')} with --lead-n {v.get('lead_n')}, "
                         f"the timing's study {st['lead_stage']} with {st['lead_n']}; pair a root's two results")
    study = {s: t["jobs"][s]["wall_s"] for s in ("old", "new")}
    validation = {"old": v["retrain_s"]["old"], "new": max(v["new_riding_s_estimate"], 0.0)}
    total = {s: study[s] + validation[s] for s in study}
    recipes = {f"{k}_recipe": SEEDED.sub(".toml", st[f"{k}_config"]) for k in ("old", "new")}  # the config, any seed
    return {"seed": seed_of(st), "settings": {k: st[k] for k in SAME} | recipes, "new_commit": st["new_commit"],
            "date": t["made_by"]["date"], "timing": str(timing_path), "validation": str(validation_path),
            "study_s": study, "validation_s": validation, "old_s": total["old"], "new_s": total["new"],
            "ratio": total["new"] / total["old"], "study_ratio": t["ratio_new_old"]}


def combine(seeds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The sums over seeds and their ratio; each seed's ratio and their range."""
    if not seeds:
        raise SystemExit("error: no seed given; pass --seed TIMING VALIDATION once per seed")
    numbers = [s["seed"] for s in seeds]
    if len(set(numbers)) != len(numbers):
        raise SystemExit(f"error: a seed given twice (seeds {numbers}); give each seed's pair once")
    for s in seeds[1:]:
        diff = sorted(k for k in s["settings"] if s["settings"][k] != seeds[0]["settings"][k])
        if diff:
            raise SystemExit(f"error: seed {s['seed']}'s pair ran with other settings than seed {seeds[0]['seed']}'s "
                             f"({', '.join(diff)}); time every seed alike")
    old, new = sum(s["old_s"] for s in seeds), sum(s["new_s"] for s in seeds)
    ratios = [s["ratio"] for s in seeds]
    return {"seeds": sorted(seeds, key=lambda s: s["seed"]), "old_s": old, "new_s": new, "ratio_new_old": new / old,
            "ratio_range": [min(ratios), max(ratios)], "target_ratio": TARGET_RATIO,
            "how": "Per seed: old = its study + its validation retrain, new = its study + the validation riding the "
                   "chain (retrain less the chain's stage); each seed's two sides side by side on one machine; the "
                   "seeds' pairs on the machines of their sessions, summed"}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", nargs=2, action="append", default=[], metavar=("TIMING", "VALIDATION"),
                    help="a seed's study_time.py --seeds 1 result and validation_time.py result (repeat per seed)")
    ap.add_argument("--json-out")
    args = ap.parse_args(argv)
    out = combine([one_seed(Path(t), Path(v)) for t, v in args.seed])
    for s in out["seeds"]:
        print(f"seed {s['seed']} ({s['date']}): old {s['old_s']:,.0f} s (study {s['study_s']['old']:,.0f} + "
              f"validation {s['validation_s']['old']:,.0f}), new {s['new_s']:,.0f} s (study {s['study_s']['new']:,.0f} "
              f"+ validation ~{s['validation_s']['new']:,.0f}): {s['ratio']:.2f}")
    lo, hi = out["ratio_range"]
    k = len(out["seeds"])
    print(f"{k} seed{'' if k == 1 else 's'}: old {out['old_s']:,.0f} s, new {out['new_s']:,.0f} s -> new / old "
          f"{out['ratio_new_old']:.2f} (per seed {lo:.2f}-{hi:.2f}; target at most {TARGET_RATIO})")
    if args.json_out:
        from aclarena.reproducibility import made_by

        cmd = "python benchmarks/study_by_seed.py " + " ".join(argv if argv is not None else sys.argv[1:])
        Path(args.json_out).write_text(json.dumps({"made_by": made_by(cmd), **out}, indent=1) + "\n",
                                       encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
