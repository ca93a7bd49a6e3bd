"""Benchmark: the streamed task-vector Gram pass against a plain read and against pairwise loading,
and factored against dense LoRA inner products. Ratios are measured side by side in one run.

    python benchmarks/task_vectors.py                  # K = 6 checkpoints of 1 GB (bf16, sharded): ~7 GB in /tmp
    python benchmarks/task_vectors.py --size-gb 0.1    # small, quick
    ACLARENA_BENCH_SIZE_GB=0.05 python benchmarks/task_vectors.py --skip-pairwise

Targets (issue 4): the Gram pass at most 1.3x the time of reading the same files once (every
tensor loaded and converted to float32, warm page cache), peak RSS at most 3 GB, at least 3x
faster than loading the checkpoints pairwise; factored LoRA equal to dense to 1e-6 (relative)
and at least 50x faster at 4096 x 4096, rank 16.

Each timed step runs in a fresh subprocess so that its peak RSS is its own; steps alternate
(read, gram, read, gram, ...) and the best of each is compared, since other processes share the
machine. Times exclude interpreter start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def layer_shapes(hidden: int) -> dict[str, tuple[int, ...]]:
    """One Llama-like block: attention, MLP (2.75x hidden) and norms."""
    inter = int(hidden * 2.75)
    return {
        "self_attn.q_proj.weight": (hidden, hidden), "self_attn.k_proj.weight": (hidden // 4, hidden),
        "self_attn.v_proj.weight": (hidden // 4, hidden), "self_attn.o_proj.weight": (hidden, hidden),
        "mlp.gate_proj.weight": (inter, hidden), "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter), "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
    }


def make_checkpoints(root: Path, k: int, size_gb: float, hidden: int, shard_mb: int, vocab: int) -> list[Path]:
    """K synthetic bf16 checkpoints of about ``size_gb`` each, sharded, sharing one base."""
    import torch
    from safetensors.torch import save_file

    numel = lambda s: int(torch.tensor(s).prod())  # noqa: E731
    per_layer = sum(numel(s) for s in layer_shapes(hidden).values())
    fixed = vocab * hidden + hidden
    n_layers = max(1, round((size_gb * 1e9 / 2 - fixed) / per_layer))
    names: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(n_layers):
        names.update({f"model.layers.{i}.{n}": s for n, s in layer_shapes(hidden).items()})
    names["model.norm.weight"] = (hidden,)
    g = torch.Generator().manual_seed(0)
    folders = [root / f"ckpt{j}" for j in range(k)]
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
        (f / "config.json").write_text(json.dumps({"architectures": ["BenchForCausalLM"], "model_type": "bench",
                                                   "tie_word_embeddings": True}))
    shard: dict[int, dict[str, object]] = {j: {} for j in range(k)}
    shard_bytes, shard_idx = 0, 0
    weight_map: dict[str, str] = {}

    def flush() -> None:
        nonlocal shard_bytes, shard_idx
        if not shard[0]:
            return
        fname = f"model-{shard_idx + 1:05d}.safetensors"
        for j in range(k):
            save_file(shard[j], str(folders[j] / fname))
            shard[j] = {}
        shard_idx += 1
        shard_bytes = 0

    for name, shape in names.items():
        base = torch.randn(shape, generator=g)
        for j in range(k):
            t = base if j == 0 else base + 0.01 * torch.randn(shape, generator=g)
            shard[j][name] = t.to(torch.bfloat16)
        weight_map[name] = f"model-{shard_idx + 1:05d}.safetensors"
        shard_bytes += 2 * base.numel()
        if shard_bytes >= shard_mb * 1e6:
            flush()
    flush()
    index = {"metadata": {}, "weight_map": weight_map}
    for f in folders:
        (f / "model.safetensors.index.json").write_text(json.dumps(index))
    return folders


def _infos(folders: list[str]):
    from aclarena.models.checkpoint import inspect
    from aclarena.store.manifest import CheckpointSpec, Manifest

    m = Manifest(name="bench")
    for i, f in enumerate(folders):
        m.checkpoints[f"c{i}"] = CheckpointSpec(f"c{i}", f)
    return [inspect(m.resolve(f"c{i}"), m, "/") for i in range(len(folders))]


def step_read(folders: list[str]) -> dict:
    """Every tensor of every checkpoint loaded and converted to float32, one checkpoint at a time."""
    from safetensors import safe_open

    total = 0
    for f in folders:
        for shard in sorted(Path(f).glob("*.safetensors")):
            with safe_open(str(shard), framework="pt") as h:
                for name in h.keys():  # noqa: SIM118 (safe_open is not iterable)
                    total += h.get_tensor(name).float().numel()
    return {"elements": total}


def write_manifest_for(folders: list[str]) -> Path:
    """A run folder whose manifest names the checkpoints: ckpt0 the base, each other one a stage on it."""
    from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest

    run = Path(folders[0]).parent / "run"
    run.mkdir(exist_ok=True)
    m = Manifest(name="bench", base="c0")
    m.add(CheckpointSpec("c0", folders[0], kind="base"))
    for i, f in enumerate(folders[1:], start=1):
        m.add(CheckpointSpec(f"c{i}", f, parent="c0", domain=f"d{i}"))
    write_manifest(m, run)
    return run


def step_gram(folders: list[str]) -> dict:
    """`aclarena-diag vectors` itself: one streamed pass for all K x K inner products."""
    import contextlib
    import io

    from aclarena.cli import main
    from aclarena.results.vectors import read_gram
    from aclarena.store import ResultsStore

    run = write_manifest_for(folders)
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["vectors", "--run", str(run), "--force", "--json"])
    if code != 0:
        raise SystemExit(f"vectors failed with exit code {code}")
    with ResultsStore(run).reader() as r:
        gram = read_gram(r).gram.sum(axis=0)
    return {"gram": gram.tolist()}


def _gram_of(folders: list[str]):
    import numpy as np
    import torch

    from aclarena.analysis.passes import CHUNK_ELEMENTS
    from aclarena.diagnostics.task_vectors import GramAccumulator
    from aclarena.models.tensors import TensorReader

    torch.set_num_threads(1)  # as the verb does
    total = np.zeros((len(folders), len(folders)))
    with TensorReader(_infos(folders)) as reader:
        current, acc = None, None
        for chunk in reader.stream(None, CHUNK_ELEMENTS):
            if chunk.name != current:
                if acc is not None:
                    total += acc.result()
                current, acc = chunk.name, GramAccumulator(len(folders))
            acc.add(chunk.start, chunk.tensors)
        if acc is not None:
            total += acc.result()
    return total


def step_pairwise(folders: list[str]) -> dict:
    """The same numbers from pairs: for each pair of task vectors, read the base and both checkpoints."""
    import numpy as np

    k = len(folders)
    gram = np.zeros((k, k))
    for i in range(1, k):
        for j in range(i + 1, k):
            m = _gram_of([folders[0], folders[i], folders[j]])
            gram[i, j] = gram[j, i] = m[1, 2]
            gram[i, i], gram[j, j] = m[1, 1], m[2, 2]
    return {"gram": gram.tolist()}


def run_step(step: str, folders: list[Path]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--step", step, *map(str, folders)], capture_output=True,
                         text=True, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"step {step} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def peak_rss_gb() -> float:
    """This process's peak resident set (VmHWM): unlike ru_maxrss, not inherited from the parent across exec."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def child(step: str, folders: list[str]) -> None:
    import torch  # noqa: F401  (imported before the clock starts, like a warm process)

    t0 = time.perf_counter()
    result = {"read": step_read, "gram": step_gram, "pairwise": step_pairwise}[step](folders)
    result["seconds"] = time.perf_counter() - t0
    result["max_rss_gb"] = peak_rss_gb()
    print(json.dumps(result))


def bench_lora(repeats: int = 5) -> dict:
    """``⟨B₁A₁, B₂A₂⟩`` and ``⟨D, BA⟩`` factored and dense, on one torch thread (as the verbs run)."""
    import torch

    torch.set_num_threads(1)
    from aclarena.diagnostics.task_vectors import LoraFactors, lora_dense_inner, lora_inner

    g = torch.Generator().manual_seed(0)
    n, r = 4096, 16
    x = LoraFactors(A=torch.randn(r, n, generator=g) / 64, B=torch.randn(n, r, generator=g) / 64, scale=2.0)
    y = LoraFactors(A=torch.randn(r, n, generator=g) / 64, B=torch.randn(n, r, generator=g) / 64, scale=2.0)
    dense_w = torch.randn(1, n, n, generator=g, dtype=torch.float64)

    def best(fn):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            v = fn()
            times.append(time.perf_counter() - t0)
        return min(times), v

    t_f, v_f = best(lambda: lora_inner(x, y))
    t_d, v_d = best(lambda: float((x.dense() * y.dense()).sum()))
    t_fd, v_fd = best(lambda: float(lora_dense_inner(x, dense_w)[0]))
    t_dd, v_dd = best(lambda: float((x.dense() * dense_w[0]).sum()))
    return {
        "lora_lora": {"factored_s": t_f, "dense_s": t_d, "speedup": t_d / t_f, "rel_err": abs(v_f - v_d) / abs(v_d)},
        "lora_dense": {"factored_s": t_fd, "dense_s": t_dd, "speedup": t_dd / t_fd,
                       "rel_err": abs(v_fd - v_dd) / abs(v_dd)},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-gb", type=float, default=float(os.environ.get("ACLARENA_BENCH_SIZE_GB", "1.0")),
                   help="size of each checkpoint in GB (default 1.0, or $ACLARENA_BENCH_SIZE_GB)")
    p.add_argument("--k", type=int, default=6, help="number of checkpoints (default 6)")
    p.add_argument("--hidden", type=int, default=2048, help="hidden size of the synthetic model (default 2048)")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--shard-mb", type=int, default=400, help="shard size in MB (default 400)")
    p.add_argument("--dir", default=os.environ.get("ACLARENA_BENCH_DIR", "/tmp/aclarena-bench"))
    p.add_argument("--repeats", type=int, default=2, help="alternating repetitions of read and gram (default 2)")
    p.add_argument("--skip-pairwise", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the checkpoints for another run")
    p.add_argument("--step", help=argparse.SUPPRESS)
    p.add_argument("folders", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.step:
        child(args.step, args.folders)
        return 0

    root = Path(args.dir)
    need = args.k * args.size_gb * 1.05e9
    root.mkdir(parents=True, exist_ok=True)
    folders = sorted(root.glob("ckpt*"))
    meta = root / "bench.json"
    wanted = {"k": args.k, "size_gb": args.size_gb, "hidden": args.hidden, "vocab": args.vocab, "shard_mb": args.shard_mb}
    if not (meta.is_file() and json.loads(meta.read_text()) == wanted and len(folders) == args.k):
        shutil.rmtree(root)
        root.mkdir(parents=True)
        free = shutil.disk_usage(root).free
        if free < need * 1.1:
            raise SystemExit(f"{root} has {free / 1e9:.1f} GB free; the benchmark needs {need / 1e9:.1f} GB "
                             "(use --size-gb or --dir)")
        t0 = time.perf_counter()
        folders = make_checkpoints(root, args.k, args.size_gb, args.hidden, args.shard_mb, args.vocab)
        meta.write_text(json.dumps(wanted))
        print(f"wrote {args.k} checkpoints in {time.perf_counter() - t0:.0f} s")
    sizes = [sum(f.stat().st_size for f in d.glob("*.safetensors")) for d in folders]
    shards = len(list(folders[0].glob("*.safetensors")))
    print(f"{args.k} checkpoints of {sizes[0] / 1e9:.2f} GB (bf16, {shards} shards each) in {root}")

    for d in folders:  # warm the page cache
        for f in d.glob("*.safetensors"):
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass
    reads, grams = [], []
    for _ in range(args.repeats):
        reads.append(run_step("read", folders))
        grams.append(run_step("gram", folders))
    t_read = min(r["seconds"] for r in reads)
    t_gram = min(g["seconds"] for g in grams)
    rss = max(g["max_rss_gb"] for g in grams)
    runs_read = ", ".join(f"{r['seconds']:.2f}" for r in reads)
    runs_gram = ", ".join(f"{g['seconds']:.2f}" for g in grams)
    print(f"plain read (load + float32), per run: {runs_read} s")
    print(f"Gram pass,                   per run: {runs_gram} s")
    print(f"Gram / plain read: {t_gram / t_read:.2f}x (target <= 1.3x); throughput "
          f"{sum(sizes) / t_gram / 1e9:.2f} GB/s of bf16")
    print(f"peak RSS of the Gram pass: {rss:.2f} GB (target <= 3 GB); plain read peaked at "
          f"{max(r['max_rss_gb'] for r in reads):.2f} GB")
    result = {"k": args.k, "checkpoint_gb": sizes[0] / 1e9, "read_s": t_read, "gram_s": t_gram,
              "gram_over_read": t_gram / t_read, "gram_rss_gb": rss}
    if not args.skip_pairwise:
        pair = run_step("pairwise", folders)
        gram = grams[-1]["gram"]
        k = args.k
        # the verb's basis is θ_0, θ_i − θ_0: entries (i, j >= 1) are the task-vector inner products
        err = max(abs(pair["gram"][i][j] - gram[i][j]) / max(abs(gram[i][i] * gram[j][j]) ** 0.5, 1e-300)
                  for i in range(1, k) for j in range(1, k))
        print(f"pairwise loading ({(k - 1) * (k - 2) // 2} triples of base and two checkpoints): {pair['seconds']:.2f} s; streamed pass is "
              f"{pair['seconds'] / t_gram:.2f}x faster (target >= 3x); max rel. difference {err:.1e}")
        result.update(pairwise_s=pair["seconds"], pairwise_over_gram=pair["seconds"] / t_gram)
    lora = bench_lora()
    r = lora["lora_lora"]
    print(f"LoRA <B1A1, B2A2> at 4096x4096 rank 16: factored {r['factored_s'] * 1e3:.2f} ms, dense "
          f"{r['dense_s'] * 1e3:.1f} ms: {r['speedup']:.0f}x faster (target >= 50x), rel. error {r['rel_err']:.1e}")
    r = lora["lora_dense"]
    # both ways cost 2·r·m·n flops against a full-rank D; the factored one saves the m x n temporary
    print(f"LoRA against a dense D (4096x4096, rank 16): factored {r['factored_s'] * 1e3:.1f} ms, dense "
          f"{r['dense_s'] * 1e3:.1f} ms: {r['speedup']:.1f}x (same flop count; no m x n temporary), "
          f"rel. error {r['rel_err']:.1e}")
    result["lora"] = lora
    print(json.dumps(result))
    if not args.keep:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
