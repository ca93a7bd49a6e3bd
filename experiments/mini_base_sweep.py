"""Experiment: can a mini base learn the arena? Pretrain, then one SFT oracle per domain, then score.

    python experiments/mini_base_sweep.py --size 3m --out runs/sweep           # the shipped size
    python experiments/mini_base_sweep.py --size 8m --size 20m --out runs/sweep
    python experiments/mini_base_sweep.py --base runs/mini-base/checkpoints/base --size 3m --out runs/sweep
    python experiments/mini_base_sweep.py --size 3m --data-scale 4 --out runs/sweep-data   # 4x the data

For each size: the base is pretrained with the project's own code and data (``aclarena-diag
train`` on examples/mini-base.toml with that size's architecture; ``--base`` reuses a finished
one), then scored on copying (fresh chats of the pretraining's copy kinds: the induction skill every tool domain needs) and
one-shot (:mod:`aclarena.envs.demonstration`), then each domain's oracle is
an expert SFT from the base (``--steps`` steps, the recipe below, no RL) scored greedily on
``-n`` in-domain evaluation tasks. One JSON line per size goes to ``--results`` with the
parameters, pretraining tokens and steps, wall times, scores and 95% bootstrap intervals.
Other processes slow it down: the load average is recorded with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZES = {  # name -> [base] architecture (vocabulary 1,000, 1,024 positions)
    "3m": {"hidden_size": 256, "num_layers": 4, "num_heads": 8, "num_kv_heads": 4, "intermediate_size": 768},
    "8m": {"hidden_size": 320, "num_layers": 6, "num_heads": 8, "num_kv_heads": 4, "intermediate_size": 960},
    "20m": {"hidden_size": 448, "num_layers": 8, "num_heads": 8, "num_kv_heads": 4, "intermediate_size": 1344},
}
# the oracle SFT of each domain: (steps, learning rate, batch size) on expert conversations of the train
# split; the mini recipe's stage SFT (examples/mini.toml) with math at 150 steps instead of 300 and the
# later stages at the first stage's kind of learning rate (an oracle starts from the base, not after math)
ORACLE = {"math": (150, 1e-3, 8), "search": (150, 5e-4, 8), "ecom": (40, 5e-4, 4), "if": (40, 5e-4, 8)}


def bootstrap(xs: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    import numpy as np

    a = np.asarray(xs, dtype=float)
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, len(a), size=(reps, len(a)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def size_config(size: str, data_scale: int = 1) -> str:
    """examples/mini-base.toml with ``size``'s architecture and ``data_scale`` times every data count
    (the passages' repeats and each kind's examples: the same mix, that many times the tokens)."""
    text = (REPO / "examples" / "mini-base.toml").read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        key = line.split("=")[0].strip()
        if key in SIZES[size]:
            line = f"{key} = {SIZES[size][key]}"
        elif key == "passage_repeats" or key.endswith("_examples"):
            value, _, comment = line.split("=", 1)[1].partition("#")
            line = f"{key} = {int(value) * data_scale}" + (f"  #{comment}" if comment else "")
        lines.append(line)
    name = f"mini-base-{size}" + (f"-x{data_scale}" if data_scale != 1 else "")
    return ("\n".join(lines) + "\n").replace('name = "mini-base"', f'name = "{name}"')


def pretrain(size: str, out: Path, data_scale: int = 1) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    cfg = out / "mini-base.toml"
    cfg.write_text(size_config(size, data_scale), encoding="utf-8")
    cmd = [sys.executable, "-m", "aclarena", "train", "--config", str(cfg), "--out", str(out / "run")]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return out / "run" / "checkpoints" / "base"


def score(model, tok, domain: str, n: int) -> list[float]:
    from aclarena.envs import sample_tasks
    from aclarena.envs.rollout import generate_trajectories

    tok.padding_side = "left"
    model.eval()
    suite = domain if domain == "general" else f"{domain}/id"  # general has one suite
    trajs = generate_trajectories(model, tok, sample_tasks(suite, n, seed=0, split="eval"), batch_size=25)
    return [float(t.reward) for t in trajs if t is not None]


def copy_score(model, tok, n: int, seed: int = 123) -> tuple[list[float], list[float]]:
    """Copying, on fresh chats of the pretraining's own copy kinds (names, ids, numbers copied from the
    message into the reply): the induction skill every tool domain needs. Per chat: the greedy reply's exact
    match, and the teacher-forced top-1 accuracy on the reply's tokens (it rises before exact matches do)."""
    import random

    import torch

    from aclarena.train.pretraining import copy_chat

    rng, exact, token_acc = random.Random(seed), [], []
    model.eval()
    for _ in range(n):
        msgs = copy_chat(rng)
        enc = tok.apply_chat_template(msgs[:-1], add_generation_prompt=True, return_tensors="pt", return_dict=True)
        full = tok.apply_chat_template(msgs, return_tensors="pt", return_dict=True)["input_ids"]
        start = enc["input_ids"].shape[1]
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=40, do_sample=False)
            pred = model(input_ids=full).logits[0, start - 1:-1].argmax(-1)
        got = tok.decode(ids[0, start:], skip_special_tokens=True).strip()
        exact.append(float(got == msgs[-1]["content"]))
        token_acc.append(float((pred == full[0, start:]).float().mean()))
    return exact, token_acc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", action="append", choices=sorted(SIZES), required=True)
    p.add_argument("--base", help="a finished base folder to use instead of pretraining (one --size)")
    p.add_argument("--out", default="runs/sweep")
    p.add_argument("--steps", type=int, default=None, help="oracle SFT steps of every domain (default: ORACLE's)")
    p.add_argument("--lr", type=float, default=None, help="oracle SFT learning rate of every domain (default: ORACLE's)")
    p.add_argument("--batch", type=int, default=None, help="oracle SFT batch size of every domain (default: ORACLE's)")
    p.add_argument("--data-scale", type=int, default=1, help="pretrain on this many times the data of "
                   "examples/mini-base.toml (every count scaled: the same mix, more tokens and steps)")
    p.add_argument("-n", type=int, default=100, help="evaluation tasks per domain")
    p.add_argument("--domains", default="math,search,ecom,if", help="oracle domains ('' for none: the copy test only)")
    p.add_argument("--results", default="docs/results/mini_base_sweep.jsonl")
    p.add_argument("--no-one-shot", action="store_true", help="skip the base's one-shot scores (run them once, in "
                                                                 "one of several processes that share a base)")
    args = p.parse_args()
    from aclarena.envs.demonstration import one_shot_scores
    from aclarena.train.data import expert_records
    from aclarena.train.phases import load_start, run_sft

    if args.data_scale < 1:
        p.error("--data-scale must be a whole number >= 1")
    for size in args.size:
        out = Path(args.out) / (size if args.data_scale == 1 else f"{size}-x{args.data_scale}")
        row: dict = {"size": size, "architecture": SIZES[size], "load_before": os.getloadavg()[0]}
        if args.data_scale != 1:
            row["data_scale"] = args.data_scale
        t0 = time.monotonic()
        base = Path(args.base) if args.base else pretrain(size, out, args.data_scale)
        row["pretrain_wall_s"] = round(time.monotonic() - t0, 1) if not args.base else None
        if (base / ".aclarena-phase.json").is_file():
            marker = json.loads((base / ".aclarena-phase.json").read_text())
        elif (base / "fingerprint.json").is_file():  # the base shipped in the package (aclarena/models/mini_base)
            marker = json.loads((base / "fingerprint.json").read_text())
        else:  # a trainer checkpoint of a pretraining still running (an early look)
            state = json.loads((base / "trainer_state.json").read_text())
            marker = {"meta": {}, "steps": state["global_step"], "time_s": None}
        row["base"] = str(base)
        row["parameters"] = marker["meta"].get("parameters")
        row["pretrain_steps"] = marker["steps"]
        row["pretrain_tokens"] = marker["steps"] * 4 * 512  # packed rows of 512 tokens, 4 a step
        row["pretrain_time_s"] = marker["time_s"]
        model, tok = load_start(str(base))
        copied, token_acc = copy_score(model, tok, args.n)
        row["copy"] = {"score": sum(copied) / len(copied), "n": len(copied), "ci95": list(bootstrap(copied)),
                       "token_accuracy": sum(token_acc) / len(token_acc), "token_accuracy_ci95": list(bootstrap(token_acc))}
        print(json.dumps({"size": size, "copy": row["copy"]}), flush=True)
        if not args.no_one_shot:
            t1 = time.monotonic()
            row["one_shot"] = one_shot_scores(model, tok, n=args.n // 4)
            row["one_shot_n"] = args.n // 4
            row["one_shot_wall_s"] = round(time.monotonic() - t1, 1)
            print(json.dumps(row), flush=True)
        row["oracles"] = {}
        for domain in [d for d in args.domains.split(",") if d]:
            steps, lr, bs = ORACLE[domain]
            steps = args.steps or steps
            lr = args.lr or lr
            bs = args.batch or bs
            t1 = time.monotonic()
            res = run_sft(str(base), expert_records(domain, steps * bs, seed=1), out / f"oracle-{domain}",
                          trl={"max_steps": steps, "learning_rate": lr, "per_device_train_batch_size": bs,
                               "logging_steps": 10, "save_steps": 50}, seed=1)
            train_s = time.monotonic() - t1
            m, t = load_start(str(res.folder))
            t2 = time.monotonic()
            rewards = score(m, t, domain, args.n)
            lo, hi = bootstrap(rewards)
            row["oracles"][domain] = {"score": sum(rewards) / len(rewards), "n": len(rewards), "ci95": [lo, hi],
                                      "sft_steps": steps, "lr": lr, "batch": bs, "train_s": round(train_s, 1),
                                      "eval_s": round(time.monotonic() - t2, 1)}
            print(json.dumps({"size": size, domain: row["oracles"][domain]}), flush=True)
        row["load_after"] = os.getloadavg()[0]
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
