"""A checkpoint's ``config.json`` checked against its weights' shapes (before a loader fails on it deep inside
transformers), and the parameter count a config implies. No torch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError
from aclarena.models.files import FLOAT_DTYPES, TensorMeta, is_int

_EMBED_RE = re.compile(r"^(?P<prefix>(?:[\w.]*\.)?)(?:embed_tokens|wte|word_embeddings|embed_in)\.weight\Z")


_PROJ_RE = re.compile(r"\.(?P<layer>\d+)\.(?P<block>self_attn|mlp)\.(?P<proj>[qkvo]|gate|up|down)_proj\.weight\Z")


def config_tensor_mismatch(config: dict[str, Any], tensors: dict[str, TensorMeta]) -> str | None:
    """Where a ``config.json`` contradicts the weights' safetensors headers (shapes per tensor name, no weights
    read), naming the field and the tensor; None when they agree or nothing can be told.

    Checked for decoder-only transformers named as transformers saves them (Llama, Qwen, Mistral, Gemma, GPT-2,
    ...): ``vocab_size`` and ``hidden_size`` against the embedding, the output head when it is not tied,
    ``num_hidden_layers`` against the layer indices under the embedding's prefix, and ``num_attention_heads``,
    ``num_key_value_heads``, ``head_dim`` and ``intermediate_size`` against every layer's attention and gated-MLP
    projections. transformers would refuse these after printing a LOAD REPORT, fail on its own config
    validation, or (a layer the weights lack) initialise it at random. Quantized checkpoints, non-floating
    tensors, MoE experts and architectures named otherwise are left alone.
    """
    text = config.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else config
    if config.get("quantization_config") is not None or not tensors:
        return None
    embeds = sorted((n for n in tensors if _EMBED_RE.match(n) and tensors[n].dtype in FLOAT_DTYPES), key=len)
    if not embeds:
        return None
    embed = tensors[embeds[0]]
    prefix = _EMBED_RE.match(embed.name)["prefix"]  # type: ignore[index]
    return (_embedding_problem(cfg, tensors, embed, prefix) or _layers_problem(cfg, tensors, prefix)
            or _projection_problem(cfg, tensors, prefix))


def _size_field(cfg: dict[str, Any], *keys: str) -> tuple[str, int] | None:
    """The first of ``keys`` the config sets to a positive integer, with its value."""
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return k, v
    return None


def _embedding_problem(cfg: dict[str, Any], tensors: dict[str, TensorMeta], embed: TensorMeta, prefix: str
                       ) -> str | None:
    vocab, hidden = _size_field(cfg, "vocab_size"), _size_field(cfg, "hidden_size", "n_embd", "d_model")
    if len(embed.shape) == 2:
        for f, dim, what in ((vocab, 0, "rows"), (hidden, 1, "columns")):
            if f is not None and embed.shape[dim] != f[1]:
                return (f"`{f[0]}` is {f[1]} but {embed.name} has shape {list(embed.shape)} ({embed.shape[dim]} "
                        f"{what})")
    head = tensors.get(f"{prefix[:-len('model.')] if prefix.endswith('model.') else prefix}lm_head.weight")
    if head is not None and vocab is not None and head.dtype in FLOAT_DTYPES and len(head.shape) == 2 \
            and head.shape[0] != vocab[1]:
        return f"`vocab_size` is {vocab[1]} but {head.name} has shape {list(head.shape)} ({head.shape[0]} rows)"
    if head is None and cfg.get("tie_word_embeddings") is False and embed.name.endswith("embed_tokens.weight"):
        return ("`tie_word_embeddings` is false but the weights have no lm_head.weight (the output head would be "
                "initialised at random)")
    return None


def _layers_problem(cfg: dict[str, Any], tensors: dict[str, TensorMeta], prefix: str) -> str | None:
    layers = _size_field(cfg, "num_hidden_layers", "n_layer", "num_layers")
    layer_re = re.compile(rf"^{re.escape(prefix)}(?:layers|h|blocks)\.(\d+)\.")
    seen: dict[int, str] = {}
    for n in tensors:
        m = layer_re.match(n)
        if m:
            seen.setdefault(int(m.group(1)), n)
    if layers is None or not seen or set(seen) == set(range(layers[1])):
        return None
    beyond = sorted(i for i in seen if i >= layers[1])
    if beyond:
        return (f"`{layers[0]}` is {layers[1]} but the weights hold layer {beyond[-1]} ({seen[beyond[-1]]}); "
                f"they have {len(seen)} layers")
    absent = min(set(range(layers[1])) - set(seen))
    return (f"`{layers[0]}` is {layers[1]} but the weights have no tensor of layer {absent} "
            f"({prefix}layers.{absent}.*); they have {len(seen)} layers")


def _projection_problem(cfg: dict[str, Any], tensors: dict[str, TensorMeta], prefix: str) -> str | None:
    hidden = _size_field(cfg, "hidden_size", "n_embd", "d_model")
    heads = _size_field(cfg, "num_attention_heads", "n_head")
    kv = _size_field(cfg, "num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") if is_int(cfg.get("head_dim")) else (
        hidden[1] // heads[1] if hidden is not None and heads is not None else None)
    moe = _size_field(cfg, "num_experts", "num_local_experts", "n_routed_experts")
    inter = None if moe else _size_field(cfg, "intermediate_size")

    def times(f: tuple[str, int] | None) -> int | None:
        return f[1] * head_dim if f is not None and head_dim is not None else None

    # per projection: (dimension, the field that sizes it, the size it gives) for [out, in]
    expected: dict[str, list[tuple[int, tuple[str, int] | None, int | None]]] = {
        "q": [(0, heads, times(heads))], "k": [(0, kv, times(kv))], "v": [(0, kv, times(kv))],
        "o": [(0, hidden, hidden and hidden[1]), (1, heads, times(heads))],
        "gate": [(0, inter, inter and inter[1])], "up": [(0, inter, inter and inter[1])],
        "down": [(0, hidden, hidden and hidden[1]), (1, inter, inter and inter[1])],
    }
    for p in ("q", "k", "v", "gate", "up"):
        expected[p].insert(0, (1, hidden, hidden and hidden[1]))
    for n, t in tensors.items():
        m = _PROJ_RE.search(n)
        if m is None or not n.startswith(prefix) or len(t.shape) != 2 or t.dtype not in FLOAT_DTYPES:
            continue
        for dim, f, size in expected[m["proj"]]:
            if f is None or size is None or t.shape[dim] == size:
                continue
            if f in (heads, kv) and f is not hidden and m["proj"] in "qkvo":
                return f"`{f[0]}` x `head_dim` is {f[1]} x {head_dim} = {size} but {n} has shape {list(t.shape)}"
            return f"`{f[0]}` is {f[1]} but {n} has shape {list(t.shape)}"
    return None


_CONFIG_INTS = ("vocab_size", "max_position_embeddings", "n_positions", "hidden_size", "num_hidden_layers")


def check_config(path: Path, cfg: dict[str, Any]) -> None:
    archs = cfg.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise CheckpointError(f"{path}: `architectures` must be a list of class names, got {archs!r}; fix config.json")
    if cfg.get("model_type") is not None and not isinstance(cfg["model_type"], str):
        raise CheckpointError(f"{path}: `model_type` must be a string, got {cfg['model_type']!r}; fix config.json")
    for key in _CONFIG_INTS:
        v = cfg.get(key)
        if v is not None and not (is_int(v) and v > 0):
            raise CheckpointError(f"{path}: `{key}` must be a positive integer, got {v!r}; fix config.json")
    for key in ("tie_word_embeddings",):
        if cfg.get(key) is not None and not isinstance(cfg[key], bool):
            raise CheckpointError(f"{path}: `{key}` must be true or false, got {cfg[key]!r}; fix config.json")


def config_parameters(config: dict[str, Any]) -> int | None:
    """The parameter count a decoder-only transformer's ``config.json`` implies, without its weights
    (None when the config lacks the sizes). Counts embeddings (twice when untied), attention with
    grouped key/value heads, a gated MLP (three matrices; experts multiply it) and the norms, so it
    is exact for Llama/Qwen-style models up to biases and a little high for two-matrix MLPs: what a
    size limit checked before loading needs."""
    text = config.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else config

    def first(*keys: str) -> int | None:
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    hidden = first("hidden_size", "n_embd", "d_model")
    layers = first("num_hidden_layers", "n_layer", "num_layers")
    vocab = first("vocab_size")
    if hidden is None or layers is None or vocab is None:
        return None
    heads = first("num_attention_heads", "n_head") or max(1, hidden // 64)
    kv = first("num_key_value_heads") or heads
    head_dim = first("head_dim") or hidden // heads
    inter = first("intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    experts = first("num_experts", "num_local_experts", "n_routed_experts") or 1
    attention = hidden * heads * head_dim + 2 * hidden * kv * head_dim + heads * head_dim * hidden
    mlp = 3 * hidden * inter * experts
    tied = cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", True)) is not False
    return vocab * hidden * (1 if tied else 2) + layers * (attention + mlp + 2 * hidden) + hidden

