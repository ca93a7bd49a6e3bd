"""Benchmark: peak memory of the streamed repair against loading OLD and NEW whole, side by side.

    PYTHONPATH=tests python benchmarks/repair.py                          # two checkpoints of ~330 MB (fp32, 83M parameters)
    PYTHONPATH=tests python benchmarks/repair.py --hidden 256 --layers 4  # a small one

Each step runs in a fresh subprocess so that its peak RSS (``ru_maxrss``) is its own:

* ``stream``: :func:`aclarena.consolidate.repair.repair_checkpoints` (TensorReader in,
  ShardedWriter out, one tensor at a time);
* ``naive``: ``safetensors.torch.load_file`` of both checkpoints, the same per-tensor maths
  (:mod:`aclarena.diagnostics.repair`) with a whole-matrix SVD of every tensor, ``save_file`` of the result.

The streamed repair takes tall matrices above 64 MB (a large vocabulary's embedding) in row blocks
(:func:`aclarena.diagnostics.repair.gram_spectrum`); both write the same tensors to float32 rounding
(``max_abs_difference``, at most 1e-5 for ``same``).

Printed per method: the peak RSS of each step above the RSS of the imports alone, that excess
as a multiple of one checkpoint's size, and the ratio stream / naive. Both steps write the same
tensors (checked). Memory is the measure here, not time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

IMPORTS = "import torch, safetensors.torch, aclarena.diagnostics.repair, aclarena.consolidate.repair"


def child(step: str, root: Path, method: str) -> dict:
    import torch  # noqa: F401  (before the measurement: the imports are subtracted)

    from aclarena.diagnostics import repair as R

    out = root / f"out-{step}-{method}"
    shutil.rmtree(out, ignore_errors=True)
    if step == "stream":
        from aclarena.consolidate.repair import RepairSpec, repair_checkpoints
        from aclarena.models.checkpoint import inspect
        from aclarena.store.manifest import CheckpointSpec, Manifest

        m = Manifest(name="bench", base="base")
        m.add(CheckpointSpec("base", str(root / "base"), kind="base"))
        m.add(CheckpointSpec("m1", str(root / "m1"), kind="stage", parent="base"))
        spec = RepairSpec(method, percent=25.0 if method == "svd-restore" else None)
        repair_checkpoints(inspect(m.resolve("base"), m, root), inspect(m.resolve("m1"), m, root), spec, out)
    else:
        from safetensors.torch import load_file, save_file

        old = load_file(str(root / "base" / "model.safetensors"))
        new = load_file(str(root / "m1" / "model.safetensors"))
        res = {}
        for name, t in new.items():
            r = R.svd_restore(old[name], t, 25.0) if method == "svd-restore" else R.dg_hard(old[name], t)
            res[name] = r.tensor.to(t.dtype)
        out.mkdir(parents=True)
        save_file(res, str(out / "model.safetensors"), metadata={"format": "pt"})
    return {"rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=None,
                    help="embedding rows (default the test tokenizer's; 262144 for a Gemma-3-sized embedding)")
    ap.add_argument("--methods", default="svd-restore,dg-hard")
    ap.add_argument("--results", metavar="FILE", help="also write the report as JSON here")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step == "make":
        from merging import make

        make(Path(args.root), 1, args.hidden, args.layers, args.vocab)
        return
    if args.step == "check":
        from safetensors.torch import load_file

        a = load_file(str(Path(args.root) / f"out-stream-{args.method}" / "model.safetensors"))
        b = load_file(str(Path(args.root) / f"out-naive-{args.method}" / "model.safetensors"))
        diff = max(float((a[n].float() - b[n].float()).abs().max()) for n in b) if set(a) == set(b) else math.inf
        print(json.dumps(diff))
        return
    if args.step:
        print(json.dumps(child(args.step, Path(args.root), args.method)))
        return
    root = Path(tempfile.mkdtemp(prefix="repair-bench-"))
    try:
        subprocess.run([sys.executable, __file__, "--step", "make", "--root", str(root), "--hidden", str(args.hidden),
                        "--layers", str(args.layers)] + (["--vocab", str(args.vocab)] if args.vocab else []),
                       check=True, cwd=REPO, capture_output=True)
        size = sum(f.stat().st_size for f in (root / "base").glob("*.safetensors")) / 1e9
        imp = subprocess.run([sys.executable, "-c", f"{IMPORTS}; import resource; "
                              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)"],
                             capture_output=True, text=True, cwd=REPO, check=True)
        base_rss = float(imp.stdout)
        print(f"checkpoint size {size:.3f} GB (OLD and NEW each); RSS of the imports alone {base_rss:.3f} GB")
        from safetensors import safe_open

        with safe_open(str(next((root / "base").glob("*.safetensors"))), "pt") as f:
            largest = max(math.prod(f.get_slice(n).get_shape()) * 4 for n in f.keys()) / 1e9  # noqa: SIM118
        print(f"largest tensor {largest:.3f} GB (float32)")
        report: dict = {"command": "python benchmarks/repair.py " + " ".join(sys.argv[1:]), "hidden": args.hidden,
                        "layers": args.layers, "vocab": args.vocab, "largest_tensor_gb": largest,
                        "checkpoint_gb": size, "imports_rss_gb": base_rss,
                        "load_average_1min": os.getloadavg()[0], "methods": {}}
        for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
            got = {}
            for step in ("stream", "naive"):
                r = subprocess.run([sys.executable, __file__, "--step", step, "--root", str(root), "--method", method],
                                   capture_output=True, text=True, cwd=REPO)
                if r.returncode != 0:
                    raise SystemExit(f"step {step} failed:\n{r.stderr}")
                got[step] = json.loads(r.stdout.strip().splitlines()[-1])["rss_gb"] - base_rss
            # compared in a subprocess: a child's peak RSS counts the parent's size at the fork (Linux), so the
            # parent never loads weights
            diff = json.loads(subprocess.run([sys.executable, __file__, "--step", "check", "--root", str(root),
                                              "--method", method], capture_output=True, text=True, cwd=REPO,
                                             check=True).stdout.strip().splitlines()[-1])
            # the streamed repair takes tall matrices above 64 MB in row blocks (Gram route), the naive one the
            # whole SVD: the same projection, to float32 rounding
            same = diff <= 1e-5
            print(f"{method}: same tensors {same} (max |difference| {diff:.2e}); peak RSS above imports: stream {got['stream']:.3f} GB "
                  f"({got['stream'] / size:.2f}x a checkpoint, {got['stream'] / largest:.2f}x the largest tensor), "
                  f"naive {got['naive']:.3f} GB ({got['naive'] / size:.2f}x); stream / naive "
                  f"{got['stream'] / got['naive']:.2f}")
            report["methods"][method] = {"stream_gb": got["stream"], "naive_gb": got["naive"], "same": same,
                                         "max_abs_difference": diff,
                                         "stream_per_largest_tensor": got["stream"] / largest}
        print(json.dumps(report))
        if args.results:
            Path(args.results).write_text(json.dumps(report, indent=1) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
