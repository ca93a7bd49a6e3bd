"""What a chat policy is, what ends an assistant turn in a chat template, and where generation stops.

Shared by the rollout loop (:mod:`aclarena.envs.rollout`), the vLLM engine
(:mod:`aclarena.models.vllm_engine`) and training rollouts; it lives with the models so that the
engine does not import the environments (which import the engine).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aclarena.errors import AclarenaError

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


# --- prompt formats (issue 45 item 1) ----------------------------------------------------------------

PROMPT_FORMATS = ("chat", "plain")
# a plain-format conversation that is more than one user message is written as labelled text turns
TURN_LABELS = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool"}
# where a plain-format reply ends (after its leading white space): a blank line, or another speaker's turn
PLAIN_STOPS = ("\n\n", *(f"\n{label}:" for label in TURN_LABELS.values()))
TOOLS_HEAD = ('Tools: call one by writing <tool_call>{"name": ..., "arguments": {...}}</tool_call>; '
              "its result comes back as a Tool turn.")


def has_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def choose_prompt_format(requested: str | None, template: bool | None, *, checkpoint: str,
                         where: str | None = None) -> tuple[str, str | None]:
    """The prompt format a checkpoint is prompted in, and the one line that says why when it was detected.

    ``requested``: ``chat``, ``plain``, or None/``auto`` (detect); ``template``: whether the checkpoint's
    tokenizer has a chat template (None: not known, e.g. a hub id: ``chat``, as before). ``chat`` asked
    for a tokenizer without a template is a ValueError with one line (``where`` names who asked).
    """
    if requested not in (None, "auto", *PROMPT_FORMATS):
        raise ValueError(f"prompt format {requested!r} is not one of auto, {', '.join(PROMPT_FORMATS)}")
    if requested == "chat":
        if template is False:
            raise AclarenaError(f"{where or 'prompt_format'} asks for the chat format, but the tokenizer of {checkpoint!r} "
                             "has no chat template; add one (chat_template.jinja) or use prompt_format = \"plain\"")
        return "chat", None
    if requested == "plain":
        return "plain", None
    if template is False:
        return "plain", (f"{checkpoint!r}: its tokenizer has no chat template, so it is prompted as plain text "
                         f"(prompt_format = \"chat\" or \"plain\" in [checkpoints.{checkpoint}] chooses)")
    return "chat", None


def bos_text(tokenizer: Any) -> str:
    """What the tokenizer puts before a text it encodes with special tokens (Gemma's and Llama's
    ``<bos>``; nothing for Qwen), as text: a plain prompt starts with it, as a chat template's does."""
    with_ = tokenizer("a", add_special_tokens=True)["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    for k in range(len(with_) - len(without) + 1):
        if with_[k:k + len(without)] == without:
            return str(tokenizer.decode(with_[:k], skip_special_tokens=False)) if k else ""
    return ""


def plain_text(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None) -> str:
    """A conversation as plain text, for a base model to continue.

    One user message (after any system messages) is written as it is, below the system text: the suite's
    prompt as the user wrote it. Few-shot examples (message pairs marked ``"fewshot": true``, a suite's
    ``fewshot`` file) come before it as ``prompt answer`` blocks, one blank line apart, as
    lm-evaluation-harness writes them. Anything longer (earlier assistant turns, tool results) or a conversation
    with tools is written as text turns (``User: ...``, ``Assistant: ...``, ``Tool: ...``), the tool schemas
    as JSON lines under :data:`TOOLS_HEAD`, ending with ``Assistant:`` for the model to continue.
    """
    system = [str(m.get("content") or "") for m in messages if m["role"] == "system"]
    shots = [str(m.get("content") or "") for m in messages if m.get("fewshot")]
    rest = [m for m in messages if m["role"] != "system" and not m.get("fewshot")]
    head = [s for s in system if s] + [f"{q} {a}" for q, a in zip(shots[::2], shots[1::2], strict=True)]
    if not tools and len(rest) == 1 and rest[0]["role"] == "user":
        return "\n\n".join([*head, str(rest[0].get("content") or "")])
    parts = list(head)
    if tools:
        parts.append("\n".join([TOOLS_HEAD, *(json.dumps(t, sort_keys=True) for t in tools)]))
    turns = [f"{TURN_LABELS.get(m['role'], str(m['role']).title())}: {m.get('content') or ''}" for m in rest]
    parts.append("\n".join([*turns, f"{TURN_LABELS['assistant']}:"]))
    return "\n\n".join(parts)


def render_prompt(tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None, *,
                  prompt_format: str = "chat", **template_kwargs: Any) -> str:
    """The text a model is prompted with for ``messages`` (ending where its reply starts), the one rule of
    every generation path (``eval``, ``probe``, ``signatures``, ``flips``, the monitor): ``chat`` renders
    the tokenizer's chat template with a generation prompt; ``plain`` writes :func:`plain_text` after the
    tokenizer's own leading special tokens (:func:`bos_text`). Encode it with ``add_special_tokens=False``.
    """
    if prompt_format == "chat":
        return str(tokenizer.apply_chat_template(list(messages), tools=list(tools) if tools else None,
                                                 add_generation_prompt=True, tokenize=False, **template_kwargs))
    if prompt_format != "plain":
        raise ValueError(f"prompt format {prompt_format!r} is not one of {', '.join(PROMPT_FORMATS)}")
    return bos_text(tokenizer) + plain_text(messages, tools)


def reply_end(text: str, prompt_format: str) -> int | None:
    """Where a generated reply ends in ``text`` beyond the stop tokens (:func:`stop_token_ids`): for
    ``plain``, the first of :data:`PLAIN_STOPS` after the reply's leading white space; None when it does
    not (a chat reply ends at its end-of-turn token)."""
    if prompt_format != "plain":
        return None
    start = len(text) - len(text.lstrip())
    found = [at for at in (text.find(s, start) for s in PLAIN_STOPS) if at >= 0]
    return min(found) if found else None


def cut_reply(tokenizer: Any, ids: Sequence[int], prompt_format: str) -> tuple[list[int], str]:
    """The generated ``ids`` (already cut at a stop token) kept up to the token where the reply ends
    (:func:`reply_end`; that token included, as a stop token is), and the reply's text."""
    ids = [int(i) for i in ids]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    end = reply_end(text, prompt_format)
    if end is None:
        return ids, text
    k = next(k for k in range(1, len(ids) + 1)
             if reply_end(tokenizer.decode(ids[:k], skip_special_tokens=False), prompt_format) is not None)
    return ids[:k], text[:end]


def reply_stopping(tokenizer: Any, width: int, prompt_format: str, rows: Sequence[bool] | None = None) -> Any:
    """A transformers stopping criterion ending each row of a ``generate`` call (prompts ``width`` tokens
    wide, left padded) where its reply ends (:func:`reply_end`); only the rows ``rows`` says when given.
    None for ``chat`` (and when no row is to be stopped)."""
    if prompt_format != "plain" or (rows is not None and not any(rows)):
        return None
    which = list(rows) if rows is not None else None
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _ReplyEnd(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            gen = input_ids[:, width:].tolist()
            done = [(which is None or which[r]) and reply_end(tokenizer.decode(ids, skip_special_tokens=False),
                                                              prompt_format) is not None for r, ids in enumerate(gen)]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_ReplyEnd()])
