"""When an adapter's base_model_name_or_path contradicts the model it is applied on (issue 15), and
when that cannot be told (no verdict rather than a false refusal)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from aclarena.models.adapter_files import adapter_base_mismatch


def _model(folder: Path, tensors: dict[str, list[int]], fill: int = 0) -> Path:
    """A folder with config.json and a float32 model.safetensors of ``tensors`` (name -> shape)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    header, at = {}, 0
    for name, shape in tensors.items():
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes([fill]) * at)
    return folder


SHAPES = {"a.weight": [64, 64], "b.weight": [64]}


def _cfg(named: str | None) -> dict:
    return {"r": 4, "base_model_name_or_path": named}


def test_other_weights_of_the_same_shapes_are_another_base(tmp_path):
    base = _model(tmp_path / "base", SHAPES, fill=0)
    other = _model(tmp_path / "other", SHAPES, fill=1)
    why = adapter_base_mismatch(_cfg(str(other)), base)
    assert why is not None and str(other) in why and "weights differ" in why


def test_other_shapes_are_another_base(tmp_path):
    base = _model(tmp_path / "base", SHAPES)
    other = _model(tmp_path / "other", {"a.weight": [64, 32], "b.weight": [64]})
    assert adapter_base_mismatch(_cfg(str(other)), base) is not None


@pytest.mark.parametrize("case", ["same folder", "a copy", "extra tied head", "relative path", "moved away",
                                  "empty", "hub vs local", "no base known"])
def test_no_verdict_where_it_cannot_be_told(tmp_path, monkeypatch, case):
    base = _model(tmp_path / "base", SHAPES, fill=3)
    named: str | None = str(base)
    on: object = base
    if case == "a copy":
        named = str(_model(tmp_path / "copy", SHAPES, fill=3))
    elif case == "extra tied head":  # the same model saved with its tied output head written out
        named = str(_model(tmp_path / "untied", {**SHAPES, "lm_head.weight": [64, 64]}, fill=1))
    elif case == "relative path":
        _model(tmp_path / "rel", SHAPES, fill=1)
        monkeypatch.chdir(tmp_path)
        named = "rel"
    elif case == "moved away":
        named = str(tmp_path / "gone")
    elif case == "empty":
        named = ""
    elif case == "hub vs local":
        named = "Qwen/Qwen3-8B-Base"
    elif case == "no base known":
        named, on = str(_model(tmp_path / "other", SHAPES, fill=1)), None
    assert adapter_base_mismatch(_cfg(named), on) is None


def test_hub_ids(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert adapter_base_mismatch(_cfg("Qwen/Qwen3-8B-Base"), "Qwen/Qwen3-8B-Base") is None
    assert "not Qwen/Qwen3-8B" in adapter_base_mismatch(_cfg("Qwen/Qwen3-8B-Base"), "Qwen/Qwen3-8B")
