"""Probe sets: a reference checkpoint's frozen sequences and the positions that get scored.

A probe set holds, per sequence, the token ids of prompt and response and a ``scored``
mask: ``scored[t]`` is True when token ``t`` was produced by the model itself (an
assistant turn), so that teacher-forced scoring compares checkpoints only where the model
decides. Prompts, system and user turns and tool observations are context, never scored,
even when a multi-turn agent trace interleaves them with assistant turns.

Probe sets come from :mod:`.generation` (the reference generates on prompts) or from
existing conversations (:func:`probe_set_from_conversations`, used by ``--from-traces``
and by the arena's rollouts), tokenized with the reference's chat template. They are
stored under ``probes/<name>`` in results.h5 (docs/store-format.md).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from aclarena import jsonl
from aclarena.errors import AclarenaError, unknown_name
from aclarena.results.tokens import tokens_key
from aclarena.store import Json, Ragged, ResultsStore
from aclarena.store.token_keys import PROBES, probe_key

if TYPE_CHECKING:
    from transformers import BatchEncoding, PreTrainedTokenizerBase

    from aclarena.store import StoreReader

PROBE_RESULT_TYPE = "probe-set"
PROBE_RESULT_VERSION = "0.1.0"
ROLES = ("system", "user", "assistant", "tool")
_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


@dataclass(frozen=True)
class ProbeSet:
    """Frozen sequences of a reference checkpoint and the positions scored on them.

    Attributes:
        name: the probe set's name (its key under ``probes/``).
        reference: the manifest name of the checkpoint whose sequences these are.
        ids: per sequence, int token ids of prompt and response.
        scored: per sequence, a bool mask of the same length: True where the model
            generated the token (never the first token, which has no prediction).
        texts: per sequence, the decoded text.
        token_text: per sequence, each token's text (their concatenation is the text).
        sources: per sequence, what it was made from (prompt, messages, tools).
        settings: how the set was made (source, generation settings, tokenizer).
        warnings: what was changed on the way (truncations), one line each.
        vocab: the text of every token id (shows top alternatives without a tokenizer).
    """

    name: str
    reference: str
    ids: list[np.ndarray]
    scored: list[np.ndarray]
    texts: list[str]
    token_text: list[list[str]]
    sources: list[Any]
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    vocab: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.ids)
        if n == 0:
            raise AclarenaError(f"probe set {self.name!r} has no sequences; give at least one prompt or trace")
        for what in ("scored", "texts", "token_text", "sources"):
            if len(getattr(self, what)) != n:
                raise ValueError(f"probe set {self.name!r}: {what} has {len(getattr(self, what))} entries for {n} sequences")
        for i, (ids, mask, pieces) in enumerate(zip(self.ids, self.scored, self.token_text, strict=True)):
            if len(ids) != len(mask) or len(ids) != len(pieces):
                raise ValueError(f"probe set {self.name!r}: sequence {i} has {len(ids)} ids, {len(mask)} mask entries "
                                 f"and {len(pieces)} token texts")
            if len(mask) and bool(mask[0]):
                raise ValueError(f"probe set {self.name!r}: sequence {i} scores its first token, which has no prediction")
        if self.n_scored == 0:
            raise AclarenaError(
                f"probe set {self.name!r} has no scored tokens (no assistant tokens in any sequence); "
                "give traces with assistant turns or prompts to generate from"
            )

    @property
    def n_sequences(self) -> int:
        return len(self.ids)

    @property
    def n_tokens(self) -> int:
        return int(sum(len(x) for x in self.ids))

    @property
    def n_scored(self) -> int:
        return int(sum(int(np.count_nonzero(m)) for m in self.scored))

    @property
    def max_length(self) -> int:
        return max(len(x) for x in self.ids)

    def positions(self, i: int) -> np.ndarray:
        """Indices ``t`` of the scored tokens of sequence ``i`` (predicted from position ``t - 1``)."""
        return np.flatnonzero(np.asarray(self.scored[i], dtype=bool))

    def scored_offsets(self) -> np.ndarray:
        """Row offsets of the per-position arrays: sequence ``i``'s scores are ``[o[i]:o[i+1]]``."""
        counts = [int(np.count_nonzero(m)) for m in self.scored]
        out = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=out[1:])
        return out

    @property
    def digest(self) -> str:
        """A hash of ids and masks: scores made on another probe set are never reused."""
        h = hashlib.sha256()
        for ids, mask in zip(self.ids, self.scored, strict=True):
            h.update(np.asarray(ids, dtype=np.int64).tobytes())
            h.update(b"|")
            h.update(np.asarray(mask, dtype=np.bool_).tobytes())
            h.update(b"#")
        return h.hexdigest()[:16]

    # --- store ---------------------------------------------------------------------------
    def to_store(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(data, attrs)`` for :meth:`ResultsStore.write`."""
        data: dict[str, Any] = {
            "ids": Ragged.from_rows([np.asarray(x, dtype=np.int32) for x in self.ids], dtype=np.int32),
            "scored": Ragged.from_rows([np.asarray(m, dtype=bool) for m in self.scored], dtype=bool),
            "token_text": [printable(p) for pieces in self.token_text for p in pieces],
            "text": [printable(t) for t in self.texts],
            "source": Json(list(self.sources)),
            "settings": Json(dict(self.settings)),
            "warnings": Json(list(self.warnings)),
        }
        if self.vocab is not None:
            data["vocab"] = [printable(v) for v in self.vocab]
        attrs = {
            "reference": self.reference,
            "n_sequences": self.n_sequences,
            "n_tokens": self.n_tokens,
            "n_scored": self.n_scored,
            "digest": self.digest,
            "source_kind": str(self.settings.get("source", "")),
        }
        return data, attrs


def list_probe_sets(store: ResultsStore) -> list[str]:
    if not store.exists():
        return []
    with store.reader() as r:
        return r.keys(PROBES) if r.has(PROBES) else []


def write_probe_set(store: ResultsStore, probe: ProbeSet, *, overwrite: bool = False,
                    manifest_text: str | None = None) -> None:
    """Store a probe set; replacing one drops its token results in the same atomic step (scores of
    other sequences must never sit beside the new ones, not even after a kill)."""
    data, attrs = probe.to_store()
    store.write_many([(probe_key(probe.name), data, PROBE_RESULT_TYPE, PROBE_RESULT_VERSION, attrs)],
                     overwrite=overwrite, manifest_text=manifest_text,
                     drop=[tokens_key(probe.name)] if overwrite else [])


def require_probe_digest(name: str, digest: str) -> Callable[[StoreReader], None]:
    """A store-write precondition: the probe set ``name`` is still the one (``digest``) the results
    were computed on (``probe --force`` may have replaced it while ``tokens`` ran)."""

    def check(reader: StoreReader) -> None:
        key = probe_key(name)
        now = reader.attrs(key).get("digest") if reader.has(key) else None
        if now != digest:
            raise AclarenaError(f"probe set {name!r} was replaced while these scores were computed (by probe "
                                "--force?); nothing was written: rerun tokens")

    return check


def read_probe_set(store: ResultsStore, name: str, *, with_text: bool = True) -> ProbeSet:
    """Read ``probes/<name>``; unknown names fail with the known ones and a did-you-mean."""
    known = list_probe_sets(store)
    if name not in known:
        raise unknown_name("probe set", name, known, hint="make one with `aclarena-diag probe --ref NAME`")
    key = probe_key(name)
    with store.reader() as r, r.damaged(key):
        attrs = r.attrs(key)
        ids = r.read(f"{key}/ids")
        scored = r.read(f"{key}/scored")
        offsets = ids.offsets
        if with_text:
            flat = r.read(f"{key}/token_text")
            token_text = [flat[int(offsets[i]):int(offsets[i + 1])] for i in range(ids.n_rows)]
            texts = r.read(f"{key}/text")
            vocab = r.read(f"{key}/vocab") if r.has(f"{key}/vocab") else None
        else:
            token_text = [[""] * len(row) for row in ids.rows()]
            texts = [""] * ids.n_rows
            vocab = None
        sources = r.read(f"{key}/source")
        settings = r.read(f"{key}/settings")
        warnings = r.read(f"{key}/warnings")
        return ProbeSet(
            name=name, reference=str(attrs["reference"]), ids=[np.asarray(x) for x in ids.rows()],
            scored=[np.asarray(x, dtype=bool) for x in scored.rows()], texts=list(texts), token_text=token_text,
            sources=list(sources), settings=dict(settings), warnings=list(warnings), vocab=vocab,
        )


# --- prompt and trace files -----------------------------------------------------------------


def printable(text: str) -> str:
    """HDF5 strings cannot hold NUL: show it as the NUL symbol (U+2400)."""
    return text.replace("\x00", "\u2400")


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
            raise _line_error(p, lineno, f'has neither "messages" nor "prompt" (keys: {", ".join(obj) or "none"}); '
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
