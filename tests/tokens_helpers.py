"""Builders for the token-drift tests: prompt and trace files, runs with hand-made checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

PROMPTS = [
    {"messages": [{"role": "user", "content": "what is 3 + 4?"}]},
    {"messages": [{"role": "system", "content": "answer with a tool call"},
                  {"role": "user", "content": "search the capital city of the river"}],
     "tools": [{"type": "function", "function": {"name": "search", "description": "web search",
                                                  "parameters": {"type": "object",
                                                                 "properties": {"query": {"type": "string"}}}}}]},
    {"prompt": "the total of the order is"},
    {"messages": [{"role": "user", "content": "please cancel my order and confirm"}]},
    {"messages": [{"role": "user", "content": "which tower is the first?"}]},
]

TRACE = {
    "messages": [
        {"role": "system", "content": "you are a shop assistant"},
        {"role": "user", "content": "cancel order 12"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "cancel", "arguments": {"order": "12"}}}]},
        {"role": "tool", "content": "refund policy: done"},
        {"role": "assistant", "content": "the order is cancelled"},
        {"role": "user", "content": "thank you"},
        {"role": "assistant", "content": "done"},
    ],
    "tools": [{"type": "function", "function": {"name": "cancel", "description": "cancel an order",
                                                 "parameters": {"type": "object",
                                                                "properties": {"order": {"type": "string"}}}}}],
}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def add_checkpoint(run: Path, name: str, model: Any, tokenizer: Any, *, parent: str | None, kind: str = "stage",
                   domain: str | None = None) -> None:
    """Save ``model`` under the run and add it to the manifest."""
    from aclarena.models.tiny import save_checkpoint
    from aclarena.store.manifest import CheckpointSpec, load_manifest, write_manifest

    save_checkpoint(model, tokenizer, run / "checkpoints" / name)
    m = load_manifest(run)
    m.add(CheckpointSpec(name, f"checkpoints/{name}", kind=kind, parent=parent, domain=domain))
    write_manifest(m, run)


def copy_checkpoint(run: Path, src: str, name: str, *, parent: str) -> None:
    from aclarena.store.manifest import CheckpointSpec, load_manifest, write_manifest

    shutil.copytree(run / "checkpoints" / src, run / "checkpoints" / name)
    m = load_manifest(run)
    m.add(CheckpointSpec(name, f"checkpoints/{name}", kind="stage", parent=parent))
    write_manifest(m, run)


def peaked_untied_model(tokenizer: Any, *, seed: int = 0, scale: float = 40.0, max_positions: int = 1024) -> Any:
    """A tiny Qwen3 with its own output head, scaled so that each position has a clear top token."""
    import torch

    from aclarena.models.tiny import build_model, tiny_config

    model = build_model(tiny_config(tokenizer, tie_word_embeddings=False, max_positions=max_positions), seed=seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def file_state(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def scored_rows(probe: Any) -> list[np.ndarray]:
    return [np.asarray(p)[np.asarray(m, bool)] for p, m in zip(probe.ids, probe.scored, strict=True)]


def noisy_head(model: Any, scale: float, seed: int) -> Any:
    """A copy of ``model`` with Gaussian noise on its (untied) output head only."""
    import copy

    import torch

    new = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        new.lm_head.weight.add_(torch.randn(new.lm_head.weight.shape, generator=g) * scale)
    return new


def add_token_checkpoints(root: Path, tokenizer: Any, *, name: str) -> None:
    """A manifest in ``root`` with a peaked reference ``seq-math`` and two later stages whose output
    heads drifted (``seq-search``, ``seq-ecom``)."""
    from aclarena.store.manifest import Manifest, write_manifest

    root.mkdir(parents=True, exist_ok=True)
    write_manifest(Manifest(name=name), root)
    ref = peaked_untied_model(tokenizer, seed=4, scale=150.0)
    add_checkpoint(root, "seq-math", ref, tokenizer, parent=None, kind="stage", domain="math")
    stage_a = noisy_head(ref, 0.05, seed=5)
    add_checkpoint(root, "seq-search", stage_a, tokenizer, parent="seq-math", domain="search")
    add_checkpoint(root, "seq-ecom", noisy_head(stage_a, 0.1, seed=6), tokenizer, parent="seq-search", domain="ecom")


def make_token_run(root: Path, tokenizer: Any, *, max_new_tokens: int = 24) -> Path:
    """A run whose token scores look like the study's: a peaked reference and two later stages
    whose output heads drifted, so KL concentrates where the reference was unsure.

    Runs ``probe`` and ``tokens`` through the command line (in-process).
    """
    import contextlib
    import io

    from aclarena.cli import main

    add_token_checkpoints(root, tokenizer, name="tokens-demo")
    prompts = write_jsonl(root / "prompts.jsonl", PROMPTS)
    for argv in (["probe", "--run", str(root), "--ref", "seq-math", "--prompts", str(prompts),
                  "--max-new-tokens", str(max_new_tokens), "--json"],
                 ["tokens", "--run", str(root), "--ref", "seq-math", "--json"]):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
        assert code == 0, err.getvalue()
    return root
