"""Experiment: after how many steps does a small Qwen3 learn to copy (an induction head), by head size?

    python experiments/copy_emergence.py --hidden 64 --layers 2 --heads 8 --steps 2500    # head_dim 8
    python experiments/copy_emergence.py --hidden 64 --layers 2 --heads 2 --steps 2500    # head_dim 32
    python experiments/copy_emergence.py --hidden 256 --layers 4 --heads 8 --steps 1500   # the shipped size

Every tool domain of the mini arena needs copying (a name from the question into a tool argument,
an id out of a tool result), and a transformer trained from scratch copies only once it has formed
an induction head. This measures when that happens on the purest copy data there is: a random span
of 4-12 tokens of the mini base's vocabulary, a separator, the span again (after 0-8 random tokens of
noise), with the loss on the repeated span only. Every 100 steps it reports the top-1 accuracy on
the repeated span of 64 fresh sequences (chance: about 1/700; once copying works: about 0.9, the
span's first token being unpredictable). Qwen3 normalises queries and keys (QK-norm), which bounds
an attention logit by about ``head_dim`` / sqrt(``head_dim``): heads of 8 dimensions cannot attend
sharply, and that is the knob this compares. One thread, AdamW at a constant learning rate, seed 0.
One JSON line per evaluation goes to ``--results``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def batch(rng: random.Random, n: int, vocab: list[int], sep: int, length: int = 40):
    import torch

    xs, masks = [], []
    for _ in range(n):
        span = [rng.choice(vocab) for _ in range(rng.randint(4, 12))]
        noise = [rng.choice(vocab) for _ in range(rng.randint(0, 8))]
        seq = (noise + span + [sep] + span + [0] * length)[:length]
        mask = ([0] * (len(noise) + len(span) + 1) + [1] * len(span) + [0] * length)[:length]
        xs.append(seq)
        masks.append(mask)
    return torch.tensor(xs), torch.tensor(masks)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=8, help="attention heads (head_dim = hidden / heads; kv heads = half)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=2500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default="docs/results/archive/mini-base/copy_emergence.jsonl")
    args = p.parse_args()

    import torch
    from transformers import AutoTokenizer

    from aclarena.models.shipped import SHIPPED_DIR
    from aclarena.models.tiny import build_model, tiny_config

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(SHIPPED_DIR)
    config = tiny_config(tok, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                         num_kv_heads=max(1, args.heads // 2), intermediate_size=3 * args.hidden)
    model = build_model(config, seed=args.seed)
    model.train()
    params = sum(q.numel() for q in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng, held_out = random.Random(args.seed), random.Random(args.seed + 1000)
    vocab, sep = list(range(300, len(tok))), 10
    label = {"hidden": args.hidden, "layers": args.layers, "heads": args.heads, "head_dim": args.hidden // args.heads,
             "parameters": params, "lr": args.lr, "batch": args.batch, "seed": args.seed}
    t0 = time.monotonic()
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    for step in range(1, args.steps + 1):
        x, mask = batch(rng, args.batch, vocab, sep)
        logits = model(input_ids=x).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1),
                                                 reduction="none")
        w = mask[:, 1:].reshape(-1).float()
        ((loss * w).sum() / w.sum()).backward()
        opt.step()
        opt.zero_grad()
        if step % 100 == 0:
            with torch.no_grad():
                x, mask = batch(held_out, 64, vocab, sep)
                pred = model(input_ids=x).logits[:, :-1].argmax(-1)
                m = mask[:, 1:].float()
                acc = float(((pred == x[:, 1:]).float() * m).sum() / m.sum())
            row = {**label, "step": step, "copy_accuracy": round(acc, 4), "wall_s": round(time.monotonic() - t0, 1)}
            print(json.dumps(row), flush=True)
            with open(args.results, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
