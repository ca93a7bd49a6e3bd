"""The prompt box's size check, read from config.json / safetensors headers without loading a model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from safetensors import safe_open

from aclarena.analysis.prompt import MAX_PARAMETERS, PromptRefused, model_size, score_prompt
from aclarena.models.config_checks import config_parameters
from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest

MINI = Path(__file__).resolve().parents[2] / "aclarena" / "models" / "mini_base"
QWEN3_8B = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
            "tie_word_embeddings": False}


def test_config_parameters_matches_real_counts():
    with safe_open(str(MINI / "model.safetensors"), "pt") as f:
        real = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 (safe_open is not iterable)
    est = config_parameters(json.loads((MINI / "config.json").read_text()))
    assert abs(est - real) / real < 1e-3  # only Qwen3's q/k norms (2 x head_dim per layer) are left out
    # Qwen3-8B's model card: 8.2B parameters (8.19B)
    assert config_parameters(QWEN3_8B) == pytest.approx(8.19e9, rel=0.01)
    assert config_parameters({"model_type": "x"}) is None


def _run(tmp_path: Path, folders: dict[str, dict | None]) -> Path:
    m = Manifest(name="t")
    for name, cfg in folders.items():
        d = tmp_path / "checkpoints" / name
        d.mkdir(parents=True)
        if cfg is not None:
            (d / "config.json").write_text(json.dumps(cfg))
        m.add(CheckpointSpec(name, f"checkpoints/{name}", kind="stage"))
    write_manifest(m, tmp_path)
    return tmp_path


def test_model_size_refuses_large_and_weightless_checkpoints_without_loading(tmp_path):
    from aclarena.store.manifest import load_manifest

    small = json.loads((MINI / "config.json").read_text())
    run = _run(tmp_path, {"big": QWEN3_8B, "empty": small})
    m = load_manifest(run)
    with pytest.raises(PromptRefused, match=r"^big has about 8,19\dM parameters, above the 500M") as e:
        model_size("big", m, run)
    assert "\n" not in str(e.value)
    with pytest.raises(PromptRefused, match=r"^empty cannot be loaded: .*holds no weights"):
        model_size("empty", m, run)
    with pytest.raises(PromptRefused, match="type a prompt"):
        score_prompt(run, "   ", "empty", "big")
    assert MAX_PARAMETERS == 500_000_000
