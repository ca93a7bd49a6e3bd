"""Experiment: how hard does one later stage's SFT hit an earlier skill, by learning rate?

Starts from a finished checkpoint (e.g. a curriculum's seq-search), runs one SFT phase of another
domain's expert conversations (the stage's own code, ``aclarena.train.phases.run_sft``) and scores
the earlier domains and the trained one on their in-domain eval suites (greedy, n tasks), with 95%
bootstrap intervals, and per domain the tasks lost and gained and the one-sided exact McNemar p-value
of a drop (``aclarena.diagnostics.early_warning.mcnemar_drop_pvalue``, the monitor's lead-time test).
Issue #13 asks for a stage that lowers an earlier skill partially, not to 0.
``--score`` names domains (their ``id`` suite) or ``general``; ``--start`` may be the shipped base
(``aclarena/models/mini_base``), so the first stage is measured the same way. Runs that differ only
in ``--steps`` need their own ``--out``. ``--lora-r R`` trains a LoRA adapter (rank R, alpha 2R, every
linear layer) on the frozen start instead of every weight, and scores it merged (the merged model is
saved beside the adapter, in ``merged/``, so a later stage can start from it): LoRA learns less and
forgets less (Biderman et al., arXiv 2405.09673); at 3.4M parameters it did not keep math over the
search stage (docs/experiments/mini-base.md, "third pass").

    python experiments/stage_lr.py --start runs/retune/checkpoints/seq-search --domain ecom \
        --steps 40 --batch 4 --lr 5e-5 --score search,math,ecom --out runs/stage-lr --results R.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

# a sibling script: `python experiments/X.py` puts this folder first on the path
from mini_base_sweep import bootstrap, score


def paired(scores: dict) -> dict:
    """``lost``, ``gained`` and the one-sided McNemar ``p_drop`` of each domain's before/after (same tasks)."""
    from aclarena.diagnostics.early_warning import mcnemar_drop_pvalue

    out = {}
    for d, s in scores.items():
        before, after = set(s["before"]["solved"]), set(s["after"]["solved"])
        n = s["before"]["n"]
        out[d] = {"lost": len(before - after), "gained": len(after - before),
                  "p_drop": mcnemar_drop_pvalue([i in before for i in range(n)], [i in after for i in range(n)])}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--start", required=True, help="checkpoint folder the stage starts from")
    p.add_argument("--domain", required=True, help="the stage's domain (its expert conversations)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--score", default="search,math", help="domains scored after the stage")
    p.add_argument("-n", type=int, default=100)
    p.add_argument("--seed", type=int, default=30)
    p.add_argument("--lora-r", type=int, default=0, help="train a LoRA adapter of this rank instead (0: full)")
    p.add_argument("--save-steps", type=int, default=0,
                   help="write a trainer checkpoint every this many steps while it runs (progress on disk; 0: only at the end)")
    p.add_argument("--out", required=True)
    p.add_argument("--results", required=True)
    args = p.parse_args()
    from aclarena.train.data import expert_records
    from aclarena.train.phases import load_start, run_sft

    peft_config = None
    if args.lora_r:
        from peft import LoraConfig

        peft_config = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules="all-linear",
                                 lora_dropout=0.0, task_type="CAUSAL_LM")
    t0 = time.monotonic()
    res = run_sft(args.start, expert_records(args.domain, args.steps * args.batch, seed=args.seed),
                  Path(args.out) / (f"{args.domain}-lr{args.lr:g}" + (f"-lora{args.lora_r}" if args.lora_r else "")),
                  trl={"max_steps": args.steps, "learning_rate": args.lr, "per_device_train_batch_size": args.batch,
                       "logging_steps": 10, "save_steps": args.save_steps or args.steps}, seed=args.seed, peft_config=peft_config)
    train_s = time.monotonic() - t0
    after = res.folder
    if args.lora_r:
        from peft import PeftModel

        m, t = load_start(args.start)
        after = Path(res.folder) / "merged"
        PeftModel.from_pretrained(m, res.folder).merge_and_unload().save_pretrained(after)
        t.save_pretrained(after)
    row = {"start": args.start, "domain": args.domain, "steps": args.steps, "batch": args.batch, "lr": args.lr,
           "seed": args.seed, "lora_r": args.lora_r, "train_s": round(train_s, 1), "scores": {}}
    for label, folder in (("before", args.start), ("after", str(after))):
        m, t = load_start(folder)
        for d in args.score.split(","):
            r = score(m, t, d, args.n)
            lo, hi = bootstrap(r)
            row["scores"].setdefault(d, {})[label] = {"score": sum(r) / len(r), "n": len(r), "ci95": [lo, hi],
                                                      "solved": [i for i, x in enumerate(r) if x > 0]}
    row["paired"] = paired(row["scores"])
    with open(args.results, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({d: {k: v["score"] for k, v in s.items()} for d, s in row["scores"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
