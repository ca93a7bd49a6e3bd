"""Experiment: is `general` lost as knowledge or as format? The suite two ways, per checkpoint.

The general suite (:mod:`aclarena.envs.general`, four options, chance 0.25) scores a greedy reply
that must say ``Answer: <letter>`` within 8 tokens. After a math stage the reply is arithmetic, so the
score drops to 0 whatever the model still knows. This script also forces the format: it appends
``Answer:`` to the prompt and takes the letter the model ranks first (the log-likelihood scoring of
multiple-choice suites such as MMLU in lm-evaluation-harness), on the same tasks, so a drop in the
first score with none in the second is format takeover, not forgotten facts. Both come with 95%
bootstrap intervals; a score whose interval holds 0.25 is not knowledge.

    python experiments/general_letter.py aclarena/models/mini_base runs/x/math/math-lr0.001 \
        --results docs/results/archive/mini-base/general_letter.jsonl
"""

from __future__ import annotations

import argparse
import json

# a sibling script: `python experiments/X.py` puts this folder first on the path
from mini_base_sweep import bootstrap, score

CHANCE = 0.25


def ranked_letters(model, tok, tasks) -> list[float]:
    """1.0 where the letter ranked first after a forced ``Answer:`` is the correct one."""
    import torch

    from aclarena.envs.general import LETTERS

    # a letter may follow "Answer:" with or without its space: each letter's better of the two
    spaced = [tok.encode(f" {x}", add_special_tokens=False)[-1] for x in LETTERS]
    bare = [tok.encode(x, add_special_tokens=False)[-1] for x in LETTERS]
    right = []
    for t in tasks:
        text = tok.apply_chat_template(t.messages, tokenize=False, add_generation_prompt=True) + "Answer:"
        x = tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            lp = model(**x).logits[0, -1].log_softmax(-1)
        best = int(torch.maximum(lp[spaced], lp[bare]).argmax())
        right.append(float(LETTERS[best] == t.data["answer"]))
    return right


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoints", nargs="+", help="model folders (a base, a stage's checkpoint)")
    p.add_argument("-n", type=int, default=100, help="general/id evaluation tasks (seed 0, eval split)")
    p.add_argument("--results", help="append one JSON line per checkpoint here")
    p.add_argument("--command", default="", help="recorded with each line")
    args = p.parse_args()
    from aclarena.envs import sample_tasks
    from aclarena.train.phases import load_start

    tasks = sample_tasks("general", args.n, seed=0, split="eval")
    for folder in args.checkpoints:
        model, tok = load_start(folder)
        model.eval()
        greedy = score(model, tok, "general", args.n)
        ranked = ranked_letters(model, tok, tasks)
        row = {"checkpoint": folder, "n": args.n, "chance": CHANCE,
               "greedy": {"score": sum(greedy) / len(greedy), "ci95": list(bootstrap(greedy))},
               "letter_ranked": {"score": sum(ranked) / len(ranked), "ci95": list(bootstrap(ranked))}}
        if args.command:
            row["command"] = args.command
        print(json.dumps(row), flush=True)
        if args.results:
            with open(args.results, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
