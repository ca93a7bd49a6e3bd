"""Tiny Qwen3/Llama models and a locally trained tokenizer: no download, ever.

Used by the test fixtures and by the mini arena's base model. The tokenizer is a
byte-level BPE trained with ``tokenizers`` on local text, digits split one by one (small
models learn arithmetic far better that way), with Qwen3's special tokens and a
ChatML chat template in Qwen3's tool-calling format (``<tool_call>{json}</tool_call>``,
tool results as ``<tool_response>`` user turns) that marks assistant turns with
``{% generation %}`` so that trl can train on assistant tokens only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]

# Qwen3's ChatML layout; tools are listed compactly (name, arguments, description) so that a
# small context holds a dozen tools. Assistant turns sit inside generation markers.
CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n' }}{% endif %}"
    "# Tools"
    "{% for tool in tools %}{% set f = tool.function if tool.function is defined else tool %}"
    "{{ '\\n- ' + f.name }}({{ (f.parameters.properties.keys() if f.parameters is defined and f.parameters.properties is defined else []) | join(', ') }})"
    "{% if f.description %}: {{ f.description }}{% endif %}"
    "{% endfor %}"
    "{{ '\\nCall a tool with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.<|im_end|>\\n' }}"
    "{% elif messages[0].role == 'system' %}"
    "{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' %}"
    "{% if not loop.first %}{{ '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}{% endif %}"
    "{% elif message.role == 'user' %}"
    "{{ '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{% elif message.role == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% if message.tool_calls %}{% for tc in message.tool_calls %}"
    "{% set call = tc.function if tc.function is defined else tc %}"
    "{% if message.content or not loop.first %}{{ '\\n' }}{% endif %}"
    "{{ '<tool_call>' + ({'name': call.name, 'arguments': call.arguments} | tojson) + '</tool_call>' }}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>' }}"
    "{% endgeneration %}"
    "{{ '\\n' }}"
    "{% elif message.role == 'tool' %}"
    "{{ '<|im_start|>user\\n<tool_response>' + message.content + '</tool_response><|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 1000,
    *,
    chat_template: str = CHAT_TEMPLATE,
    model_max_length: int = 2048,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer (digits split one by one) on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:2] + SPECIAL_TOKENS[3:],
        model_max_length=model_max_length,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = chat_template
    return fast


def tiny_config(
    tokenizer: Any,
    *,
    arch: str = "qwen3",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    max_positions: int = 1024,
    tie_word_embeddings: bool = True,
) -> Any:
    """A small Qwen3 (or Llama) config sized for ``tokenizer``'s vocabulary."""
    from transformers import LlamaConfig, Qwen3Config

    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=3 * hidden_size if intermediate_size is None else intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=[tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")],
        pad_token_id=tokenizer.pad_token_id,
    )
    if arch == "qwen3":
        return Qwen3Config(**common)
    if arch == "llama":
        return LlamaConfig(**common)
    raise ValueError(f"`arch` must be 'qwen3' or 'llama', got {arch!r}")


def build_model(config: Any, seed: int = 0) -> PreTrainedModel:
    """A randomly initialised causal LM from ``config`` (deterministic per seed)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


def save_checkpoint(model: Any, tokenizer: Any, folder: str | os.PathLike[str]) -> Path:
    """Save model (safetensors) and tokenizer as an HF folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder
