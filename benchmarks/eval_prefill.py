"""Benchmark: how much of a suite's greedy evaluation is prefill, the prompt re-read at every turn (issue 42).

    python benchmarks/eval_prefill.py                                   # the shipped base on ecom/id, n 32
    python benchmarks/eval_prefill.py --checkpoint runs/study/checkpoints/seq-ecom --suite ecom/id -n 100 \\
        --json-out docs/results/eval_prefill.json

Each turn of a multi-turn episode is one batched ``generate`` call on the whole conversation so far
(:func:`aclarena.envs.rollout.model_policy`); without a cache kept across turns (``reuse_cache=False``,
how eval played before :mod:`aclarena.models.prefix_cache`) every turn reads the earlier turns again. This
measured the size of that re-reading before the kept cache was built; benchmarks/eval_cache.py times the two
side by side. The suite is played as ``eval`` plays it
(:func:`aclarena.envs.rollout.generate_trajectories`, greedy, batches of ``--batch``); around every
``generate`` call the same batch is also run once through the model alone (one forward over the prompt, the
logits of the last position only: the prefill that call did), timed apart. Printed: the generate calls, their
seconds, the prefill's seconds and share, the prompt tokens read (rows x padded width) and how many of them an
episode had read at its previous turn already (what a cache kept across turns would not read again).
Measuring doubles the prefill work; the shares are of the generate time alone. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="an HF folder (default: the shipped mini base)")
    ap.add_argument("--suite", default="ecom/id", help="the suite to play (default ecom/id)")
    ap.add_argument("-n", type=int, default=32, help="tasks (default 32)")
    ap.add_argument("--batch", type=int, default=32, help="episodes per generation batch (default 32, eval's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out", help="write the totals and every call's numbers here")
    args = ap.parse_args()

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
    calls: list[dict[str, Any]] = []
    earlier: list[list[int]] = []  # every prompt read so far

    def timed(*a: Any, **kw: Any) -> Any:
        ids, mask = kw["input_ids"], kw["attention_mask"]
        rows = [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)]
        # the longest earlier prompt this one starts with, whole: the episode's previous turn (another episode
        # shares the system prompt and tools, never a whole prompt; a template that rewrites earlier turns counts 0)
        reread = sum(max((len(e) for e in earlier if len(e) <= len(r) and r[:len(e)] == e), default=0)
                     for r in rows)
        earlier.extend(rows)
        with torch.no_grad():
            t0 = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
            prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = generate(*a, **kw)
        gen = time.perf_counter() - t0
        calls.append({"rows": len(rows), "width": int(ids.shape[1]), "tokens": int(mask.sum()), "reread": reread,
                      "new_tokens": int(out.sequences.shape[1] - ids.shape[1]), "generate_s": gen, "prefill_s": prefill})
        return out

    model.generate = timed
    tasks = sample_tasks(args.suite, args.n, seed=args.seed, split="eval")
    t0 = time.perf_counter()
    generate_trajectories(model, tok, tasks, do_sample=False, seed=args.seed, batch_size=args.batch, reuse_cache=False)
    wall = time.perf_counter() - t0
    gen_s = sum(c["generate_s"] for c in calls)
    pre_s = sum(c["prefill_s"] for c in calls)
    tokens = sum(c["tokens"] for c in calls)
    reread = sum(c["reread"] for c in calls)
    padded = sum(c["rows"] * c["width"] for c in calls)
    print(f"{args.suite}, n {args.n}: {len(calls)} generate calls, {gen_s:.1f} s (wall {wall:.1f} s with the "
          f"measuring); prefill {pre_s:.1f} s = {pre_s / gen_s:.2f} of generate")
    print(f"prompt tokens read {tokens:,} ({padded:,} with padding); read at the episode's previous turn already "
          f"{reread:,} ({reread / tokens:.2f})")
    if args.json_out:
        cmd = "python benchmarks/eval_prefill.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" if len(k) > 1 else f"-{k} {v}" for k, v in vars(args).items()
            if v is not None)
        report = {"made_by": made_by(cmd), "checkpoint": args.checkpoint or "shipped mini base", "suite": args.suite,
                  "n": args.n, "batch": args.batch, "threads": torch.get_num_threads(), "generate_calls": len(calls),
                  "generate_s": gen_s, "prefill_s": pre_s, "prefill_share": pre_s / gen_s,
                  "prompt_tokens": tokens, "prompt_tokens_padded": padded, "reread_tokens": reread,
                  "reread_share": reread / tokens, "calls": calls}
        Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
