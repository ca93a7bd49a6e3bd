"""The demo's repair study: repair the e-commerce stage's loss with every method, evaluate, score, write JSON.

    python experiments/repair_demo.py --run runs/demo-i35 --out docs/results/repair_demo.json

On a copy of a demo run (its checkpoints and aclarena.toml are enough): the demo's two merges
(``consolidate --method merge-uniform`` / ``merge-ties``, as the demo makes them), every repair of seq-ecom from seq-search (svd-restore at
r = 10, 25, 50 by default (``--percents``); dg-hard; layer-rollback of one of the four layers, chosen first, by largest
displacement and by lowest cosine with the e-commerce oracle, skipped while the run has no trained
e-commerce oracle), ``eval`` of the repairs on math/id,
search/id, ecom/id and general with the demo's settings (n = 100, greedy, seed 0; cells already in
the store are read back, not recomputed), then ``compare``
with every consolidated model (repairs and the demo's merges) scored against the stage
seq-search -> seq-ecom. The JSON holds the commands, each model's score per suite with its 95%
bootstrap interval over items, the four-part scores and what each repair changed in the weights.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

OLD, NEW = "seq-search", "seq-ecom"
SUITES = "math/id,search/id,ecom/id,general"
REPAIRS = (
    ("ecom-svd", ["--method", "svd-restore", "--rank-percent", "{percents}"]),
    ("ecom-dg", ["--method", "dg-hard"]),
    ("ecom-roll-first", ["--method", "layer-rollback", "--select", "first", "--count", "1"]),
    ("ecom-roll-disp", ["--method", "layer-rollback", "--select", "displacement", "--count", "1"]),
    ("ecom-roll-cos", ["--method", "layer-rollback", "--select", "cosine", "--count", "1"]),
)


def verb(argv: list[str]) -> tuple[dict[str, Any], str]:
    """Run ``aclarena-diag ARGV --json`` in-process; its JSON and the command line."""
    from aclarena.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json"])
    if code != 0:
        raise SystemExit(f"aclarena-diag {' '.join(argv)} exited {code}")
    return json.loads(out.getvalue()), "aclarena-diag " + " ".join(argv)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--percents", default="10,25,50", help="svd-restore's rank percents (default 10,25,50)")
    args = ap.parse_args()
    run = args.run
    commands: list[str] = []
    t0 = time.perf_counter()
    made: list[dict[str, Any]] = []
    from aclarena.store import load_manifest

    m = load_manifest(run)
    have = {s.name for s in m if (Path(run) / s.path).exists()}
    new_domain = m.resolve(NEW).domain
    has_oracle = any(s.kind == "oracle" and s.domain == new_domain and s.name in have for s in m)
    notes = []
    for method in ("merge-uniform", "merge-ties"):  # the demo's merges, made the demo's way (read back if there)
        _, cmd = verb(["consolidate", "--run", run, "--method", method])
        commands.append(cmd)
    for name, extra in REPAIRS:
        if "cosine" in extra and not has_oracle:
            notes.append(f"{name} skipped: no trained {new_domain} oracle in the run (cosine selection needs it)")
            continue
        extra = [x.format(percents=args.percents) for x in extra]
        res, cmd = verb(["repair", "--run", run, "--from", OLD, "--to", NEW, "--name", name, *extra])
        commands.append(cmd)
        made.extend(res["outputs"])
    repairs = [o["checkpoint"] for o in made]
    m = load_manifest(run)
    merges = [s.name for s in m if s.kind == "consolidated" and (s.method or "").startswith("merge-")]
    oracles = [s.name for s in m if s.kind == "oracle" and (Path(run) / s.path).exists()]
    t_repair = time.perf_counter() - t0
    _, cmd = verb(["eval", "--run", run, "--checkpoints", ",".join([OLD, NEW, *repairs, *merges, *oracles]),
                   "--suites", SUITES,
                    "-n", "100", "--samples", "0", "--seeds", "0"])
    commands.append(cmd)
    cmp, cmd = verb(["compare", "--run", run, "--repair-stage", f"{OLD},{NEW}"])
    commands.append(cmd)
    from aclarena.results.capability import cell_ci95, load_matrix
    from aclarena.store import ResultsStore

    scores: dict[str, dict[str, Any]] = {}
    with ResultsStore(run).reader() as r:
        m = load_manifest(run)
        matrix = load_matrix(r, m)
        for ck in [OLD, NEW, *repairs, *merges, *oracles]:
            row = {}
            for suite in SUITES.split(","):
                c = matrix.get(ck, suite)
                if c is None or not c.ok:
                    continue
                row[suite] = {"mean": c.mean, "n_items": c.n_items, "ci95": cell_ci95(r, c)}
            scores[ck] = row
    out = {
        "what": "training-free repair of the demo's e-commerce stage (seq-search -> seq-ecom), every method, "
                "against the demo's merges and the oracles",
        "run": run, "from": OLD, "to": NEW, "suites": SUITES.split(","), "eval": {"n": 100, "samples": 0, "seeds": [0]},
        "commands": commands, "repairs": made, "merges": merges, "oracles": oracles,
        "scores": scores, "four_part": cmp["repair_scores"], "notes": notes,
        "seconds": {"repairs": round(t_repair, 1), "total": round(time.perf_counter() - t0, 1)},
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: {len(repairs)} repairs, {len(merges)} merges, {len(out['four_part'])} four-part scores")


if __name__ == "__main__":
    main()
