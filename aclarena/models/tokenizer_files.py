"""A checkpoint's tokenizer files read without loading them: the fingerprint that says two
checkpoints tokenize alike, the side files (tokenizer, special tokens, generation config) checked for
values a loader would choke on, and whether a chat template is there. No torch, no transformers.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError
from aclarena.models.files import is_int, is_number, read_json_object, short


def tokenizer_fingerprint(folder: Path) -> str | None:
    """A hash of the vocabulary, merges and added/special tokens; None when no tokenizer is there.

    Two tokenizers with the same fingerprint map every text to the same ids, so per-token
    results of their checkpoints can be compared position by position.
    """
    tj = folder / "tokenizer.json"
    h = hashlib.sha256()
    if tj.is_file():
        try:
            data = json.loads(tj.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise CheckpointError(f"{tj} is not valid JSON; re-save the tokenizer") from None
        vocab, merges, added = _tokenizer_parts(tj, data)
        h.update(json.dumps({"type": data["model"].get("type") if data.get("model") else None, "vocab": vocab, "merges": merges, "added": added},
                            ensure_ascii=False).encode())
        return h.hexdigest()[:12]
    for name in ("tokenizer.model", "vocab.json"):
        p = folder / name
        if p.is_file():
            h.update(p.read_bytes())
            merges_file = folder / "merges.txt"
            if merges_file.is_file():
                h.update(merges_file.read_bytes())
            added_file = folder / "added_tokens.json"
            if added_file.is_file():
                h.update(added_file.read_bytes())
            return h.hexdigest()[:12]
    return None


def _tokenizer_parts(tj: Path, data: Any) -> tuple[Any, list[str], list[tuple[int, str, bool]]]:
    """The vocabulary, merges and added tokens of a tokenizer.json, each checked for its shape."""

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{tj} is not a tokenizers file ({what}); re-save the tokenizer")

    if not isinstance(data, dict):
        raise bad(f"a JSON {type(data).__name__}, not an object")
    model = data.get("model") or {}
    if not isinstance(model, dict):
        raise bad("`model` is not an object")
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        if not all(is_int(i) for i in vocab.values()):
            raise bad("`model.vocab` maps a token to something other than an integer id")
        vocab = sorted(vocab.items(), key=lambda kv: kv[1])
    elif isinstance(vocab, list):  # unigram: [[piece, score], ...]
        if not all(isinstance(e, list) and e and isinstance(e[0], str) for e in vocab):
            raise bad("`model.vocab` is a list whose entries are not [piece, score]")
    elif vocab is not None:
        raise bad(f"`model.vocab` is a {type(vocab).__name__}")
    raw = model.get("merges") or []
    if not isinstance(raw, list) or not all(
            isinstance(m, str) or (isinstance(m, list) and all(isinstance(p, str) for p in m)) for m in raw):
        raise bad("`model.merges` is not a list of strings or of string pairs")
    merges = [m if isinstance(m, str) else " ".join(m) for m in raw]
    tokens = data.get("added_tokens") or []
    if not isinstance(tokens, list) or not all(
            isinstance(t, dict) and is_int(t.get("id")) and isinstance(t.get("content"), str) for t in tokens):
        raise bad("`added_tokens` is not a list of objects with an integer id and a string content")
    added = sorted((t["id"], t["content"], bool(t.get("special"))) for t in tokens)
    return vocab, merges, added


def _is_token_ids(x: Any) -> bool:
    return is_int(x) and x >= 0 or (isinstance(x, list) and bool(x) and all(is_int(i) and i >= 0 for i in x))


def _is_token(x: Any) -> bool:
    """A special token as tokenizer files spell it: its text, or an AddedToken object with a string content."""
    return isinstance(x, str) or (isinstance(x, dict) and isinstance(x.get("content"), str))


def _is_template(x: Any) -> bool:
    """A chat template: a string, or a list of ``{"name", "template"}`` for named templates."""
    return isinstance(x, str) or (isinstance(x, list) and all(
        isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str) for t in x))


def check_side_files(folder: Path) -> None:
    """The small JSON files transformers reads beside the weights and the tokenizer, each of its shape.

    ``tokenizer_config.json``, ``special_tokens_map.json``, ``generation_config.json`` and
    ``chat_template.json``, when present: an object whose fields aclarena or transformers read have
    their types (a list where the object goes ended ``probe`` in transformers' AttributeError; an
    ``eos_token_id`` that is a string was silently no stop token). One line naming the file.
    """
    for name, check in (("tokenizer_config.json", _tokenizer_config_problem),
                        ("special_tokens_map.json", _special_tokens_problem),
                        ("generation_config.json", _generation_config_problem),
                        ("chat_template.json", _chat_template_problem)):
        f = folder / name
        if f.is_file():
            problem = check(read_json_object(f))
            if problem is not None:
                raise CheckpointError(f"{f}: {problem}; fix or re-save it (save_pretrained)")


def _tokenizer_config_problem(cfg: dict[str, Any]) -> str | None:
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        if cfg.get(key) is not None and not _is_token(cfg[key]):
            return f"`{key}` must be a token (a string), got {short(cfg[key])}"
    if cfg.get("chat_template") is not None and not _is_template(cfg["chat_template"]):
        return "`chat_template` must be a string or a list of {name, template}"
    side = cfg.get("padding_side")
    if side is not None and side not in ("left", "right"):
        return f"`padding_side` must be left or right, got {short(side)}"
    length = cfg.get("model_max_length")
    if length is not None and not (is_number(length) and length > 0):
        return f"`model_max_length` must be a positive number, got {short(length)}"
    decoder = cfg.get("added_tokens_decoder")
    if decoder is not None and not (isinstance(decoder, dict) and all(
            k.isdigit() and _is_token(v) for k, v in decoder.items())):
        return "`added_tokens_decoder` must map token ids to tokens"
    return None


def _special_tokens_problem(cfg: dict[str, Any]) -> str | None:
    for key, v in cfg.items():
        if not (_is_token(v) or (isinstance(v, list) and all(_is_token(t) for t in v))):
            return f"`{key}` must be a token or a list of tokens, got {short(v)}"
    return None


def _generation_config_problem(cfg: dict[str, Any]) -> str | None:
    for key in ("eos_token_id", "bos_token_id", "pad_token_id", "decoder_start_token_id"):
        if cfg.get(key) is not None and not _is_token_ids(cfg[key]):
            return f"`{key}` must be a token id or a list of them, got {short(cfg[key])}"
    for key in ("max_length", "max_new_tokens", "top_k", "num_beams"):
        if cfg.get(key) is not None and not (is_int(cfg[key]) and cfg[key] >= 0):
            return f"`{key}` must be a non-negative integer, got {short(cfg[key])}"
    for key in ("temperature", "top_p", "repetition_penalty"):
        if cfg.get(key) is not None and not (is_number(cfg[key]) and cfg[key] >= 0):
            return f"`{key}` must be a non-negative number, got {short(cfg[key])}"
    if cfg.get("do_sample") is not None and not isinstance(cfg["do_sample"], bool):
        return f"`do_sample` must be true or false, got {short(cfg['do_sample'])}"
    return None


def _chat_template_problem(cfg: dict[str, Any]) -> str | None:
    return None if _is_template(cfg.get("chat_template")) else "`chat_template` must be a string or a list of {name, template}"


def has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return False
        return isinstance(data, dict) and bool(data.get("chat_template"))
    return False

