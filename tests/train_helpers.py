"""Helpers of the training tests: small curriculum configs, subprocess runs, weight comparison."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "examples" / "tiny.toml"


def load_benchmark(name: str) -> Any:
    """The module ``benchmarks/<name>.py`` (benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_bench", REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

BASE = """\
[run]
name = "small"
seed = 0

[base]
preset = "tiny"
chat_examples = 40
mc_examples = 40
tool_examples = 20
arithmetic_examples = 10

[base.trl]
max_steps = 4
per_device_train_batch_size = 8
save_steps = 2
logging_steps = 1

[defaults.sft]
max_steps = 3
per_device_train_batch_size = 4
save_steps = 1
logging_steps = 1

[defaults.rl]
max_steps = {rl_steps}
per_device_train_batch_size = 4
num_generations = 2
save_steps = 1
learning_rate = 1e-4
entropy_coef = 0.01
"""

STAGE = """
[[stages]]
domain = "{domain}"
phases = ["sft", "rl"]
[stages.sft]
n = 8
[stages.rl]
n = 4
max_new_tokens = 16
max_turns = 2
"""


def small_config(domains: tuple[str, ...] = ("math",), *, rl_steps: int = 2, oracles: tuple[str, ...] = ()) -> str:
    """A curriculum of toy-size stages (SFT then RL each) with the tiny base."""
    text = BASE.format(rl_steps=rl_steps)
    for d in domains:
        stage = STAGE.format(domain=d)
        if d in ("math", "if"):
            stage = stage.replace("max_turns = 2\n", "")
        text += stage
    if oracles:
        text += "\n[oracles]\ndomains = [" + ", ".join(f'"{d}"' for d in oracles) + "]\n"
    return text


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def train_cmd(config: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "aclarena", "train", "--config", str(config), "--out", str(out), *extra]


def run_train(config: Path, out: Path, *extra: str, timeout: float = 600, **kwargs: Any) -> subprocess.CompletedProcess:
    return subprocess.run(train_cmd(config, out, *extra), cwd=REPO, env=cli_env(), capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def changed(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether any tensor differs (same names required)."""
    import torch

    assert set(a) == set(b)
    return any(not torch.equal(a[k], b[k]) for k in a)


def marker_mtimes(out: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "checkpoints").glob("*/.aclarena-phase.json")}
