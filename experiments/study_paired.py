"""Per seed of a `study` run, the item-by-item change of the earlier skill over the stage that hits it.

For each seed: search/id and math/id over the e-commerce stage (seq-search -> seq-ecom) and math/id
over the search stage (seq-math -> seq-search): items lost and gained and the one-sided exact McNemar p of
a drop (`aclarena.analysis.paired.paired_change`, the demo's test). Reads the run's results.h5;
loads no model.

    python experiments/study_paired.py --run runs/study2 --seeds 3 --out docs/results/archive/earlier-studies/study_paired.json
    python experiments/study_paired.py --run runs/seed1 --seeds 1 --out R.json   # one curriculum of `train`
"""

from __future__ import annotations

import argparse
import json

from aclarena.analysis.paired import paired_change
from aclarena.reproducibility import made_by
from aclarena.train.naming import replicate_suffix

PAIRS = (("seq-search", "seq-ecom", "search/id"), ("seq-search", "seq-ecom", "math/id"),
         ("seq-math", "seq-search", "math/id"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for seed in range(args.seeds):
        sfx = replicate_suffix(seed)
        for early, late, suite in PAIRS:
            got = paired_change(args.run, early + sfx, late + sfx, [suite])[suite]
            rows.append({"seed": seed, "early": early + sfx, "late": late + sfx, "suite": suite, **got})
            print(json.dumps(rows[-1]))
    cmd = f"python experiments/study_paired.py --run {args.run} --seeds {args.seeds} --out {args.out}"
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(json.dumps({"rows": rows, "made_by": made_by(cmd)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
