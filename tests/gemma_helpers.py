"""A Gemma-style chat model built from a config: the template ends a turn with ``<end_of_turn>``, which is
not the end-of-sequence token (``<eos>``, the only one the config and the generation config name), as in
Gemma 3. The model's output head is edited so that its greedy reply is ``<end_of_turn>`` at every
position: a generation path that does not stop at the template's end of turn runs on to its budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

GEMMA_TOKENS = ["<start_of_turn>", "<end_of_turn>", "<eos>"]
GEMMA_TEMPLATE = (
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


def gemma_style_tokenizer() -> Any:
    from fixtures import make_tokenizer

    tok = make_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": GEMMA_TOKENS})
    tok.eos_token = "<eos>"
    tok.chat_template = GEMMA_TEMPLATE
    return tok


def end_of_turn_model(tok: Any, *, seed: int = 0) -> Any:
    """A tiny Llama whose config and generation config name ``<eos>`` only, and whose greedy reply is
    ``<end_of_turn>`` at every step: dimension 0 of the residual stream is a constant 50 (embeddings set,
    attention and MLP outputs kept off it), the final norm passes only that dimension, and the untied
    head scores it +1 for ``<end_of_turn>`` and -1 for every other token."""
    import torch

    from aclarena.models.tiny import build_model, tiny_config

    cfg = tiny_config(tok, arch="llama", tie_word_embeddings=False)
    cfg.eos_token_id = [tok.convert_tokens_to_ids("<eos>")]
    model = build_model(cfg, seed=seed)
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    with torch.no_grad():
        m = model.model
        m.embed_tokens.weight[:, 0] = 50.0
        for layer in m.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        m.norm.weight.zero_()
        m.norm.weight[0] = 1.0
        model.lm_head.weight[:, 0] = -1.0
        model.lm_head.weight[eot, 0] = 1.0
    model.eval()
    return model


def gemma_style_run(root: Path) -> tuple[Path, Any]:
    """A run folder with one checkpoint ``base`` of :func:`end_of_turn_model`."""
    from aclarena.models.tiny import save_checkpoint
    from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest

    tok = gemma_style_tokenizer()
    save_checkpoint(end_of_turn_model(tok), tok, root / "checkpoints" / "base")
    manifest = Manifest(name="gemma-style", base="base")
    manifest.add(CheckpointSpec("base", "checkpoints/base", kind="base"))
    write_manifest(manifest, root)
    return root, tok
