"""Benchmark: the streaming checkpoint merge against loading every checkpoint whole, side by side.

    PYTHONPATH=tests python benchmarks/merging.py                      # K = 3 models + base of ~330 MB (fp32, 83M parameters)
    PYTHONPATH=tests python benchmarks/merging.py --hidden 512 --layers 6 --k 4
    PYTHONPATH=tests python benchmarks/merging.py --mergekit /path/to/venv/bin/mergekit-yaml   # also time mergekit (own venv)

Each step runs in a fresh subprocess so that its peak RSS (``ru_maxrss``) is its own; steps
alternate and the best time of ``--repeats`` rounds is kept. Steps:

* ``stream``: :func:`aclarena.consolidate.checkpoint_merge.merge_checkpoints` (TensorReader in,
  ShardedWriter out);
* ``naive``: ``safetensors.torch.load_file`` of every checkpoint, the same per-tensor maths,
  ``save_file`` of the result: what a script that loads state dicts does;
* ``mergekit`` (optional): ``mergekit-yaml`` with the same method, in its own environment.

Both aclarena steps produce the same tensors (checked). Times exclude interpreter start-up and
imports; RSS includes them (the import-only RSS is printed for reference). The parent process
imports nothing heavy: on Linux a child's peak RSS counts the parent's size at the fork.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make(root: Path, k: int, hidden: int, layers: int, vocab: int | None = None) -> None:
    """The base and ``k`` perturbed copies; ``vocab``: the embedding's rows (default the test tokenizer's), e.g.
    262,144 for a Gemma-3-sized embedding (the tokenizer stays the small one: only the weights are read)."""
    import torch
    from fixtures import make_tokenizer

    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config

    tok = make_tokenizer()
    cfg = tiny_config(tok, hidden_size=hidden, num_layers=layers, num_heads=max(4, hidden // 64),
                      num_kv_heads=max(2, hidden // 192))
    if vocab is not None:
        cfg.vocab_size = vocab
    model = build_model(cfg, seed=0)
    save_checkpoint(model, tok, root / "base")
    for i in range(1, k + 1):
        g = torch.Generator().manual_seed(i)
        m = build_model(cfg, seed=0)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.01)
        save_checkpoint(m, tok, root / f"m{i}")


def child(step: str, root: Path, method: str, k: int) -> dict:
    import torch  # noqa: F401  (imported before the clock starts)

    from aclarena.consolidate import merging as M

    out = root / f"out-{step}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    if step == "stream":
        from aclarena.consolidate.checkpoint_merge import MergeSpec, merge_checkpoints
        from aclarena.models.checkpoint import inspect
        from aclarena.store.manifest import CheckpointSpec, Manifest

        m = Manifest(name="bench", base="base")
        for n in ["base", *[f"m{i}" for i in range(1, k + 1)]]:
            m.add(CheckpointSpec(n, str(root / n), kind="base" if n == "base" else "stage",
                                 parent=None if n == "base" else "base"))
        infos = [inspect(m.resolve(f"m{i}"), m, root) for i in range(1, k + 1)]
        merge_checkpoints(infos, MergeSpec(method), out, base=inspect(m.resolve("base"), m, root))
    else:
        from safetensors.torch import load_file, save_file

        base = load_file(str(root / "base" / "model.safetensors"))
        models = [load_file(str(root / f"m{i}" / "model.safetensors")) for i in range(1, k + 1)]
        merged = {}
        for name, b in base.items():
            ts = [mm[name] for mm in models]
            if method == "uniform":
                merged[name] = M.uniform(ts)
            elif method == "task_arithmetic":
                merged[name] = M.task_arithmetic(b, ts)
            else:
                merged[name] = M.ties(b, ts)
        out.mkdir(parents=True)
        save_file(merged, str(out / "model.safetensors"), metadata={"format": "pt"})
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def run_step(step: str, root: Path, method: str, k: int, mergekit: str | None) -> dict:
    if step == "mergekit":
        cfg = root / f"mergekit-{method}.yml"
        mk = {"uniform": "linear", "task_arithmetic": "task_arithmetic", "ties": "ties"}[method]
        lines = [f"merge_method: {mk}", "dtype: float32", "models:"]
        for i in range(1, k + 1):
            params = {"weight": 1.0} | ({"density": 0.2} if method == "ties" else {})
            lines += [f"  - model: {root / f'm{i}'}", f"    parameters: {json.dumps(params)}"]
        if method != "uniform":
            lines += [f"base_model: {root / 'base'}", "parameters: {normalize: true}" if method == "ties" else ""]
        cfg.write_text("\n".join(lines) + "\n")
        out = root / "out-mergekit"
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        pid = subprocess.Popen([mergekit, str(cfg), str(out), "--quiet"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"}).pid
        _, status, usage = os.wait4(pid, 0)
        if status != 0:
            raise SystemExit("mergekit failed")
        # mergekit's time includes its imports (about 3 s here); RSS likewise
        return {"seconds": time.perf_counter() - t0, "rss_gb": usage.ru_maxrss / 1e6}
    out = subprocess.run([sys.executable, __file__, "--step", step, "--root", str(root), "--method", method,
                          "--k", str(k)], capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"step {step} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--methods", default="uniform,ties")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--mergekit", metavar="PATH", help="a mergekit-yaml executable (installed in its own venv)")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step == "make":
        make(Path(args.root), args.k, args.hidden, args.layers)
        return
    if args.step == "check":
        from safetensors.torch import load_file

        a = load_file(str(Path(args.root) / "out-stream" / "model.safetensors"))
        b = load_file(str(Path(args.root) / "out-naive" / "model.safetensors"))
        print(json.dumps(all((a[n] - b[n]).abs().max().item() == 0 for n in b if n in a)))
        return
    if args.step:
        print(json.dumps(child(args.step, Path(args.root), args.method, args.k)))
        return
    root = Path(tempfile.mkdtemp(prefix="merge-bench-"))
    try:
        subprocess.run([sys.executable, __file__, "--step", "make", "--root", str(root), "--k", str(args.k),
                        "--hidden", str(args.hidden), "--layers", str(args.layers)], check=True, cwd=REPO,
                       capture_output=True)
        size = sum(f.stat().st_size for f in (root / "base").glob("*.safetensors")) / 1e9
        imp = subprocess.run([sys.executable, "-c", "import torch, safetensors, resource; "
                              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)"],
                             capture_output=True, text=True)
        print(f"load: {os.getloadavg()[0]:.2f} (1-min average); K = {args.k} models + base, {size:.2f} GB each; "
              f"RSS of the imports alone: {float(imp.stdout):.2f} GB")
        steps = ["stream", "naive"] + (["mergekit"] if args.mergekit else [])
        for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
            best: dict[str, dict] = {}
            for _ in range(args.repeats):
                for step in steps:
                    r = run_step(step, root, method, args.k, args.mergekit)
                    if step not in best or r["seconds"] < best[step]["seconds"]:
                        best[step] = r
            same = subprocess.run([sys.executable, __file__, "--step", "check", "--root", str(root)], cwd=REPO,
                                  capture_output=True, text=True).stdout.strip()
            ref = best["naive"]
            print(f"\n{method}: stream and naive equal: {same}")
            for step, r in best.items():
                print(f"  {step:9s} {r['seconds']:7.2f} s (x{r['seconds'] / ref['seconds']:.2f} of naive)   "
                      f"peak RSS {r['rss_gb']:.2f} GB (x{r['rss_gb'] / ref['rss_gb']:.2f} of naive)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
