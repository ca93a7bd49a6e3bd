"""Builders for the test fixtures: a local tokenizer, tiny Qwen3/Llama models, a run folder.

Nothing is downloaded. ``make_run`` lays out a run like one a user trained elsewhere:

    base ─► seq-math (rl) ─► seq-search (sft) ─► lora-ecom (LoRA on seq-search)
      └───► oracle-math
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

WORDS = ["the", "a", "of", "to", "and", "is", "in", "what", "which", "who", "where", "when", "how", "many", "tool", "call", "search", "order", "user", "cancel", "return", "exchange", "product", "price", "answer", "question", "city", "river", "tower", "capital", "population", "year", "name", "color", "number", "first", "second", "third", "total", "sum", "minus", "plus", "times", "divided", "result", "step", "think", "check", "confirm", "yes", "no", "please", "thank", "you", "done", "error", "address", "item", "shipping", "refund", "policy", "json", "list", "bullet", "word", "sentence", "start", "end"]


def corpus(n: int = 600, seed: int = 0) -> list[str]:
    """Generic local text with numbers, arithmetic and tool-call-looking snippets."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 20))]
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        out.append(" ".join(words) + f". {a} + {b} = {a + b}. " + '{"name": "search", "arguments": {"query": "x"}}')
    return out


def make_tokenizer(vocab_size: int = 512) -> Any:
    from aclarena.models.tiny import train_tokenizer

    return train_tokenizer(corpus(), vocab_size=vocab_size)


def perturb(model: Any, scale: float, seed: int, *, only: str | None = None) -> Any:
    """Return a deep copy of ``model`` with Gaussian noise of std ``scale`` added to its weights."""
    import copy

    import torch

    new = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in new.named_parameters():
            if only is not None and only not in name:
                continue
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return new


def make_run(root: Path, tokenizer: Any, *, arch: str = "qwen3", lora: bool = True) -> Path:
    """Write a run folder with a base, a few perturbed descendants, a LoRA adapter and a manifest."""
    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
    from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest

    root.mkdir(parents=True, exist_ok=True)
    base = build_model(tiny_config(tokenizer, arch=arch), seed=0)
    seq_math = perturb(base, 0.01, seed=1)
    seq_search = perturb(seq_math, 0.02, seed=2)
    oracle_math = perturb(base, 0.01, seed=3)
    ck = root / "checkpoints"
    for name, model in (("base", base), ("seq-math", seq_math), ("seq-search", seq_search), ("oracle-math", oracle_math)):
        save_checkpoint(model, tokenizer, ck / name)
    manifest = Manifest(name="fixture", base="base")
    manifest.add(CheckpointSpec("base", "checkpoints/base", kind="base"))
    manifest.add(CheckpointSpec("seq-math", "checkpoints/seq-math", kind="stage", domain="math", phase="rl", parent="base"))
    manifest.add(CheckpointSpec("seq-search", "checkpoints/seq-search", kind="stage", domain="search", phase="sft",
                                parent="seq-math"))
    manifest.add(CheckpointSpec("oracle-math", "checkpoints/oracle-math", kind="oracle", domain="math", parent="base"))
    if lora:
        make_lora(seq_search, ck / "lora-ecom", seed=4)
        manifest.add(CheckpointSpec("lora-ecom", "checkpoints/lora-ecom", kind="consolidated", domain="ecom",
                                    phase="rl", parent="seq-search", on="seq-search"))
    write_manifest(manifest, root)
    return root


def make_lora(model: Any, folder: Path, *, seed: int, r: int = 4) -> Path:
    """Save a LoRA adapter for ``model`` with non-zero random A and B (so it changes outputs)."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    peft_model = get_peft_model(copy.deepcopy(model),
                                LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(folder, safe_serialization=True)
    return folder


def assert_equal_data(got: Any, want: Any) -> None:
    """Compare what the store read back with what was written (Ragged, Json, Table, dicts, arrays)."""
    from aclarena.store import Json, Ragged, Table

    assert set(got) == set(want)
    for k, w in want.items():
        g = got[k]
        if isinstance(w, Ragged):
            np.testing.assert_array_equal(g.values, w.values)
            np.testing.assert_array_equal(g.offsets, w.offsets)
        elif isinstance(w, Json):
            assert g == w.value
        elif isinstance(w, Table):
            assert list(g.columns) == list(w.columns)
            for c in w.columns:
                assert list(np.asarray(g.columns[c]).tolist()) == list(w.columns[c])
        elif isinstance(w, dict):
            assert_equal_data(g, w)
        elif isinstance(w, np.ndarray):
            np.testing.assert_array_equal(g, w)
        else:
            assert g == w
