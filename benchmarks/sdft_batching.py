"""Benchmark: SDFT's mixed SFT step, the whole balanced batch at once against micro-batches by length (issue 42).

    python benchmarks/sdft_batching.py                      # 20 steps per try, 2 rounds (~2 min on 2 cores)
    python benchmarks/sdft_batching.py --steps 20 --rounds 2 --json-out docs/results/sdft_batching.json   # committed

SDFT trains one SFT phase on all four domains at once, each batch of 8 holding two records of each
(:func:`aclarena.consolidate.sdft.balanced_order`). Padded together, two e-commerce conversations
(~580 tokens) make the six short ones (~100-200) as long as they are. ``micro`` reads each batch in
micro-batches of one domain's share, shortest first, with gradient accumulation
(:func:`aclarena.consolidate.sdft.length_grouped`; what ``consolidate sdft`` does by default); ``whole``
reads it at once (``--trl per_device_train_batch_size=8``, what it did before). Both train the same
optimizer steps on the same records from the shipped base, in one process, the ways alternating in
rounds so that a load change touches both alike; the records are the arena's scripted expert
trajectories of each domain (the oracles' rollouts have their format and lengths; the benchmark needs
no trained run). Printed: the median seconds per optimizer step (the first left out), the ratio
micro / whole, and how far apart the two ways' weights end, against how far training moved them.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

DOMAINS = ("math", "search", "ecom", "if")


def train(way: str, steps: int, batch: int, seed: int, out: Path) -> dict[str, Any]:
    """``steps`` SDFT steps of ``way`` from the shipped base into ``out``; seconds per optimizer step."""
    from transformers import TrainerCallback

    from aclarena.consolidate.recipe import DEFAULTS
    from aclarena.consolidate.sdft import mixed_order, trainer_fields
    from aclarena.models.shipped import shipped_base
    from aclarena.train.data import expert_records
    from aclarena.train.phases import run_sft

    sz = DEFAULTS["mini"]["sdft"]
    by_domain = {d: expert_records(d, sz.n * sz.k, seed) for d in DOMAINS}
    given = {} if way == "micro" else {"per_device_train_batch_size": batch}
    trl, micro = trainer_fields(steps, sz.lr, batch, len(DOMAINS), given)
    trl |= {"logging_steps": 1, "save_strategy": "no", "report_to": "none"}
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003
            ends.append(time.perf_counter())

    t0 = time.perf_counter()
    run_sft(shipped_base(), mixed_order(by_domain, batch, steps, trl, micro, seed), out, seed=seed, trl=trl,
            callbacks=[Clock()], work_dir=out.parent / f"{out.name}-work")
    step_s = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    return {"way": way, "micro_batch": micro, "step_s": step_s, "wall_s": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps per try (default 20)")
    ap.add_argument("--rounds", type=int, default=2, help="tries of each way, alternating (default 2)")
    ap.add_argument("--batch", type=int, default=8, help="records per optimizer step (default 8, the mini SDFT's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out", help="write every try's step times and the weights' distance here")
    args = ap.parse_args()

    import torch
    from safetensors.torch import load_file

    from aclarena.models.shipped import shipped_base
    from aclarena.reproducibility import made_by

    tries = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for way in ("whole", "micro"):
                res = train(way, args.steps, args.batch, args.seed, Path(tmp) / f"{way}-{r}")
                res["round"] = r
                tries.append(res)
                print(f"round {r} {way}: median {statistics.median(res['step_s']):.3f} s/step "
                      f"({res['wall_s']:.0f} s in all)", flush=True)
        weights = {w: load_file(Path(tmp) / f"{w}-0" / "model.safetensors") for w in ("whole", "micro")}
        base = load_file(Path(shipped_base()) / "model.safetensors")
        moved = max((weights["whole"][k] - base[k]).abs().max().item() for k in base)
        apart = max((weights["whole"][k] - weights["micro"][k]).abs().max().item() for k in base)
    median = {w: statistics.median([s for t in tries if t["way"] == w for s in t["step_s"]]) for w in ("whole", "micro")}
    ratio = median["micro"] / median["whole"]
    print(f"median s/step: whole {median['whole']:.3f}, micro {median['micro']:.3f}; micro / whole {ratio:.2f}")
    print(f"weights after {args.steps} steps: at most {apart:.2e} apart; training moved them up to {moved:.2e}")
    if args.json_out:
        cmd = "python benchmarks/sdft_batching.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)
        report = {"made_by": made_by(cmd), "steps": args.steps, "rounds": args.rounds, "batch": args.batch,
                  "threads": torch.get_num_threads(), "median_step_s": median, "ratio_micro_whole": ratio,
                  "max_weight_apart": apart, "max_weight_moved": moved, "tries": tries}
        Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
