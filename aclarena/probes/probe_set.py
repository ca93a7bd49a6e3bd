"""Making probe sets: prompt and trace files, chat-template tokenization and token texts.

A probe set (:class:`~aclarena.results.probes.ProbeSet`: a reference checkpoint's frozen sequences and
the positions that get scored) comes from :mod:`.generation` (the reference generates on prompts) or
from existing conversations (:func:`probe_set_from_conversations`, used by ``--from-traces`` and by the
arena's rollouts), tokenized with the reference's chat template here. Its payload, its place in
results.h5 (``probes/<name>``) and its writer and reader are :mod:`aclarena.results.probes`
(docs/store-format.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from aclarena import jsonl
from aclarena.errors import AclarenaError
from aclarena.results.probes import ProbeSet

if TYPE_CHECKING:
    from transformers import BatchEncoding, PreTrainedTokenizerBase

ROLES = ("system", "user", "assistant", "tool")
_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


# --- prompt and trace files -----------------------------------------------------------------


def _line_error(path: Path, lineno: int, what: str) -> AclarenaError:
    return AclarenaError(f"{path} line {lineno}: {what}")


def _check_messages(path: Path, lineno: int, messages: Any, *, need_assistant: bool) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise _line_error(path, lineno, '"messages" must be a non-empty list of {"role": ..., "content": ...}')
    out = []
    for j, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _line_error(path, lineno, f"message {j} must be an object with \"role\" and \"content\"")
        role = m.get("role")
        if role not in ROLES:
            raise _line_error(path, lineno, f"message {j} has role {role!r}; use one of {', '.join(ROLES)}")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise _line_error(path, lineno, f"message {j} content must be a string")
        if content is None and not (role == "assistant" and m.get("tool_calls")):
            raise _line_error(path, lineno, f"message {j} ({role}) has no \"content\"")
        calls = m.get("tool_calls")
        if calls is not None and (role != "assistant" or not isinstance(calls, list)):
            raise _line_error(path, lineno, f"message {j}: \"tool_calls\" must be a list on an assistant message")
        out.append(m)
    if need_assistant and not any(m["role"] == "assistant" for m in out):
        raise _line_error(path, lineno, "the conversation has no assistant message, so nothing would be scored")
    return out


def _check_tools(path: Path, lineno: int, tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise _line_error(path, lineno, '"tools" must be a list of tool schemas (objects)')
    return tools


def _read_jsonl(path: str | os.PathLike[str], what: str, example: str) -> list[tuple[int, dict[str, Any]]]:
    return jsonl.read_objects(path, what, example)


def read_prompts(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Prompts from JSONL: each line ``{"messages": [...], "tools": [...]}`` or ``{"prompt": "text"}``.

    Chat prompts are rendered with the reference's chat template and a generation prompt;
    plain prompts are tokenized as they are (base models).
    """
    example = '{"messages": [{"role": "user", "content": "..."}]} or {"prompt": "..."}'
    out: list[dict[str, Any]] = []
    p = Path(path)
    for lineno, obj in _read_jsonl(path, "prompts", example):
        if "messages" in obj:
            messages = _check_messages(p, lineno, obj["messages"], need_assistant=False)
            out.append({"messages": messages, "tools": _check_tools(p, lineno, obj.get("tools"))})
        elif "prompt" in obj:
            if not isinstance(obj["prompt"], str) or not obj["prompt"]:
                raise _line_error(p, lineno, '"prompt" must be a non-empty string')
            out.append({"prompt": obj["prompt"]})
        else:
            raise _line_error(p, lineno, f'has neither "messages" nor "prompt" (keys: {jsonl.key_list(obj)}); '
                                         f"write {example}")
    return out


def read_traces(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Complete conversations from JSONL: ``{"messages": [...], "tools": [...]}`` per line,
    assistant messages possibly with ``tool_calls`` and ``tool`` messages between them."""
    example = '{"messages": [..., {"role": "assistant", "content": "..."}], "tools": [...]}'
    p = Path(path)
    out = []
    for lineno, obj in _read_jsonl(path, "traces", example):
        if "messages" not in obj:
            raise _line_error(p, lineno, f'has no "messages"; write {example}')
        messages = _check_messages(p, lineno, obj["messages"], need_assistant=True)
        out.append({"messages": messages, "tools": _check_tools(p, lineno, obj.get("tools"))})
    return out


# --- tokenization -----------------------------------------------------------------------------


def has_generation_markers(tokenizer: PreTrainedTokenizerBase) -> bool:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return bool(template) and bool(_GENERATION_RE.search(str(template)))


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], tools: Any, **kw: Any) -> str:
    try:
        return str(tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kw))
    except Exception as e:  # jinja errors name the template problem; keep one line
        raise AclarenaError(f"the chat template cannot render this conversation: {str(e).splitlines()[0]}") from None


def tokenize_conversation(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of a full conversation and the mask of its assistant tokens.

    With ``{% generation %}`` markers in the chat template, transformers returns the mask
    itself. Otherwise each assistant turn is located by rendering the conversation up to
    it (with a generation prompt) and up to its end: its tokens are those between.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise AclarenaError("the reference's tokenizer has no chat template, so conversations cannot be tokenized; "
                            "add one (chat_template.jinja) or use plain prompts")
    if has_generation_markers(tokenizer):
        try:
            # return_dict=True: a BatchEncoding (transformers' annotations give the union of every mode);
            # `tools` is annotated an invariant list[dict | Callable], so a list of schema dicts does not match it
            enc = cast("BatchEncoding", tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=True, return_dict=True,  # type: ignore[arg-type]
                return_assistant_tokens_mask=True))
        except Exception as e:
            raise AclarenaError(f"the chat template cannot render this conversation: {str(e).splitlines()[0]}") from None
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        mask = np.asarray(enc["assistant_masks"], dtype=bool)
    else:
        text = _render(tokenizer, messages, tools)
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        starts = np.asarray([s for s, _ in enc["offset_mapping"]], dtype=np.int64)
        mask = np.zeros(len(ids), dtype=bool)
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = _render(tokenizer, messages[:i], tools, add_generation_prompt=True) if i else ""
            upto = _render(tokenizer, messages[: i + 1], tools)
            if not text.startswith(before) or not text.startswith(upto):
                raise AclarenaError(
                    "the chat template does not render conversations prefix by prefix (it rewrites earlier turns), "
                    "so assistant tokens cannot be located; add {% generation %} markers to it"
                )
            end = len(upto.rstrip())
            mask |= (starts >= len(before)) & (starts < end)
    if len(mask):
        mask[0] = False
    return ids, mask


def token_pieces(tokenizer: PreTrainedTokenizerBase, ids: Iterable[int]) -> list[str]:
    """Each token's text, so that ``"".join(pieces)`` is the decoded text.

    Decoding token by token breaks characters split across byte-level tokens; this holds
    such tokens back and gives the character to the token that completes it (the
    incremental detokenizer of text-generation-inference).
    """
    ids = [int(i) for i in ids]

    def dec(xs: list[int]) -> str:
        return str(tokenizer.decode(xs, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    pieces: list[str] = []
    prefix, read = 0, 0
    for i in range(len(ids)):
        prefix_text = dec(ids[prefix:read])
        new_text = dec(ids[prefix:i + 1])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            pieces.append(new_text[len(prefix_text):])
            prefix, read = read, i + 1
        else:
            pieces.append("")
    if read < len(ids) and pieces:  # an unfinished character at the very end
        pieces[-1] += dec(ids[prefix:])[len(dec(ids[prefix:read])):]
    return pieces


def vocab_strings(tokenizer: PreTrainedTokenizerBase, size: int | None = None) -> list[str]:
    """The text of every token id (as decoded alone), for ``size`` ids (the model's vocabulary,
    which is often padded beyond the tokenizer's: those ids read ``<unused N>``)."""
    known = len(tokenizer)
    n = size if size is not None else known
    out = tokenizer.batch_decode([[i] for i in range(min(n, known))], skip_special_tokens=False,
                                 clean_up_tokenization_spaces=False)
    return list(out) + [f"<unused {i}>" for i in range(known, n)]


def truncate(
    ids: np.ndarray, mask: np.ndarray, max_length: int | None, label: str, warnings: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Cut a sequence to ``max_length`` tokens, recording a warning."""
    if max_length is not None and len(ids) > max_length:
        warnings.append(f"{label} truncated from {len(ids)} to {max_length} tokens (the model's maximum positions)")
        return ids[:max_length], mask[:max_length]
    return ids, mask


def probe_set_from_conversations(
    conversations: Sequence[Mapping[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    *,
    name: str,
    reference: str,
    max_length: int | None = None,
    vocab_size: int | None = None,
    settings: Mapping[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ProbeSet:
    """A probe set from complete conversations (traces, arena rollouts).

    Each conversation is ``{"messages": [...], "tools": [...] or None}``; assistant tokens
    (including tool calls) are scored, every other token is context. Sequences longer than
    ``max_length`` are truncated, with a warning recorded in the probe set. ``vocab_size``
    is the model's vocabulary size (default: the tokenizer's).
    """
    warnings: list[str] = []
    ids_out, masks, texts, pieces, sources = [], [], [], [], []
    for i, conv in enumerate(conversations):
        messages = list(conv["messages"])
        tools = conv.get("tools")
        ids, mask = tokenize_conversation(tokenizer, messages, tools)
        ids, mask = truncate(ids, mask, max_length, f"sequence {i}", warnings)
        ids_out.append(ids.astype(np.int32))
        masks.append(mask)
        pieces.append(token_pieces(tokenizer, ids))
        texts.append("".join(pieces[-1]))
        sources.append({k: conv[k] for k in ("messages", "tools", "domain") if k in conv})
        if progress is not None:
            progress(1)
    info = dict(settings or {})
    info.setdefault("source", "traces")
    info["max_length"] = max_length
    return ProbeSet(name=name, reference=reference, ids=ids_out, scored=masks, texts=texts, token_text=pieces,
                    sources=sources, settings=info, warnings=warnings,
                    vocab=vocab_strings(tokenizer, vocab_size))
