"""Token scoring and the Tokens page: ratios measured side by side in one run (issue 3 targets).

    python benchmarks/token_scoring.py            # all three parts (~10 min on 2 CPU cores, ~9 GB peak)
    python benchmarks/token_scoring.py --part overhead --reps 5 --ways score,score_torch

* overhead: a Qwen3-shaped model (hidden 1,024, 2 layers, vocabulary 151,936), batch
  2 × 1,024 tokens, reference and checkpoint. Time of aclarena's ``score`` (both models'
  entropies, log-probs, top-5, exact KL and JS) over the time of the two bare forward
  passes (logits only). Also the naive way (full float32 logits, log_softmax, then the
  sums), ``score`` with the fused CPU kernel off (``score_torch``, ``ACLARENA_FUSED_CPU=0``)
  and a plain chunked loop. Target (issue 18): score ≤ 1.15 × bare in the median of
  interleaved repetitions, every statistic within 1e-5 of the float64 reference (relative
  where |value| > 1).
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

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

    from aclarena.results.probes import ProbeSet

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


def way_score_torch(ref, ckpt, probe, chunk=None):
    """``score`` with the fused CPU kernel switched off (torch operators only): the way before issue 18."""
    os.environ["ACLARENA_FUSED_CPU"] = "0"
    try:
        return way_score(ref, ckpt, probe, chunk)
    finally:
        del os.environ["ACLARENA_FUSED_CPU"]


WAYS = {"bare": way_bare, "naive": way_naive, "chunked": way_chunked, "score": way_score,
        "score_torch": way_score_torch}


def reference64(ref, ckpt, probe, rows):
    """The float64 reference at the flat scored positions ``rows``: both models' final hidden
    states and output heads in float64, full log-softmax."""
    import torch

    x = torch.as_tensor([list(i) for i in probe.ids], dtype=torch.long)
    with torch.inference_mode():
        hr = ref.model(input_ids=x).last_hidden_state[:, :-1].reshape(-1, HIDDEN)[rows].double()
        hc = ckpt.model(input_ids=x).last_hidden_state[:, :-1].reshape(-1, HIDDEN)[rows].double()
        wr, wc = ref.lm_head.weight.double(), ckpt.lm_head.weight.double()
        tgt = x[:, 1:].reshape(-1, 1)[rows]
        parts = []
        for s in range(0, hr.shape[0], 128):
            lr = (hr[s:s + 128] @ wr.t()).log_softmax(-1)
            lc = (hc[s:s + 128] @ wc.t()).log_softmax(-1)
            pr, pc = lr.exp(), lc.exp()
            lm = ((pr + pc) / 2).log()
            parts.append((-(pc * lc).sum(-1), -(pr * lr).sum(-1), (pr * (lr - lc)).sum(-1),
                          0.5 * (pr * (lr - lm)).sum(-1) + 0.5 * (pc * (lc - lm)).sum(-1),
                          lc.gather(-1, tgt[s:s + 128])[:, 0], lr.gather(-1, tgt[s:s + 128])[:, 0]))
            del lr, lc, pr, pc, lm
    keys = ("entropy", "ref_entropy", "kl", "js", "logprob", "ref_logprob")
    return {key: torch.cat([p[i] for p in parts]).numpy() for i, key in enumerate(keys)}


def errors_vs_float64(got, want, rows) -> dict[str, float]:
    """Largest error of each statistic against the float64 reference: absolute, relative where |value| > 1."""
    import numpy as np

    have = {"entropy": got.entropy, "ref_entropy": got.ref.entropy, "kl": got.kl, "js": got.js,
            "logprob": got.logprob, "ref_logprob": got.ref.logprob}
    return {k: float(np.max(np.abs(have[k][rows].astype(np.float64) - w) / np.maximum(1.0, np.abs(w))))
            for k, w in want.items()}


def part_overhead(reps: int, ways: list[str], check_rows: int) -> dict[str, float]:
    import numpy as np
    import torch

    ref, ckpt = build_models()
    probe = make_probe()
    # agreement first: every scoring way against the float64 reference, at evenly spread positions
    rows = np.unique(np.linspace(0, BATCH * (SEQ - 1) - 1, min(check_rows, BATCH * (SEQ - 1))).astype(np.int64))
    want = reference64(ref, ckpt, probe, rows)
    errs = {w: errors_vs_float64(WAYS[w](ref, ckpt, probe), want, rows) for w in ways if w.startswith("score")}
    for w, e in errs.items():
        print(f"  {w}: max error vs float64 at {len(rows)} positions (relative where |value| > 1): "
              + ", ".join(f"{k} {v:.1e}" for k, v in e.items()), flush=True)
    del want
    gc.collect()
    times: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(reps):  # interleaved, so that load from other processes hits every way alike
        for name in ways:
            gc.collect()
            t, c = time.perf_counter(), time.process_time()
            WAYS[name](ref, ckpt, probe)
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
        print(f"  repetition {r + 1}/{reps} (load average {os.getloadavg()[0]:.1f}): "
              + ", ".join(f"{k} wall {times[k][-1]:.1f} s cpu {cpu[k][-1]:.1f} s" for k in ways), flush=True)
    # ratios per repetition: the ways of one repetition ran back to back, under about the same load
    wall_r = {k: [a / b for a, b in zip(times[k], times["bare"], strict=True)] for k in ways}
    cpu_r = {k: [a / b for a, b in zip(cpu[k], cpu["bare"], strict=True)] for k in ways}
    med = statistics.median
    print(f"\n== scoring overhead: hidden {HIDDEN}, {LAYERS} layers, vocabulary {VOCAB:,}, batch {BATCH} x {SEQ} "
          f"tokens, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, {reps} interleaved repetitions, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print("  ratio to the two bare forward passes of the same repetition, median [min-max]: wall time, then CPU "
          "time of this process (the steadier one on a shared machine)")
    for k in ways:
        print(f"  {k:11s} wall {med(times[k]):7.2f} s = {med(wall_r[k]):.3f}x [{min(wall_r[k]):.3f}-{max(wall_r[k]):.3f}]"
              f"   cpu {med(cpu[k]):7.2f} s = {med(cpu_r[k]):.3f}x [{min(cpu_r[k]):.3f}-{max(cpu_r[k]):.3f}]"
              f"   (wall of each run: {', '.join(f'{t:.1f}' for t in times[k])})")
    return {f"time_{k}": med(v) for k, v in times.items()} | {f"ratio_{k}": med(wall_r[k]) for k in ways} | \
        {f"cpu_ratio_{k}": med(cpu_r[k]) for k in ways} | {f"max_err_{w}": max(e.values()) for w, e in errs.items()}


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
    for way in ("bare", "naive", "chunked", "score", "score_torch"):
        out = subprocess.run([sys.executable, __file__, "--memory-child", way], capture_output=True, text=True,
                             cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=1800)
        if out.returncode != 0:
            print(out.stderr[-2000:])
            raise SystemExit(f"memory child {way} failed")
        extra[way] = json.loads(out.stdout.strip().splitlines()[-1])["extra_bytes"]
    print("\n== peak memory above the two models' weights (fresh process each, RSS sampled every 1 ms)")
    for way, b in extra.items():
        print(f"  {way:11s} {b / 2**20:8.0f} MiB   fraction of naive {b / extra['naive']:.3f}")
    print(f"  score / naive = 1/{extra['naive'] / max(extra['score'], 1):.1f}")
    return {f"mem_{k}": v for k, v in extra.items()}


# --- dashboard latency ------------------------------------------------------------------------------


def build_big_store(run: Path, n_seq: int = 256, seq_len: int = 1024, n_ckpt: int = 12, vocab: int = VOCAB) -> None:
    import numpy as np

    from aclarena.analysis.tokens import reference_payload, scores_payload
    from aclarena.diagnostics.token_drift import summarize_drift
    from aclarena.probes.teacher_forcing import ReferenceStats, TokenScores
    from aclarena.results.probes import ProbeSet, write_probe_set
    from aclarena.results.tokens import ScoresMeta, TokenSummaryData, write_token_results
    from aclarena.store import ResultsStore
    from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest

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
    items: list[Any] = [reference_payload("ref", "ref", ref, offsets, {})]
    for i, n in enumerate(names):
        kl = (h * rng.gamma(1.0, 0.01 * (i + 1), p)).astype(np.float32)
        sc = TokenScores(offsets=offsets, entropy=h, logprob=ref.logprob - kl, top1=ref.top1,
                         topk_ids=ref.topk_ids, topk_logprobs=ref.topk_logprobs, kl=kl, js=kl / 4,
                         status=np.zeros(p, np.uint8), ref=ref)
        s = summarize_drift(h, ref.logprob, ref.top1, kl, kl / 4, sc.logprob, sc.top1)
        meta = ScoresMeta(checkpoint=n, reference="ref", settings={}, scores_id=str(i))
        items.append(scores_payload("ref", sc, meta))
        items.append(TokenSummaryData(probe="ref", checkpoint=n, reference="ref", settings={"scores_id": str(i)},
                                      summary=s.to_dict()))
    write_token_results(store, items, overwrite=False)


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
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions of each way for timing (median kept)")
    ap.add_argument("--check-rows", type=int, default=2046,
                    help="scored positions checked against the float64 reference (default: all 2,046)")
    ap.add_argument("--ways", default=",".join(WAYS),
                    help=f"comma-separated ways to time, bare always included (default: all of {', '.join(WAYS)})")
    ap.add_argument("--calls", type=int, default=25, help="calls per dashboard callback")
    ap.add_argument("--memory-child", metavar="WAY", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if args.memory_child:
        measure_memory_child(args.memory_child)
        return
    if args.part in ("all", "overhead"):
        ways = ["bare"] + [w for w in args.ways.split(",") if w and w != "bare"]
        unknown = [w for w in ways if w not in WAYS]
        if unknown:
            raise SystemExit(f"unknown way {unknown[0]!r}; choose from {', '.join(WAYS)}")
        part_overhead(args.reps, ways, args.check_rows)
    if args.part in ("all", "memory"):
        part_memory()
    if args.part in ("all", "dashboard"):
        part_dashboard(args.calls)


if __name__ == "__main__":
    main()
