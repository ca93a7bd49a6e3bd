"""Data-parallel `tokens`: 2 processes under torchrun vs 1 process, measured side by side in one run.

    PYTHONPATH=tests python benchmarks/distributed_scoring.py                # ~3-6 min on 2 CPU cores
    PYTHONPATH=tests python benchmarks/distributed_scoring.py --sequences 32 --checkpoints 2

A run with a Qwen3-shaped model (hidden 256, 4 layers, the fixture tokenizer's 512-token
vocabulary) and ``--checkpoints`` later checkpoints is probed once (not timed); then
``tokens --force`` is timed as one process with 1 thread, one process with 2 threads, and
two processes (torchrun, gloo) with 1 thread each. Wall times include each command's
start-up (Python, torch and transformers imports, process-group set-up), as a user sees
them. The stored scores of every way are compared bit for bit.

On a 2-core machine the two processes share the cores that the 2-thread process uses, so
the speedup over it measures process-level vs thread-level parallelism on the same
hardware, not scaling to more hardware. Nothing is asserted: the script prints what it
measured.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_run(root: Path, n_ckpts: int, n_seqs: int, new_tokens: int) -> None:
    from fixtures import make_tokenizer, perturb
    from tokens_helpers import PROMPTS, add_checkpoint, write_jsonl

    from aclarena.models.tiny import build_model, tiny_config
    from aclarena.store.manifest import Manifest, write_manifest

    tok = make_tokenizer()
    root.mkdir(parents=True)
    write_manifest(Manifest(name="bench"), root)
    ref = build_model(tiny_config(tok, hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=4), seed=0)
    add_checkpoint(root, "ref", ref, tok, parent=None, domain="math")
    parent = "ref"
    for k in range(n_ckpts):
        add_checkpoint(root, f"later-{k}", perturb(ref, 0.01 * (k + 1), seed=k + 1), tok, parent=parent)
        parent = f"later-{k}"
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n_seqs)]
    write_jsonl(root.parent / "prompts.jsonl", prompts)
    res = run(["probe", "--run", str(root), "--ref", "ref", "--prompts", str(root.parent / "prompts.jsonl"),
               "--max-new-tokens", str(new_tokens), "--temperature", "1.0", "--json"], 1, 2)
    if res.returncode:
        raise SystemExit(res.stderr)


def run(argv: list[str], nproc: int, threads: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               TRANSFORMERS_VERBOSITY="error", OMP_NUM_THREADS=str(threads))
    if nproc == 1:
        cmd = [sys.executable, "-m", "aclarena", *argv]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "aclarena", "--", *argv]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=4)
    args = ap.parse_args()
    from distributed_helpers import assert_same_contents, store_contents

    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template" / "run"
        build_run(template, args.checkpoints, args.sequences, args.new_tokens)
        ways = {"1 process, 1 thread": (1, 1), "1 process, 2 threads": (1, 2), "2 processes, 1 thread each": (2, 1)}
        times, stores = {}, {}
        for label, (nproc, threads) in ways.items():
            run_dir = Path(tmp) / label.replace(" ", "_").replace(",", "")
            shutil.copytree(template, run_dir)
            t0 = time.perf_counter()
            res = run(["tokens", "--run", str(run_dir), "--ref", "ref", "--batch-size", str(args.batch_size),
                       "--force", "--json"], nproc, threads)
            times[label] = time.perf_counter() - t0
            if res.returncode:
                raise SystemExit(f"{label}: {res.stderr}")
            stores[label] = store_contents(run_dir, "tokens")
        from aclarena.results.probes import read_probe_set
        from aclarena.store import ResultsStore

        probe = read_probe_set(ResultsStore(template), "ref", with_text=False)
        print(f"tokens --force on {probe.n_sequences} sequences, {probe.n_scored} scored positions, reference + "
              f"{args.checkpoints} checkpoints (Qwen3 hidden 256, 4 layers), batch size {args.batch_size}; "
              f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at the end")
        for label, t in times.items():
            print(f"  {label:28s} {t:7.1f} s")
        base1, base2, dist = (times[k] for k in ways)
        print(f"speedup of 2 processes over 1 process/1 thread:  {base1 / dist:.2f}x")
        print(f"speedup of 2 processes over 1 process/2 threads: {base2 / dist:.2f}x")
        labels = list(stores)
        for other in labels[1:]:
            assert_same_contents(stores[other], stores[labels[0]])
        print("stored scores: identical bit for bit in all three ways")


if __name__ == "__main__":
    main()
