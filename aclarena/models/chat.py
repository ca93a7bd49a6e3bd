"""What a chat policy is, and the token ids that end a model's turn.

Shared by the rollout loop (:mod:`aclarena.envs.rollout`), the vLLM engine
(:mod:`aclarena.models.vllm_engine`) and training rollouts; it lives with the models so that the
engine does not import the environments (which import the engine).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Conversation = tuple[list[dict[str, Any]], list[dict[str, Any]] | None]
# A policy answers a batch of conversations; None means "cannot continue" (context full).
Policy = Callable[[Sequence[Conversation]], list[str | None]]


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end a turn: the model's generation-config EOS ids, the tokenizer's EOS and the
    ChatML end markers the tokenizer knows."""
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list | tuple):
        ids.update(int(i) for i in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    for tok in ("<|im_end|>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.add(tid)
    return sorted(ids)
