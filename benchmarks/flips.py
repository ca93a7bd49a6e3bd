"""Cost of ``flips`` per flipped item, phase by phase, on a constructed case (issue 17).

    PYTHONPATH=tests python benchmarks/flips.py                    # 8 items, 6 budgets (~5-10 min on 2 shared CPU cores)
    PYTHONPATH=tests python benchmarks/flips.py --items 4 --budgets 0.5,5,20

The case is the test suite's (tests/flips_helpers.py): a tiny untied Qwen3 E and an L equal
to it except at one critical and four harmless decisions per item, every item forgotten
(E solves it, L fails it), 20 generated tokens per reply. Phases: the two greedy replays
(E and L, each in lockstep with the other model), the localization (one teacher-forced
scoring of E's trajectories under L), and the swap test in both directions (one lockstep
generation per item, budget and arm, batched). Also the lockstep loop against plain
``generate`` of one model on the same prompts, per generated token. Nothing is asserted:
the script prints what it measured (and the recovery shares, as a check of the case).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORDS = ["the total", "the capital", "cancel my order", "the first tower", "a refund", "the river",
         "the population", "the second item", "the shipping address", "the product price", "a search tool",
         "the year"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--budgets", default="0.5,1,2,5,10,20")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import flips_helpers as fh
    import torch
    from fixtures import make_tokenizer

    from aclarena.analysis.flips import FORGOT, FlipSettings, analyse
    from aclarena.envs.rollout import model_policy

    tok = make_tokenizer()
    tok.padding_side = "left"
    prompts = [f"what about {w}" for w in WORDS][: args.items]
    hidden = 64 * max(2, -(-args.items * 20 // 64) + 1)  # more dimensions than positions: exact construction
    c = fh.construct(tok, prompts=prompts, hidden_size=hidden)
    budgets = tuple(float(b) for b in args.budgets.split(","))
    settings = FlipSettings(budgets=budgets, batch_size=args.batch_size)
    t0 = time.perf_counter()
    res = analyse(c["e"], c["l"], tok, c["tasks"], [FORGOT] * len(c["tasks"]), settings=settings,
                  env_for=lambda t: c["env"])
    wall = time.perf_counter() - t0
    n = len(c["tasks"])
    rows = 2 * n * len(budgets)
    # plain greedy generate of one model on the same prompts, for the lockstep overhead
    policy = model_policy(c["l"], tok, max_new_tokens=fh.PrefixEnv.max_new_tokens)
    t1 = time.perf_counter()
    for s in range(0, n, args.batch_size):
        policy([(t.messages, None) for t in c["tasks"][s:s + args.batch_size]])
    plain = time.perf_counter() - t1
    tokens = n * fh.PrefixEnv.max_new_tokens
    out = {
        "items": n, "budgets": list(budgets), "hidden": hidden, "threads": torch.get_num_threads(),
        "tokens_per_reply": fh.PrefixEnv.max_new_tokens,
        "seconds": {k: round(v, 2) for k, v in res.cost.items() if k.endswith("_s")},
        "seconds_per_item": round(wall / n, 2),
        "swap_rows_per_direction": rows,
        "swap_seconds_per_row": round(res.cost.get("swap_forward_s", 0) / rows, 3),
        "replay_ms_per_token_two_models": round(1000 * res.cost["replay_s"] / (2 * tokens), 2),
        "generate_ms_per_token_one_model": round(1000 * plain / tokens, 2),
        "recovered_kl": res.forward.curves()["kl"]["share"] if res.forward else None,
        "recovered_random": res.forward.curves()["random"]["share"] if res.forward else None,
        "localized_at_critical": sum(it.diverge == p for it, (p, _) in zip(res.items, c["critical"], strict=True)),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
