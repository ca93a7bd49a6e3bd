"""GPU check: teacher-forced scoring throughput and model FLOP utilisation on Qwen3-architecture
models built from configs (random weights, nothing downloaded), and the task-vector pass.

    bash benchmarks/gpu_check.sh                      # one H200: at most ~8 minutes
    python benchmarks/gpu_check.py --dry-run          # the plan (configs, sizes, FLOPs) without a model
    PYTHONPATH=tests python benchmarks/gpu_check.py --tiny             # the same code path on CPU with tiny models (CI)

For each model (``0.6b``: Qwen3-0.6B's shape, 0.6 B parameters; ``8b``: Qwen3-8B's shape, 8.2 B)
two random bf16 models are built on the GPU (a reference and a perturbed "later checkpoint"),
a synthetic probe set of ``--sequences`` × ``--seq-len`` tokens is scored with aclarena's own
code (:func:`aclarena.probes.teacher_forcing.reference_outputs` once, then
:func:`~aclarena.probes.teacher_forcing.score`: per position entropy, log-prob, top-k, exact
KL and JS over the 151,936-token vocabulary, statistics in float32), and the script prints:

* ``tokens/s``: sequence tokens through the checkpoint's decoder per second of ``score``;
* ``TFLOP/s`` and ``MFU``: model FLOPs of ``score`` (decoder forward 2·N·T plus causal
  attention, plus both output heads at the scored positions, 2·2·d·V per position) over the
  time, against the H200's dense bf16 peak (989 TFLOP/s, the datasheet figure);
* the peak GPU memory of the step.

Then ``--checkpoints`` Qwen3-0.6B-shaped checkpoints (bf16 safetensors) are written to
``--workdir`` and ``aclarena-diag vectors`` streams them once for all K×K task-vector inner
products (CPU, float64 accumulation): the pass's seconds and GB/s.

Nothing is asserted; the output shape is documented in docs/gpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

H200_BF16_PEAK_TFLOPS = 989.0


@dataclass(frozen=True)
class Shape:
    """A Qwen3 decoder's shape (the fields of transformers' Qwen3Config that set its size)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool

    def config(self):
        from transformers import Qwen3Config

        return Qwen3Config(vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
                           num_hidden_layers=self.layers, num_attention_heads=self.heads,
                           num_key_value_heads=self.kv_heads, head_dim=self.head_dim, max_position_embeddings=40960,
                           tie_word_embeddings=self.tied, rope_theta=1_000_000.0, bos_token_id=None,
                           eos_token_id=0, pad_token_id=0)

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def decoder_params(self) -> int:
        """Parameters of the decoder blocks (what multiplies every token), without embeddings."""
        attn = self.hidden * self.head_dim * (self.heads + 2 * self.kv_heads) + self.heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        norms = 2 * self.hidden + 2 * self.head_dim
        return self.layers * (attn + mlp + norms) + self.hidden

    @property
    def total_params(self) -> int:
        return self.decoder_params + self.embedding_params * (1 if self.tied else 2)

    def score_flops(self, n_seqs: int, seq_len: int, n_scored: int) -> float:
        """Model FLOPs of scoring one checkpoint against a cached reference.

        Decoder forward: 2 FLOPs per parameter per token, plus causal attention
        (QK^T and AV: 2 · 2 · L · S²/2 · heads · head_dim per sequence). Output heads: the
        reference's logits are recomputed next to the checkpoint's at each scored position
        (2 heads × 2 · d · V).
        """
        tokens = n_seqs * seq_len
        decoder = 2.0 * self.decoder_params * tokens
        attention = n_seqs * 2.0 * 2.0 * self.layers * (seq_len * seq_len / 2) * self.heads * self.head_dim
        heads = 2 * 2.0 * self.hidden * self.vocab * n_scored
        return decoder + attention + heads


SHAPES = {
    # Qwen3-0.6B and Qwen3-8B (their config.json), random weights
    "0.6b": Shape("0.6b", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=3072,
                  vocab=151_936, tied=True),
    "8b": Shape("8b", hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, intermediate=12288,
                vocab=151_936, tied=False),
    # CPU stand-in of the same architecture (--tiny)
    "tiny": Shape("tiny", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=192, vocab=512,
                  tied=True),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="0.6b,8b", help="comma-separated shapes: 0.6b, 8b, tiny (default 0.6b,8b)")
    p.add_argument("--sequences", type=int, default=64, help="probe sequences per model (default 64)")
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence (default 1024)")
    p.add_argument("--scored-fraction", type=float, default=0.5,
                   help="scored (generated) share of each sequence, at its end (default 0.5)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per forward pass (default 16)")
    p.add_argument("--repeats", type=int, default=2, help="timed score passes per model, the best kept (default 2)")
    p.add_argument("--checkpoints", type=int, default=4, help="checkpoints in the task-vector pass; 0 skips it")
    p.add_argument("--vector-shape", default="0.6b", help="shape of the task-vector checkpoints (default 0.6b)")
    p.add_argument("--workdir", default=None, help="where the task-vector checkpoints go (default: a temp folder)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--tiny", action="store_true",
                   help="CPU smoke run: tiny shapes and sizes, the same code path (what CI runs)")
    p.add_argument("--cli", action=argparse.BooleanOptionalAction, default=True,
                   help="also run probe, tokens and eval on the tiny test fixtures on the device (default on)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no torch model is built)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of lines")
    p.add_argument("--save", metavar="FILE", help="also write the results as JSON to FILE")
    args = p.parse_args(argv)
    if args.tiny:
        args.models, args.vector_shape, args.device = "tiny", "tiny", "cpu"
        args.sequences, args.seq_len, args.batch_size, args.repeats = 4, 32, 2, 1
        args.checkpoints = min(args.checkpoints, 3)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models + [args.vector_shape] if m not in SHAPES]
    if unknown:
        p.error(f"unknown model shape {unknown[0]!r}; choose from {', '.join(SHAPES)}")
    if not models:
        p.error("--models names no shape")
    for opt in ("sequences", "seq_len", "batch_size", "repeats"):
        if getattr(args, opt) < 1:
            p.error(f"--{opt.replace('_', '-')} must be at least 1")
    if not 0 < args.scored_fraction <= 1:
        p.error("--scored-fraction must be in (0, 1]")
    if args.checkpoints not in (0,) and args.checkpoints < 2:
        p.error("--checkpoints must be 0 (skip) or at least 2")
    args.model_list = models
    return args


def plan(args: argparse.Namespace) -> dict:
    n_scored_per_seq = max(1, int(args.seq_len * args.scored_fraction))
    out = {"device": args.device, "sequences": args.sequences, "seq_len": args.seq_len,
           "scored_per_sequence": n_scored_per_seq, "batch_size": args.batch_size, "models": {}}
    for m in args.model_list:
        s = SHAPES[m]
        out["models"][m] = {
            "shape": asdict(s), "params_total": s.total_params, "params_decoder": s.decoder_params,
            "score_flops": s.score_flops(args.sequences, args.seq_len, args.sequences * n_scored_per_seq),
        }
    out["task_vectors"] = {"checkpoints": args.checkpoints, "shape": args.vector_shape,
                           "bytes_each_bf16": 2 * SHAPES[args.vector_shape].total_params}
    return out


def synthetic_probe(n: int, length: int, scored_fraction: float, vocab: int, seed: int = 0):
    import numpy as np

    from aclarena.results.probes import ProbeSet

    rng = np.random.default_rng(seed)
    ids, masks = [], []
    start = length - max(1, int(length * scored_fraction))
    for _ in range(n):
        ids.append(rng.integers(1, vocab, size=length, dtype=np.int64).astype(np.int32))
        m = np.zeros(length, dtype=bool)
        m[max(start, 1):] = True
        masks.append(m)
    return ProbeSet(name="gpu-check", reference="ref", ids=ids, scored=masks, texts=[""] * n,
                    token_text=[[""] * length for _ in range(n)], sources=[{}] * n)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def check_scoring(shape: Shape, args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from aclarena.probes.teacher_forcing import reference_outputs, score

    device = args.device
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        ref = AutoModelForCausalLM.from_config(shape.config(), dtype=dtype).eval()
        ckpt = AutoModelForCausalLM.from_config(shape.config(), dtype=dtype).eval()
    with torch.no_grad():
        for p, q in zip(ref.parameters(), ckpt.parameters(), strict=True):
            q.copy_(p).add_(torch.randn_like(q) * 1e-3)  # a later checkpoint: the reference, moved a little
    _sync(device)
    build_s = time.perf_counter() - t0
    probe = synthetic_probe(args.sequences, args.seq_len, args.scored_fraction, shape.vocab)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    cache = reference_outputs(ref, probe, name="ref", batch_size=args.batch_size)
    _sync(device)
    ref_s = time.perf_counter() - t0
    times = []
    res = None
    for _ in range(args.repeats):
        _sync(device)
        t0 = time.perf_counter()
        res = score(ckpt, cache, probe, name="ckpt")
        _sync(device)
        times.append(time.perf_counter() - t0)
    assert res is not None
    best = min(times)
    tokens = args.sequences * args.seq_len
    flops = shape.score_flops(args.sequences, args.seq_len, probe.n_scored)
    import numpy as np

    finite = int(np.isfinite(res.kl).sum())
    out = {
        "model": shape.name, "params_total": shape.total_params, "dtype": str(dtype).removeprefix("torch."),
        "build_s": round(build_s, 2), "reference_pass_s": round(ref_s, 3), "score_s": [round(t, 3) for t in times],
        "tokens": tokens, "scored_positions": probe.n_scored, "tokens_per_s": round(tokens / best, 1),
        "tflops": round(flops / best / 1e12, 2),
        "mfu": round(flops / best / 1e12 / H200_BF16_PEAK_TFLOPS, 4) if device.startswith("cuda") else None,
        "kl_mean": float(np.nanmean(res.kl)), "finite_kl_positions": finite,
        "stats_dtype": str(res.kl.dtype),
    }
    if device.startswith("cuda"):
        out["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    del ref, ckpt, cache, res
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


def check_task_vectors(shape: Shape, k: int, workdir: Path) -> dict:
    import contextlib
    import io

    import torch
    from transformers import AutoModelForCausalLM

    from aclarena.cli import main
    from aclarena.results.vectors import read_gram
    from aclarena.store import ResultsStore
    from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest

    run = workdir / "vectors-run"
    run.mkdir(parents=True, exist_ok=True)
    dtype = torch.bfloat16
    torch.manual_seed(0)
    t0 = time.perf_counter()
    base = AutoModelForCausalLM.from_config(shape.config(), dtype=dtype)
    sizes = []
    m = Manifest(name="gpu-check", base="c0")
    for i in range(k):
        folder = run / f"c{i}"
        if i:
            with torch.no_grad():
                for p in base.parameters():
                    p.add_(torch.randn_like(p) * 1e-3)
        base.save_pretrained(folder, safe_serialization=True)
        sizes.append(sum(f.stat().st_size for f in folder.glob("*.safetensors")))
        m.add(CheckpointSpec(f"c{i}", f"c{i}", kind="base" if i == 0 else "stage", parent=None if i == 0 else "c0",
                             domain=None if i == 0 else f"d{i}"))
    write_manifest(m, run)
    del base
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["vectors", "--run", str(run), "--force", "--json"])
    gram_s = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"vectors failed with exit code {code}")
    with ResultsStore(run).reader() as r:
        gram = read_gram(r).gram
    return {"checkpoints": k, "shape": shape.name, "bytes_total": sum(sizes), "write_s": round(write_s, 2),
            "vectors_s": round(gram_s, 2), "gb_per_s": round(sum(sizes) / gram_s / 1e9, 3),
            "gram_shape": list(getattr(gram, "shape", ()))}


def check_cli(device: str, workdir: Path) -> dict:
    """The verbs on the device: probe, tokens (bf16 on CUDA) and eval on the tiny test fixtures."""
    import contextlib
    import io

    from fixtures import make_run, make_tokenizer
    from tokens_helpers import PROMPTS, write_jsonl

    from aclarena.cli import main as cli

    run = make_run(workdir / "cli-run", make_tokenizer())
    prompts = write_jsonl(workdir / "prompts.jsonl", PROMPTS)
    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    out = {}
    for verb, argv in (
        ("probe", ["probe", "--ref", "seq-math", "--prompts", str(prompts), "--max-new-tokens", "16"]),
        ("tokens", ["tokens", "--ref", "seq-math"]),
        ("eval", ["eval", "--checkpoints", "seq-math", "--suites", "math/id", "-n", "4", "--samples", "2"]),
    ):
        err = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()) as o, contextlib.redirect_stderr(err):
            code = cli([*argv, "--run", str(run), "--device", device, "--dtype", dtype, "--json"])
        out[verb] = {"exit": code, "s": round(time.perf_counter() - t0, 2),
                     "error": err.getvalue().strip().splitlines()[-1:] if code else []}
        if verb == "tokens" and code == 0:
            doc = json.loads(o.getvalue())
            out[verb]["kl_mean"] = [r.get("kl_mean") for r in doc["checkpoints"]]
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = plan(args)
    say = (lambda *a: None) if args.json else print
    if args.dry_run:
        if args.json:
            print(json.dumps({"plan": info}, indent=2))
        else:
            for name, m in info["models"].items():
                print(f"plan {name}: {m['params_total'] / 1e9:.3f} B parameters ({m['params_decoder'] / 1e9:.3f} B "
                      f"in the decoder), {m['score_flops'] / 1e12:.1f} TFLOP per score pass of {args.sequences} x "
                      f"{args.seq_len} tokens")
            tv = info["task_vectors"]
            print(f"plan task vectors: {tv['checkpoints']} checkpoints of shape {tv['shape']}, "
                  f"{tv['bytes_each_bf16'] / 1e9:.2f} GB each in bf16")
        return 0
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: CUDA is not available; run with --tiny (CPU) or on a GPU machine", file=sys.stderr)
        return 1
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda")
           else "cpu", "cuda": torch.version.cuda}
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import vllm  # noqa: F401

        env["vllm"] = getattr(vllm, "__version__", "?")
    except ImportError:
        env["vllm"] = None
    say(f"env: torch {env['torch']} (CUDA {env['cuda']}), transformers {env.get('transformers')}, "
        f"device {env['device']}, vllm {env['vllm'] or 'not installed'}")
    results = {"env": env, "plan": info, "scoring": [], "task_vectors": None}
    for m in args.model_list:
        r = check_scoring(SHAPES[m], args)
        results["scoring"].append(r)
        if args.save:
            Path(args.save).write_text(json.dumps(results, indent=2), encoding="utf-8")
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a (cpu)"
        say(f"scoring {m}: {r['params_total'] / 1e9:.2f} B params {r['dtype']}, {args.sequences} x {args.seq_len} "
            f"tokens ({r['scored_positions']} scored), score {min(r['score_s']):.3f} s: "
            f"{r['tokens_per_s']:,.0f} tokens/s, {r['tflops']} TFLOP/s, MFU {mfu}"
            + (f", peak {r['peak_gpu_gib']} GiB" if "peak_gpu_gib" in r else "")
            + f"; reference pass {r['reference_pass_s']} s; KL mean {r['kl_mean']:.3g} ({r['stats_dtype']})")
    if args.checkpoints:
        tmp = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="aclarena-gpu-check-"))
        try:
            tv = check_task_vectors(SHAPES[args.vector_shape], args.checkpoints, tmp)
        finally:
            if not args.workdir:
                shutil.rmtree(tmp, ignore_errors=True)
        results["task_vectors"] = tv
        say(f"task vectors: {tv['checkpoints']} x {args.vector_shape} checkpoints, {tv['bytes_total'] / 1e9:.2f} GB "
            f"of bf16 safetensors, one streamed pass {tv['vectors_s']} s ({tv['gb_per_s']} GB/s); "
            f"written in {tv['write_s']} s")
    if args.cli:
        tmp = Path(tempfile.mkdtemp(prefix="aclarena-gpu-cli-"))
        try:
            results["cli"] = check_cli(args.device, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for verb, r in results["cli"].items():
            say(f"cli {verb} --device {args.device}: exit {r['exit']} in {r['s']} s"
                + (f", KL mean per checkpoint {r['kl_mean']}" if r.get("kl_mean") else "")
                + (f": {r['error'][0]}" if r["error"] else ""))
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=2), encoding="utf-8")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    raise SystemExit(main())
