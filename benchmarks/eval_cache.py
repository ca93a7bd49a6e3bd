"""Benchmark: greedy evaluation with the KV cache kept across an episode's turns, against re-reading every turn (issue 42).

    python benchmarks/eval_cache.py                                     # the shipped base on ecom/id, n 32
    python benchmarks/eval_cache.py --checkpoint runs/cache-probe/checkpoints/seq-ecom --suite ecom/id -n 100 \\
        --rounds 2 --json-out docs/results/eval_cache.json

A suite is played as ``eval`` plays it (:func:`aclarena.envs.rollout.generate_trajectories`, greedy, batches
of ``--batch``) two ways, in one process, alternating in rounds so that a load change touches both alike:
``fresh`` prefills every turn's whole conversation (``reuse_cache=False``: how eval played before),
``kept`` starts each turn from the previous call's cache (:mod:`aclarena.models.prefix_cache`, the default).
Printed: each way's median seconds, the ratio kept / fresh, the prompt tokens each way prefilled, and how
many trajectories the two ways played alike (messages, reward, end reason): the cache must change no
greedy answer. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

WAYS = ("fresh", "kept")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="an HF folder (default: the shipped mini base)")
    ap.add_argument("--suite", action="append", help="a suite to play (repeatable; default ecom/id)")
    ap.add_argument("-n", type=int, default=32, help="tasks per suite (default 32)")
    ap.add_argument("--batch", type=int, default=32, help="episodes per generation batch (default 32, eval's)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, each playing both ways (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out", help="write the times, tokens and agreement here")
    args = ap.parse_args()
    suites = args.suite or ["ecom/id"]

    import torch

    from aclarena.envs import sample_tasks
    from aclarena.envs.rollout import generate_trajectories
    from aclarena.models.shipped import shipped_base
    from aclarena.reproducibility import made_by
    from aclarena.train.phases import load_start

    loaded, tok = load_start(args.checkpoint or shipped_base())
    model: Any = loaded  # its generate is wrapped below
    model.eval()
    generate = model.generate
    prefilled = [0]

    def counting(*a: Any, **kw: Any) -> Any:
        cache = kw.get("cache")
        kept = cache.get_seq_length() if cache is not None else 0
        prefilled[0] += int(kw["attention_mask"][:, kept:].sum())  # what this call reads besides the kept cache
        return generate(*a, **kw)

    model.generate = counting
    report: dict[str, Any] = {"checkpoint": args.checkpoint or "shipped mini base", "n": args.n, "batch": args.batch,
                              "rounds": args.rounds, "threads": torch.get_num_threads(), "suites": {}}
    for suite in suites:
        tasks = sample_tasks(suite, args.n, seed=args.seed, split="eval")
        secs: dict[str, list[float]] = {w: [] for w in WAYS}
        tokens: dict[str, int] = {}
        played: dict[str, list[Any]] = {}
        for r in range(args.rounds):
            for way in WAYS if r % 2 == 0 else WAYS[::-1]:
                prefilled[0] = 0
                t0 = time.perf_counter()
                trajs = generate_trajectories(model, tok, tasks, do_sample=False, seed=args.seed, batch_size=args.batch,
                                              reuse_cache=way == "kept")
                secs[way].append(time.perf_counter() - t0)
                tokens[way] = prefilled[0]
                played.setdefault(way, [(t.messages, t.reward, t.end_reason) for t in trajs])
        alike = sum(a == b for a, b in zip(played["fresh"], played["kept"], strict=True))
        med = {w: statistics.median(secs[w]) for w in WAYS}
        ratio = med["kept"] / med["fresh"]
        turns = sum(len([m for m in msgs if m["role"] == "assistant"]) for msgs, _, _ in played["fresh"])
        print(f"{suite}, n {args.n} ({turns} assistant turns): fresh {med['fresh']:.1f} s, kept {med['kept']:.1f} s "
              f"-> {ratio:.2f}; prompt tokens prefilled {tokens['fresh']:,} vs {tokens['kept']:,}; "
              f"trajectories alike {alike}/{len(tasks)}")
        report["suites"][suite] = {"seconds": secs, "median_s": med, "ratio": ratio, "prefilled_tokens": tokens,
                                   "assistant_turns": turns, "alike": alike, "tasks": len(tasks),
                                   "mean_reward": {w: sum(r for _, r, _ in played[w]) / len(tasks) for w in WAYS}}
    if args.json_out:
        report = {"made_by": made_by("python benchmarks/eval_cache.py " + " ".join(sys.argv[1:]))} | report
        Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
