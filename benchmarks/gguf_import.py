"""Benchmark: `aclarena-diag import` of a GGUF file, streamed tensor by tensor against transformers' own
GGUF loading (the previous implementation), side by side: seconds per GB and peak memory.

    PYTHONPATH=tests python benchmarks/gguf_import.py                        # 75M parameters, a Q8_0 and a Q4_K file
    PYTHONPATH=tests python benchmarks/gguf_import.py --hidden 256 --layers 2 --qtypes Q8_0  # a small one
    PYTHONPATH=tests python benchmarks/gguf_import.py --results docs/results/gguf_import.json

The benchmark writes its own GGUF files first (tests/gguf_helpers.py: a Llama model with the test
tokenizer, every 2-D weight but the embeddings stored as each of ``--qtypes``, llama.cpp's Q/K
permutation applied; K-quants, which the gguf package cannot write, as zero blocks, which cost the
same to dequantize). Each import then runs in a fresh subprocess, one thread, so that its peak RSS
(``ru_maxrss``) is its own, and a streamed import of a tiny file measures the fixed cost (tokenizer,
config, the model built on the meta device, lazily imported modules):

* ``stream``: :func:`aclarena.models.gguf_import.import_gguf` (metadata through transformers, then per
  tensor: read, dequantize with the gguf package, process, convert, append to a safetensors shard);
* ``transformers``: the same function with ``streaming=False``: ``from_pretrained(gguf_file=...)``
  loads and dequantizes the whole model, which is rebuilt without its quantization config and saved
  (what ``import`` did before issue 45).

Printed per step: wall and CPU seconds (CPU time is the measure on shared cores: wall time there
depends on the other jobs), CPU seconds per GB of the GGUF file and of the float32 safetensors written,
peak RSS above the RSS of the imports alone, that excess against the largest tensor (float32) and the
whole model (float32). Both steps write the same tensors (checked). For scale, the time to read the
file (warm page cache, 1 MiB blocks) and to hash it (SHA-256, which every import does) is printed too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

WRITABLE = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
IMPORTS = ("import torch, gguf, safetensors.torch, transformers, aclarena.models.gguf_import; "
           "from transformers import AutoModelForCausalLM, AutoTokenizer, AutoConfig")


def make(root: Path, hidden: int, layers: int, intermediate: int, qtype: str) -> dict:
    import torch
    from fixtures import make_tokenizer
    from gguf_helpers import write_llama_gguf

    from aclarena.models.tiny import build_model, tiny_config

    torch.manual_seed(0)
    tok = make_tokenizer()
    cfg = tiny_config(tok, arch="llama", hidden_size=hidden, num_layers=layers, num_heads=max(1, hidden // 64),
                      num_kv_heads=max(1, hidden // 256), intermediate_size=intermediate)
    model = build_model(cfg, seed=0)
    path = root / "src" / f"bench.{qtype}.gguf"
    path.parent.mkdir(parents=True)
    weights = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_")
    if qtype in WRITABLE:
        write_llama_gguf(model, tok, path, quantize=weights, qtype=qtype)
    else:  # K-quants: the gguf package cannot quantize them; zero blocks cost the same to dequantize
        write_llama_gguf(model, tok, path, raw=weights, raw_type=qtype)
    sd = model.state_dict()
    return {"parameters": sum(t.numel() for n, t in sd.items() if n != "lm_head.weight"),
            "largest_tensor_f32_gb": max(t.numel() for t in sd.values()) * 4 / 1e9}


def child(step: str, root: Path) -> dict:
    import torch

    torch.set_num_threads(1)
    exec(IMPORTS)  # the same imports as the baseline, before the measurement
    from aclarena.models.gguf_import import import_gguf

    out = root / f"out-{step}"
    shutil.rmtree(out, ignore_errors=True)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    import_gguf(root / "src", out, streaming=step == "stream")
    seconds = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return {"seconds": seconds, "cpu_seconds": cpu, "rss_gb": r1.ru_maxrss / 1e6}


def check(root: Path) -> bool:
    from safetensors.torch import load_file

    def weights(folder: Path) -> dict:
        out = {}
        for f in sorted(folder.glob("*.safetensors")):
            out.update(load_file(str(f)))
        return out

    a, b = weights(root / "out-stream"), weights(root / "out-transformers")
    return set(a) == set(b) and all(bool((a[n] == b[n]).all()) for n in a)


def versions() -> dict:
    from importlib.metadata import version

    return {p: version(p) for p in ("torch", "transformers", "gguf", "safetensors")}


def read_rates(path: Path) -> dict:
    t0 = time.perf_counter()
    with path.open("rb") as f:
        while f.read(1 << 20):
            pass
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return {"read_s_per_gb": read_s / (path.stat().st_size / 1e9),
            "sha256_s_per_gb": (time.perf_counter() - t0) / (path.stat().st_size / 1e9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--qtypes", default="Q8_0,Q4_K",
                    help="one file per type: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (quantized from the model's weights), or "
                         "Q4_K, Q5_K, Q6_K (zero blocks: the gguf package cannot quantize them; timing only)")
    ap.add_argument("--qtype", help=argparse.SUPPRESS)
    ap.add_argument("--results", metavar="FILE", help="also write the report as JSON here")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step == "make":
        print(json.dumps(make(Path(args.root), args.hidden, args.layers, args.intermediate, args.qtype)))
        return
    if args.step == "check":
        print(json.dumps(check(Path(args.root))))
        return
    if args.step:
        print(json.dumps(child(args.step, Path(args.root))))
        return
    env = dict(os.environ, OMP_NUM_THREADS="1", ACLARENA_PROGRESS_INTERVAL="0",
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))

    def run(*extra: str) -> Any:
        r = subprocess.run([sys.executable, __file__, *extra], capture_output=True, text=True, cwd=REPO, env=env)
        if r.returncode != 0:
            raise SystemExit(f"{extra} failed:\n{r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    tmp = Path(tempfile.mkdtemp(prefix="gguf-bench-"))
    try:
        imp = subprocess.run([sys.executable, "-c", f"import torch; torch.set_num_threads(1); {IMPORTS}; "
                              "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)"],
                             capture_output=True, text=True, cwd=REPO, check=True, env=env)
        base_rss = float(imp.stdout.strip().splitlines()[-1])
        # the streamed import's fixed cost (tokenizer, config, the model on the meta device, lazy imports): a tiny file
        small = tmp / "small"
        small.mkdir()
        run("--step", "make", "--root", str(small), "--hidden", "128", "--layers", "1", "--intermediate", "256",
            "--qtype", "Q8_0")
        fixed = run("--step", "stream", "--root", str(small))
        assert isinstance(fixed, dict)
        fixed_above = fixed["rss_gb"] - base_rss
        print(f"imports alone {base_rss:.3f} GB RSS; streamed import of a tiny file (0.2M parameters): "
              f"{fixed['seconds']:.1f} s ({fixed['cpu_seconds']:.1f} s CPU), {fixed_above:.3f} GB above the imports "
              "(the fixed cost)")
        report: dict = {
            "made_by": {"command": "PYTHONPATH=tests python benchmarks/gguf_import.py " + " ".join(sys.argv[1:]),
                        "date": time.strftime("%Y-%m-%d", time.gmtime()),
                        "machine": f"{os.cpu_count()} CPU cores shared with other jobs, {platform.machine()}, one "
                                   "thread (OMP_NUM_THREADS=1), page cache warm (the file was just written)",
                        "load_average_1min": round(os.getloadavg()[0], 2), "versions": versions()},
            "imports_rss_gb": base_rss,
            "stream_fixed": {"seconds": fixed["seconds"], "cpu_seconds": fixed["cpu_seconds"],
                             "peak_above_imports_gb": fixed_above},
            "files": {}}
        for qtype in [q.strip() for q in args.qtypes.split(",") if q.strip()]:
            report["files"][qtype] = one_file(run, tmp / qtype, args, qtype, base_rss, fixed_above,
                                                 fixed["cpu_seconds"])
        if args.results:
            Path(args.results).write_text(json.dumps(report, indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def one_file(run: Any, root: Path, args: argparse.Namespace, qtype: str, base_rss: float, fixed_above: float,
             fixed_cpu: float) -> dict:
    root.mkdir()
    made = run("--step", "make", "--root", str(root), "--hidden", str(args.hidden), "--layers", str(args.layers),
               "--intermediate", str(args.intermediate), "--qtype", qtype)
    src = next((root / "src").glob("*.gguf"))
    gguf_gb = src.stat().st_size / 1e9
    model_f32_gb = made["parameters"] * 4 / 1e9
    largest = made["largest_tensor_f32_gb"]
    rates = read_rates(src)
    print(f"{qtype}: GGUF {gguf_gb:.3f} GB, {made['parameters'] / 1e6:.1f}M parameters = {model_f32_gb:.3f} GB float32, "
          f"largest tensor {largest:.4f} GB float32; reading the file {rates['read_s_per_gb']:.2f} s/GB, hashing it "
          f"{rates['sha256_s_per_gb']:.2f} s/GB")
    out: dict = {"qtype": qtype, "values": "quantized from the model" if qtype in WRITABLE else "zero blocks (timing only)",
                 "hidden": args.hidden, "layers": args.layers, "intermediate": args.intermediate, "gguf_gb": gguf_gb,
                 "parameters": made["parameters"], "model_f32_gb": model_f32_gb, "largest_tensor_f32_gb": largest,
                 "file_read": rates, "steps": {}}
    for step in ("stream", "transformers"):
        got = run("--step", step, "--root", str(root))
        above = got["rss_gb"] - base_rss
        cpu = got["cpu_seconds"]
        row = {"seconds": got["seconds"], "cpu_seconds": cpu, "cpu_s_per_gguf_gb": cpu / gguf_gb,
               "cpu_s_per_written_gb": cpu / model_f32_gb,
               "cpu_s_per_gguf_gb_above_fixed": (cpu - fixed_cpu) / gguf_gb, "peak_rss_gb": got["rss_gb"],
               "peak_above_imports_gb": above, "above_fixed_gb": above - fixed_above,
               "above_fixed_per_largest_tensor": (above - fixed_above) / largest,
               "above_imports_per_model_f32": above / model_f32_gb}
        out["steps"][step] = row
        print(f"  {step}: {got['seconds']:.1f} s wall, {cpu:.1f} s CPU ({row['cpu_s_per_gguf_gb']:.1f} CPU s per GB "
              f"of GGUF, {row['cpu_s_per_gguf_gb_above_fixed']:.1f} above the stream's fixed cost, "
              f"{row['cpu_s_per_written_gb']:.1f} per GB written); peak RSS {above:.3f} GB above the imports "
              f"({row['above_imports_per_model_f32']:.2f}x the float32 model; {row['above_fixed_gb']:.3f} GB above the "
              f"stream's fixed cost = {row['above_fixed_per_largest_tensor']:.1f}x the largest tensor)")
    out["same_tensors"] = run("--step", "check", "--root", str(root))
    s, t = out["steps"]["stream"], out["steps"]["transformers"]
    out["stream_over_transformers"] = {"seconds": s["seconds"] / t["seconds"],
                                       "cpu_seconds": s["cpu_seconds"] / t["cpu_seconds"],
                                       "peak_above_imports": s["peak_above_imports_gb"] / t["peak_above_imports_gb"]}
    print(f"  same tensors: {out['same_tensors']}; stream / transformers: wall time "
          f"{out['stream_over_transformers']['seconds']:.2f}, CPU time {out['stream_over_transformers']['cpu_seconds']:.2f}, "
          "memory above imports "
          f"{out['stream_over_transformers']['peak_above_imports']:.2f}")
    shutil.rmtree(root, ignore_errors=True)
    return out

if __name__ == "__main__":
    main()
