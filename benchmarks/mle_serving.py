"""Benchmark: MLE serving on CPU with peft multi-adapter, against the bare backbone, side by side.

    PYTHONPATH=tests python benchmarks/mle_serving.py                       # the mini arena's model size (hidden 256, 4 layers)
    PYTHONPATH=tests python benchmarks/mle_serving.py --hidden 512 --layers 8 --rank 16

Measures, in one process with the steps interleaved (other processes share the machine; the
best of ``--repeats`` rounds is kept for each):

* parameters each LoRA expert adds (absolute and as a share of the backbone);
* seconds per generated token, greedy, batch 1, fixed length: the bare backbone; the backbone
  with all experts loaded and one active (peft, unmerged); the same expert merged into the
  weights (``merge_and_unload``: what a single-expert deployment would run);
* the cost of a request's routing decision (rule, learned, bandit routers) and of switching
  the active adapter, per request.

Ratios are printed against the bare backbone. Nothing is asserted: docs/consolidation.md
reports the numbers measured.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=int, default=16)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    ap.add_argument("--tokens", type=int, default=48, help="tokens generated per request")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()

    import tempfile

    import torch
    from fixtures import make_tokenizer
    from peft import LoraConfig, get_peft_model

    from aclarena.consolidate.contexts import env_context, training_contexts
    from aclarena.consolidate.routers import build_router
    from aclarena.consolidate.serving import PeftExpertServer
    from aclarena.envs import DOMAINS, sample_prompts
    from aclarena.models.tiny import build_model, tiny_config

    if args.threads:
        torch.set_num_threads(args.threads)
    tok = make_tokenizer(vocab_size=1000)
    cfg = tiny_config(tok, hidden_size=args.hidden, num_layers=args.layers, num_heads=max(4, args.hidden // 64),
                      num_kv_heads=max(2, args.hidden // 128))
    base = build_model(cfg, seed=0).eval()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="mle-bench-"))
    experts = {}
    for i, d in enumerate(DOMAINS):
        torch.manual_seed(i + 1)
        pm = get_peft_model(copy.deepcopy(base), LoraConfig(r=args.rank, lora_alpha=args.alpha, target_modules=targets,
                                                            init_lora_weights=False))
        pm.save_pretrained(tmp / d)
        experts[d] = tmp / d
    train = training_contexts(DOMAINS, n=30)
    routers = {n: build_router(n, DOMAINS, train, rounds=800) for n in ("rule", "learned", "bandit")}
    server = PeftExpertServer(copy.deepcopy(base), tok, experts, routers["rule"])
    merged = copy.deepcopy(server.model)
    merged.set_adapter("math")
    merged = merged.merge_and_unload()
    counts = server.parameters()

    prompt = sample_prompts("math", 1, 0)[0]
    enc = tok.apply_chat_template(prompt["messages"], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    gen = {"max_new_tokens": args.tokens, "min_new_tokens": args.tokens, "do_sample": False,
           "pad_token_id": tok.pad_token_id}

    def per_token(model) -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**enc, **gen)
        n = out.shape[1] - enc["input_ids"].shape[1]
        return (time.perf_counter() - t0) / n

    server.model.set_adapter("math")
    per_token(base), per_token(server.model), per_token(merged)  # warm-up
    best = {"bare backbone": float("inf"), "peft, 4 experts loaded, 1 active": float("inf"),
            "expert merged into weights": float("inf")}
    for _ in range(args.repeats):
        best["bare backbone"] = min(best["bare backbone"], per_token(base))
        best["peft, 4 experts loaded, 1 active"] = min(best["peft, 4 experts loaded, 1 active"], per_token(server.model))
        best["expert merged into weights"] = min(best["expert merged into weights"], per_token(merged))
    ctxs = [env_context(d) for d in DOMAINS] * 25
    route_s = {}
    for name, r in routers.items():
        t0 = time.perf_counter()
        for c in ctxs:
            r.route(c)
        route_s[name] = (time.perf_counter() - t0) / len(ctxs)
    t0 = time.perf_counter()
    for i in range(400):
        server.model.set_adapter(DOMAINS[i % 4])
    switch_s = (time.perf_counter() - t0) / 400

    print(f"load: {os.getloadavg()[0]:.2f} (1-min average), torch threads {torch.get_num_threads()}")
    print(f"backbone: hidden {args.hidden}, {args.layers} layers, {counts['backbone']:,} parameters; "
          f"LoRA r={args.rank}, alpha={args.alpha}, targets {','.join(targets)}")
    for d in DOMAINS:
        print(f"  expert {d}: {counts[d]:,} parameters ({counts[d] / counts['backbone']:.2%} of the backbone)")
    print(f"  all 4 experts: {sum(counts[d] for d in DOMAINS):,} parameters; 4 full fine-tuned copies would be "
          f"{4 * counts['backbone']:,}")
    ref = best["bare backbone"]
    print(f"\nseconds per generated token (greedy, batch 1, {args.tokens} tokens, best of {args.repeats}):")
    for k, v in best.items():
        print(f"  {k:36s} {v * 1e3:8.3f} ms/token   x{v / ref:.2f} vs bare backbone")
    print("\nper request:")
    for name, s in route_s.items():
        print(f"  route ({name:7s})                     {s * 1e3:8.3f} ms   = {s / ref:.2f} tokens of bare decoding")
    print(f"  set_adapter (switch expert)          {switch_s * 1e3:8.3f} ms   = {switch_s / ref:.2f} tokens")


if __name__ == "__main__":
    main()
