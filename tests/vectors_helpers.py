"""Helpers for the task-vector and displacement tests: synthetic checkpoints and naive references."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

TINY_CONFIG = {"architectures": ["TinyForCausalLM"], "model_type": "tiny", "tie_word_embeddings": True}


def write_checkpoint(folder: Path, tensors: Mapping[str, torch.Tensor], *, config: dict[str, Any] | None = None,
                     shards: int = 1) -> Path:
    """An HF-like folder (config.json + safetensors, optionally sharded with an index) without transformers."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or TINY_CONFIG))
    names = list(tensors)
    if shards <= 1:
        save_file({n: tensors[n].contiguous() for n in names}, str(folder / "model.safetensors"))
        return folder
    weight_map = {}
    per = -(-len(names) // shards)
    for s in range(shards):
        part = names[s * per:(s + 1) * per]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n].contiguous() for n in part}, str(folder / fname))
        weight_map.update({n: fname for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def write_run(root: Path, checkpoints: Mapping[str, Mapping[str, torch.Tensor]], specs: Mapping[str, dict[str, Any]],
              *, base: str = "base", shards: int = 1, configs: Mapping[str, dict[str, Any]] | None = None) -> Path:
    """A run folder with one synthetic checkpoint per entry and a manifest built from ``specs``."""
    from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest

    root.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(name="synthetic", base=base)
    for name, tensors in checkpoints.items():
        write_checkpoint(root / "checkpoints" / name, tensors, shards=shards,
                         config=(configs or {}).get(name))
        manifest.checkpoints[name] = CheckpointSpec(name, f"checkpoints/{name}", **specs.get(name, {}))
    manifest.validate()
    write_manifest(manifest, root)
    return root


def random_model(seed: int, *, dtype: torch.dtype = torch.float32, layers: int = 2, width: int = 16,
                 vocab: int = 40) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {"model.embed_tokens.weight": torch.randn(vocab, width, generator=g)}
    for i in range(layers):
        out[f"model.layers.{i}.self_attn.q_proj.weight"] = torch.randn(width, width, generator=g)
        out[f"model.layers.{i}.mlp.up_proj.weight"] = torch.randn(2 * width, width, generator=g)
        out[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(width) + 0.1 * torch.randn(width, generator=g)
    out["model.norm.weight"] = torch.ones(width)
    return {k: v.to(dtype) for k, v in out.items()}


def add(model: Mapping[str, torch.Tensor], delta: Mapping[str, torch.Tensor], scale: float = 1.0) -> dict[str, torch.Tensor]:
    return {k: (v.double() + scale * delta[k].double()).to(v.dtype) if k in delta else v.clone()
            for k, v in model.items()}


def noise_like(model: Mapping[str, torch.Tensor], seed: int, scale: float) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: scale * torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in model.items()}


def flat(sd: Mapping[str, torch.Tensor], names: list[str] | None = None) -> torch.Tensor:
    """All tensors of a state dict flattened in float64, in the order of ``names`` (sorted by default)."""
    names = sorted(sd) if names is None else names
    return torch.cat([sd[n].double().reshape(-1) for n in names])


def cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def load_sd(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of an HF folder (single file or sharded)."""
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def assert_close(got: float, want: float, rtol: float = 1e-9, atol: float = 1e-12) -> None:
    assert np.isclose(got, want, rtol=rtol, atol=atol), (got, want)


def make_long_chain_run(root: Path, n_stages: int = 40) -> Path:
    """A synthetic run at real-run size: ``n_stages`` chain updates alternating SFT (large) and RL
    (small) over four recurring domains, update 7 a zero update, and an SFT and an RL oracle per
    domain; ``vectors`` and ``displacement`` run on it through the command line (in-process)."""
    import contextlib
    import io

    from aclarena.cli import main

    base = random_model(0)
    ckpts: dict[str, dict[str, torch.Tensor]] = {"base": base}
    specs: dict[str, dict[str, Any]] = {"base": {"kind": "base"}}
    domains = ["math", "search", "ecom", "if"]
    prev, prev_name = base, "base"
    for i in range(n_stages):
        dom, phase = domains[(i // 2) % 4], "sft" if i % 2 == 0 else "rl"
        name = f"s{i:02d}-{dom}-{phase}"
        model = prev if i == 7 else add(prev, noise_like(prev, 100 + i, 0.05 if phase == "sft" else 0.01))
        ckpts[name] = model
        specs[name] = {"kind": "stage", "domain": dom, "phase": phase, "parent": prev_name}
        prev, prev_name = model, name
    for j, dom in enumerate(domains):
        for phase in ("sft", "rl"):
            name = f"oracle-{dom}-{phase}"
            ckpts[name] = add(base, noise_like(base, 500 + 2 * j + (phase == "rl"), 0.05 if phase == "sft" else 0.005))
            specs[name] = {"kind": "oracle", "domain": dom, "phase": phase, "parent": "base"}
    write_run(root, ckpts, specs)
    for verb in ("vectors", "displacement"):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main([verb, "--run", str(root), "--json"])
        assert code == 0, err.getvalue()
    return root
