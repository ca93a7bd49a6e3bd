"""What a chat policy is, what ends an assistant turn in a chat template, and where generation stops.

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


_SENTINEL = "aclarena-end-of-turn-probe"


def end_of_turn(tokenizer: Any) -> tuple[str, int | None]:
    """What the chat template writes after an assistant message's content, and the token that starts it.

    Read from the template itself (an assistant turn rendered around a sentinel), so it holds for
    any template: ``("<|im_end|>\\n", id of <|im_end|>)`` for ChatML, ``("<|eot_id|>", id)`` for
    Llama 3. The id is None when the template writes nothing there or the text does not start
    with one token of the vocabulary.
    """
    if not getattr(tokenizer, "chat_template", None):
        return "", None
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _SENTINEL}]
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    except Exception:  # a template that needs more (a system turn, tools) says its own error when used
        return "", None
    at = text.rfind(_SENTINEL)
    if at < 0:
        return "", None
    suffix = text[at + len(_SENTINEL):]
    ids = tokenizer(suffix, add_special_tokens=False)["input_ids"] if suffix else []
    if not ids:
        return suffix, None
    first = tokenizer.decode([ids[0]], skip_special_tokens=False)
    return suffix, (int(ids[0]) if first and suffix.startswith(first) else None)


def stop_token_ids(model: Any, tokenizer: Any, *, required: bool = True) -> list[int]:
    """Where generation stops, the one rule of every generation path (``eval``, ``probe``,
    ``signatures``, ``flips``, the monitor, training rollouts, serving): the generation config's and
    the model config's end-of-sequence tokens, the tokenizer's, and the token that ends an assistant
    turn in the chat template (:func:`end_of_turn`; Gemma's ``<end_of_turn>`` is not its eos).

    With ``required`` (the default) a model and tokenizer naming none of them is a ValueError;
    otherwise the list is empty (generation runs to its token budget).
    """
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        eos = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list | tuple):
            ids.update(int(i) for i in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    eot = end_of_turn(tokenizer)[1]
    if eot is not None:
        ids.add(eot)
    if not ids and required:
        raise ValueError("no end-of-sequence token: neither the generation config, the tokenizer nor the chat "
                         "template names one; set generation_config.eos_token_id")
    return sorted(ids)
