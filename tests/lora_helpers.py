"""LoRA adapters for the fixture run, and its checkpoints densified in float64 (issue 45's repair and merge tests)."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from aclarena.store import load_manifest


def add_adapters(run):
    """lora-a and lora-b (r = 8) on seq-search, lora-base on base, in the manifest."""
    from fixtures import make_lora
    from transformers import AutoModelForCausalLM

    from aclarena.store.manifest import CheckpointSpec, write_manifest

    m = load_manifest(run)
    for name, on, seed in (("lora-a", "seq-search", 21), ("lora-b", "seq-search", 22), ("lora-base", "base", 23)):
        model = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / on, dtype=torch.float32)
        make_lora(model, run / "checkpoints" / name, seed=seed, r=8)
        m.add(CheckpointSpec(name, f"checkpoints/{name}", kind="stage", domain="ecom", phase="sft", parent=on, on=on))
    write_manifest(m, run)
    return run


def dense64(run, name):
    """A checkpoint's weights in float64: a full folder's, or an adapter's model plus its deltas."""
    from aclarena.models.checkpoint import inspect
    from aclarena.models.tensors import read_lora

    m = load_manifest(run)
    spec = m.resolve(name)
    if spec.on is None:
        return {k: v.double() for k, v in load_file(str(run / spec.path / "model.safetensors")).items()}
    out = dense64(run, spec.on)
    for target, lo in read_lora(inspect(spec, m, run)).items():
        out[target] = out[target] + lo.dense()
    return out


def snapshot(run):
    return (sorted((p.relative_to(run).as_posix(), p.stat().st_size) for p in run.rglob("*") if p.is_file()),
            (run / "aclarena.toml").read_text())
