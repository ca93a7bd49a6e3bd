"""Token scoring and the Tokens page: ratios measured side by side in one run (issue 3 targets).

    python benchmarks/token_scoring.py            # all three parts (~10 min on 2 CPU cores, ~9 GB peak)
    python benchmarks/token_scoring.py --part overhead --reps 3

* overhead: a Qwen3-shaped model (hidden 1,024, 2 layers, vocabulary 151,936), batch
  2 × 1,024 tokens, reference and checkpoint. Time of aclarena's ``score`` (both models'
  entropies, log-probs, top-5, exact KL and JS) over the time of the two bare forward
  passes (logits only). Also the naive way (full float32 logits, log_softmax, then the
  sums) and a plain chunked loop. Target: score ≤ 1.3 × bare.
* memory: peak resident memory above the two models' weights, each way in a fresh
  process (RSS sampled every millisecond). Target: score ≤ 1/8 of naive.
* dashboard: median server-side latency of the Tokens page callbacks (including JSON
  serialisation) on a store of 256 sequences × 1,024 tokens × 12 checkpoints. Target ≤ 200 ms.

Nothing is asserted: the script prints what it measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VOCAB, HIDDEN, LAYERS, BATCH, SEQ = 151_936, 1024, 2, 2, 1024


# --- models and the four ways ---------------------------------------------------------------------


def build_models():
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=3 * HIDDEN, num_hidden_layers=LAYERS,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=64, max_position_embeddings=4096,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    ref = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    ckpt = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        for p, q in zip(ref.parameters(), ckpt.parameters(), strict=True):
            q.copy_(p + 0.01 * torch.randn_like(p))  # a later checkpoint: same shapes, moved weights
    return ref, ckpt


def make_probe():
    import numpy as np

    from aclarena.probes.probe_set import ProbeSet

    rng = np.random.default_rng(0)
    ids = [rng.integers(0, VOCAB, SEQ).astype(np.int32) for _ in range(BATCH)]
    scored = [np.r_[False, np.ones(SEQ - 1, bool)] for _ in range(BATCH)]
    return ProbeSet(name="bench", reference="ref", ids=ids, scored=scored, texts=[""] * BATCH,
                    token_text=[[""] * SEQ for _ in range(BATCH)], sources=[{}] * BATCH)


def way_bare(ref, ckpt, probe):
    import torch

    x = torch.as_tensor([list(i) for i in probe.ids], dtype=torch.long)
    with torch.inference_mode():
        a = ref(input_ids=x).logits
        del a
        b = ckpt(input_ids=x).logits
        del b


def way_naive(ref, ckpt, probe):
    import torch

    x = torch.as_tensor([list(i) for i in probe.ids], dtype=torch.long)
    with torch.inference_mode():
        zr = ref(input_ids=x).logits[:, :-1].float()
        zc = ckpt(input_ids=x).logits[:, :-1].float()
        lr, lc = zr.log_softmax(-1), zc.log_softmax(-1)
        pr, pc = lr.exp(), lc.exp()
        h_r, h_c = -(pr * lr).sum(-1), -(pc * lc).sum(-1)
        kl = (pr * (lr - lc)).sum(-1)
        tgt = x[:, 1:].unsqueeze(-1)
        lp_r, lp_c = lr.gather(-1, tgt), lc.gather(-1, tgt)
    return h_r, h_c, kl, lp_r, lp_c


def way_chunked(ref, ckpt, probe, chunk=256):
    import torch

    x = torch.as_tensor([list(i) for i in probe.ids], dtype=torch.long)
    out = []
    with torch.inference_mode():
        hr = ref.model(input_ids=x).last_hidden_state[:, :-1].reshape(-1, HIDDEN)
        hc = ckpt.model(input_ids=x).last_hidden_state[:, :-1].reshape(-1, HIDDEN)
        tgt = x[:, 1:].reshape(-1, 1)
        for s in range(0, hr.shape[0], chunk):
            lr = ref.lm_head(hr[s:s + chunk]).float().log_softmax(-1)
            lc = ckpt.lm_head(hc[s:s + chunk]).float().log_softmax(-1)
            pr, pc = lr.exp(), lc.exp()
            out.append((-(pr * lr).sum(-1), -(pc * lc).sum(-1), (pr * (lr - lc)).sum(-1),
                        lr.gather(-1, tgt[s:s + chunk]), lc.gather(-1, tgt[s:s + chunk])))
    return out


def way_score(ref, ckpt, probe, chunk=None):
    from aclarena.probes.teacher_forcing import score

    return score(ckpt, ref, probe, batch_size=BATCH, chunk_size=chunk, topk=5)


WAYS = {"bare": way_bare, "naive": way_naive, "chunked": way_chunked, "score": way_score}


def part_overhead(reps: int) -> dict[str, float]:
    import numpy as np

    ref, ckpt = build_models()
    probe = make_probe()
    # agreement first: the fast way must give the naive way's numbers
    got = way_score(ref, ckpt, probe)
    h_r, h_c, kl, _, lp_c = way_naive(ref, ckpt, probe)
    err = {"kl": float(np.abs(got.kl - kl.reshape(-1).numpy()).max()),
           "entropy": float(np.abs(got.entropy - h_c.reshape(-1).numpy()).max()),
           "logprob": float(np.abs(got.logprob - lp_c.reshape(-1).numpy()).max())}
    del h_r, h_c, kl, lp_c
    gc.collect()
    times: dict[str, list[float]] = {k: [] for k in WAYS}
    cpu: dict[str, list[float]] = {k: [] for k in WAYS}
    for _ in range(reps):  # interleaved, so that load from other processes hits every way alike
        for name, fn in WAYS.items():
            gc.collect()
            t, c = time.perf_counter(), time.process_time()
            fn(ref, ckpt, probe)
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    best = {k: min(v) for k, v in times.items()}
    best_cpu = {k: min(v) for k, v in cpu.items()}
    print(f"\n== scoring overhead: hidden {HIDDEN}, {LAYERS} layers, vocabulary {VOCAB:,}, batch {BATCH} x {SEQ} "
          f"tokens, {os.cpu_count()} CPUs, torch threads {__import__('torch').get_num_threads()}, best of {reps}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("  (wall time, then CPU time of this process: the CPU ratio is the steadier one on a shared machine)")
    for k in WAYS:
        print(f"  {k:8s} wall {best[k]:7.2f} s = {best[k] / best['bare']:.2f}x bare   "
              f"cpu {best_cpu[k]:7.2f} s = {best_cpu[k] / best_cpu['bare']:.2f}x bare   "
              f"(wall of each run: {', '.join(f'{t:.1f}' for t in times[k])})")
    print(f"  max |score - naive|: KL {err['kl']:.2e}, entropy {err['entropy']:.2e}, log-prob {err['logprob']:.2e}")
    return {f"time_{k}": v for k, v in best.items()} | {f"ratio_{k}": best[k] / best["bare"] for k in WAYS} | \
        {f"cpu_ratio_{k}": best_cpu[k] / best_cpu["bare"] for k in WAYS}


# --- memory: one way per fresh process ---------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_memory_child(way: str) -> None:
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    ref, ckpt = build_models()
    probe = make_probe()
    gc.collect()
    base = _rss()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.001)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    WAYS[way](ref, ckpt, probe)
    stop.set()
    th.join()
    peak[0] = max(peak[0], _rss())
    print(json.dumps({"way": way, "extra_bytes": peak[0] - base, "baseline_bytes": base}))


def part_memory() -> dict[str, float]:
    extra = {}
    for way in ("bare", "naive", "chunked", "score"):
        out = subprocess.run([sys.executable, __file__, "--memory-child", way], capture_output=True, text=True,
                             cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=1800)
        if out.returncode != 0:
            print(out.stderr[-2000:])
            raise SystemExit(f"memory child {way} failed")
        extra[way] = json.loads(out.stdout.strip().splitlines()[-1])["extra_bytes"]
    print("\n== peak memory above the two models' weights (fresh process each, RSS sampled every 1 ms)")
    for way, b in extra.items():
        print(f"  {way:8s} {b / 2**20:8.0f} MiB   fraction of naive {b / extra['naive']:.3f}")
    print(f"  score / naive = 1/{extra['naive'] / max(extra['score'], 1):.1f}")
    return {f"mem_{k}": v for k, v in extra.items()}


# --- dashboard latency ------------------------------------------------------------------------------


def build_big_store(run: Path, n_seq: int = 256, seq_len: int = 1024, n_ckpt: int = 12, vocab: int = VOCAB) -> None:
    import numpy as np

    from aclarena.diagnostics.token_drift import summarize_drift
    from aclarena.probes.probe_set import ProbeSet, write_probe_set
    from aclarena.probes.teacher_forcing import ReferenceStats, TokenScores
    from aclarena.store import Json, ResultsStore
    from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest
    from aclarena.store.token_keys import reference_key, scores_key, summary_key

    rng = np.random.default_rng(0)
    m = Manifest(name="big")
    m.add(CheckpointSpec("ref", "checkpoints/ref", kind="stage"))
    names = [f"stage-{i:02d}" for i in range(n_ckpt)]
    for i, n in enumerate(names):
        m.add(CheckpointSpec(n, f"checkpoints/{n}", parent="ref" if i == 0 else names[i - 1]))
    write_manifest(m, run)
    prompt = 64
    ids = [rng.integers(0, vocab, seq_len).astype(np.int32) for _ in range(n_seq)]
    scored = [np.r_[np.zeros(prompt, bool), np.ones(seq_len - prompt, bool)] for _ in range(n_seq)]
    words = [f"w{i % 5000}" for i in range(vocab)]
    probe = ProbeSet(name="ref", reference="ref", ids=ids, scored=scored,
                     texts=["".join(words[i] + " " for i in x[:50]) for x in ids],
                     token_text=[[words[i] + " " for i in x] for x in ids],
                     sources=[{"prompt": f"prompt {i}"} for i in range(n_seq)], vocab=words)
    store = ResultsStore(run)
    write_probe_set(store, probe)
    p = probe.n_scored
    offsets = probe.scored_offsets()
    h = (rng.gamma(0.3, 1.0, p)).astype(np.float32)
    ref = ReferenceStats(position=np.tile(np.arange(prompt, seq_len), n_seq).astype(np.int32),
                         token=np.concatenate([x[prompt:] for x in ids]), entropy=h,
                         logprob=-rng.gamma(0.3, 1.0, p).astype(np.float32),
                         top1=rng.integers(0, vocab, p).astype(np.int32),
                         topk_ids=rng.integers(0, vocab, (p, 5)).astype(np.int32),
                         topk_logprobs=-rng.gamma(1.0, 1.0, (p, 5)).astype(np.float32),
                         status=np.zeros(p, np.uint8))
    items = [(reference_key("ref"), ref.to_store(offsets), "token-reference", "0.1.0", {"reference": "ref"})]
    for i, n in enumerate(names):
        kl = (h * rng.gamma(1.0, 0.01 * (i + 1), p)).astype(np.float32)
        sc = TokenScores(offsets=offsets, entropy=h, logprob=ref.logprob - kl, top1=ref.top1,
                         topk_ids=ref.topk_ids, topk_logprobs=ref.topk_logprobs, kl=kl, js=kl / 4,
                         status=np.zeros(p, np.uint8), ref=ref)
        s = summarize_drift(h, ref.logprob, ref.top1, kl, kl / 4, sc.logprob, sc.top1)
        items.append((scores_key("ref", n), sc.to_store(), "token-scores", "0.1.0", {"scores_id": str(i)}))
        items.append((summary_key("ref", n), {"summary": Json(s.to_dict())}, "token-summary", "0.1.0", {}))
    store.write_many(items)


def part_dashboard(calls: int) -> dict[str, float]:
    import plotly

    from aclarena.dashboard.pages import tokens as page

    def serialise(x: object) -> int:
        return len(json.dumps(x, cls=plotly.utils.PlotlyJSONEncoder))

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        t = time.perf_counter()
        build_big_store(run)
        size = (run / "results.h5").stat().st_size
        print(f"\n== Tokens page callbacks: store of 256 sequences x 1,024 tokens x 12 checkpoints "
              f"({size / 2**20:.0f} MiB, built in {time.perf_counter() - t:.0f} s), {calls} calls each")
        page.on_view(run, "ref", 0, "stage-00", "drift")  # the first call reads the vocabulary once
        results = {}
        for name, fn in (
            ("probe (choices + summary table)", lambda i: page.on_probe(run, "ref")),
            ("text (one sequence, coloured)", lambda i: page.on_view(run, "ref", (i * 37) % 256,
                                                                    f"stage-{i % 12:02d}", "drift")),
            ("scatter + concentration", lambda i: page.on_checkpoint(run, "ref", f"stage-{i % 12:02d}")),
        ):
            times = []
            for i in range(calls):
                t = time.perf_counter()
                out = fn(i)
                nbytes = serialise(out)
                times.append(time.perf_counter() - t)
            med = statistics.median(times)
            results[name] = med
            print(f"  {name:34s} median {med * 1000:6.1f} ms   max {max(times) * 1000:6.1f} ms   "
                  f"(response {nbytes / 1024:.0f} KiB; target 200 ms: {med * 1000 / 200:.2f} of it)")
    return {f"dash_{k}": v for k, v in results.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="all", choices=("all", "overhead", "memory", "dashboard"))
    ap.add_argument("--reps", type=int, default=2, help="repetitions of each way for timing (best is kept)")
    ap.add_argument("--calls", type=int, default=25, help="calls per dashboard callback")
    ap.add_argument("--memory-child", metavar="WAY", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if args.memory_child:
        measure_memory_child(args.memory_child)
        return
    if args.part in ("all", "overhead"):
        part_overhead(args.reps)
    if args.part in ("all", "memory"):
        part_memory()
    if args.part in ("all", "dashboard"):
        part_dashboard(args.calls)


if __name__ == "__main__":
    main()
