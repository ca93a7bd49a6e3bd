"""What a checkpoint is, read without loading it: files, weights, dtype, tokenizer, lineage.

Everything here reads headers and small JSON files only (no torch), so that
``aclarena-diag checkpoints`` is fast and every analyzer can check its inputs before it
loads a model. :mod:`aclarena.models.loading` builds on it to load models.

Sources a manifest ``path`` may name:

* an HF model folder (``config.json`` and ``model.safetensors`` or a sharded
  ``model.safetensors.index.json``), relative to the run folder or absolute;
* a LoRA adapter folder (``adapter_config.json``, ``adapter_model.safetensors``),
  applied on the checkpoint named by ``on``;
* a hub id (``org/name``) when no such local folder exists.

Weights are read from safetensors only; pickle files (``pytorch_model.bin``, ``*.pt``)
need ``allow_pickle=True`` (``--allow-pickle``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError
from aclarena.store.manifest import CheckpointSpec, Manifest

SAFETENSORS_SINGLE = ("model.safetensors", "adapter_model.safetensors")
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_NAMES = ("pytorch_model.bin", "adapter_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.bin")
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
# bytes per entry of every safetensors dtype (BOOL: one byte; sub-byte types are not read here)
ITEMSIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
             "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8}
DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
               "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
               "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's name, dtype (safetensors code, e.g. ``BF16``), shape and file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class CheckpointInfo:
    """A checkpoint as found on disk; ``problem`` says why it cannot be loaded, if so."""

    spec: CheckpointSpec
    source: str  # "folder" | "adapter" | "hub"
    location: str  # absolute folder, or the hub id
    weight_format: str | None = None  # "safetensors" | "pickle" | None
    tensors: dict[str, TensorMeta] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    adapter_config: dict[str, Any] = field(default_factory=dict)
    tokenizer_fingerprint: str | None = None
    problem: str | None = None
    chat_template: bool | None = None  # whether its tokenizer has one (None: not known, e.g. a hub id)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def loadable(self) -> bool:
        return self.problem is None

    @property
    def n_parameters(self) -> int | None:
        if not self.tensors:
            return None
        return sum(t.numel for t in self.tensors.values())

    @property
    def dtype(self) -> str | None:
        if not self.tensors:
            return None
        counts: Counter[str] = Counter()
        for t in self.tensors.values():
            counts[t.dtype] += t.numel
        code = counts.most_common(1)[0][0]
        return DTYPE_NAMES.get(code, code.lower())

    @property
    def architecture(self) -> str | None:
        archs = self.config.get("architectures")
        if archs:
            return str(archs[0])
        return self.config.get("model_type")

    def require_loadable(self) -> None:
        if self.problem is not None:
            raise CheckpointError(f"checkpoint {self.name!r}: {self.problem}")


class NonFiniteWeightsError(CheckpointError):
    """A checkpoint's weights hold NaN or infinite values: no result computed from it can be real."""


# --- safetensors headers ---------------------------------------------------------------------


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (tensor names, dtypes, shapes, offsets)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise CheckpointError(f"{path} is truncated (no safetensors header); re-save the checkpoint")
            (n,) = struct.unpack("<Q", raw)
            if n > 100_000_000:
                raise CheckpointError(f"{path} is not a safetensors file (header size {n}); re-save the checkpoint")
            header = f.read(n)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror}") from None
    try:
        meta = json.loads(header)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise CheckpointError(f"{path} has a corrupted safetensors header; re-save the checkpoint") from None
    _check_header(path, meta)
    end = max((v["data_offsets"][1] for k, v in meta.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        raise CheckpointError(f"{path} is truncated ({size} bytes, header promises {8 + n + end}); re-save the checkpoint")
    return meta


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_header(path: Path, meta: Any) -> None:
    """The header's shape as the safetensors format defines it: an object of tensors, each with a
    known dtype, a shape of non-negative integers and ``data_offsets`` [begin, end] whose length is
    what the dtype and shape need, the tensors' byte ranges not overlapping."""

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{path} has a malformed safetensors header ({what}); re-save the checkpoint")

    if not isinstance(meta, dict):
        raise bad(f"a JSON {type(meta).__name__}, not an object")
    extra = meta.get("__metadata__")
    if extra is not None and not (isinstance(extra, dict) and all(isinstance(v, str) for v in extra.values())):
        raise bad("__metadata__ is not an object of strings")
    spans = []
    for name, v in meta.items():
        if name == "__metadata__":
            continue
        if not isinstance(v, dict):
            raise bad(f"tensor {name!r} is a {type(v).__name__}, not an object")
        dtype, shape, offsets = v.get("dtype"), v.get("shape"), v.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in ITEMSIZES:
            raise bad(f"tensor {name!r} has dtype {dtype!r}; known: {', '.join(sorted(ITEMSIZES))}")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise bad(f"tensor {name!r} has shape {shape!r}, not a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise bad(f"tensor {name!r} has data_offsets {offsets!r}, not [begin, end] with 0 <= begin <= end")
        numel = 1
        for d in shape:
            numel *= d
        need = numel * ITEMSIZES[dtype]
        if offsets[1] - offsets[0] != need:
            raise bad(f"tensor {name!r} of dtype {dtype} and shape {shape} needs {need} bytes but data_offsets "
                      f"give {offsets[1] - offsets[0]}")
        spans.append((offsets[0], offsets[1], name))
    spans.sort()
    for (_, e0, a), (b1, _, b) in zip(spans, spans[1:], strict=False):
        if b1 < e0:
            raise bad(f"tensors {a!r} and {b!r} overlap")


def safetensors_files(folder: Path) -> list[Path]:
    """The safetensors files of an HF folder (shards listed by the index), or []."""
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise CheckpointError(f"{index} is not valid JSON; re-save the checkpoint") from None
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index} is not a valid safetensors index (weight_map must be an object of "
                                  "tensor name -> shard file); re-save the checkpoint")
        for tensor, shard in weight_map.items():
            if not isinstance(shard, str) or not shard or Path(shard).is_absolute() or ".." in Path(shard).parts \
                    or "\x00" in shard:
                raise CheckpointError(f"{index} maps {tensor!r} to {shard!r}, not a shard file name in the folder; "
                                      "re-save the checkpoint")
        files = sorted({folder / f for f in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{folder}: shard {missing[0]} listed in {SAFETENSORS_INDEX} is missing")
        for f in files:  # every tensor the index names is in the shard it names
            names = set(read_safetensors_header(f)) - {"__metadata__"}
            absent = [t for t, shard in weight_map.items() if folder / shard == f and t not in names]
            if absent:
                raise CheckpointError(f"{index} puts {absent[0]!r} in {f.name}, which does not hold it; re-save the "
                                      "checkpoint")
        return files
    single = [folder / n for n in SAFETENSORS_SINGLE if (folder / n).is_file()]
    if single:
        return single[:1]
    return sorted(p for p in folder.glob("*.safetensors") if p.is_file())


def tensor_metas(files: list[Path]) -> dict[str, TensorMeta]:
    out: dict[str, TensorMeta] = {}
    for path in files:
        for name, v in read_safetensors_header(path).items():
            if name == "__metadata__":
                continue
            out[name] = TensorMeta(name=name, dtype=v["dtype"], shape=tuple(v["shape"]), file=path)
    return out


def pickle_files(folder: Path) -> list[Path]:
    found = [folder / n for n in PICKLE_NAMES if (folder / n).is_file()]
    found += sorted(p for p in folder.glob("pytorch_model-*.bin"))
    return found


_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def library_reason(e: BaseException) -> str:
    """What a transformers / peft / torch error says, on one line: torch's weights_only refusal by the global
    it refused (its message is seven lines of advice), any other error's lines joined, at most 300 characters."""
    text = _ANSI_RE.sub("", str(e))
    if "WeightsUnpickler error:" in text:
        refused = text.split("WeightsUnpickler error:", 1)[1].strip().splitlines()[0]
        return (f"torch's weights_only loader refused it ({refused.split(' Please use')[0].rstrip('.')}): it holds "
                "more than tensors; convert it to safetensors")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    joined = " ".join(lines) or type(e).__name__
    return joined if len(joined) <= 300 else joined[:297] + "..."


def check_pickle_weights(files: list[Path]) -> None:
    """Refuse pickle weights (allowed with ``--allow-pickle``) that torch's ``weights_only`` loader, which
    transformers and peft use, would refuse: one line naming the file and the global it refused.

    The file is unpickled by that loader itself (it never runs the pickle's code), memory-mapped so the tensors'
    bytes are not read; torch is imported here only, for folders that hold pickle weights.
    """
    import torch


    for f in files:
        if f.suffix == ".json":  # the index of sharded pickles
            continue
        try:
            try:
                torch.load(f, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as e:  # a legacy (not zip) file cannot be memory-mapped
                if "mmap" not in str(e):
                    raise
                torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:
            raise CheckpointError(f"{f} cannot be loaded: {library_reason(e)}") from None


# --- tokenizers --------------------------------------------------------------------------------


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
        if not all(_is_int(i) for i in vocab.values()):
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
            isinstance(t, dict) and _is_int(t.get("id")) and isinstance(t.get("content"), str) for t in tokens):
        raise bad("`added_tokens` is not a list of objects with an integer id and a string content")
    added = sorted((t["id"], t["content"], bool(t.get("special"))) for t in tokens)
    return vocab, merges, added


def _is_token_ids(x: Any) -> bool:
    return _is_int(x) and x >= 0 or (isinstance(x, list) and bool(x) and all(_is_int(i) and i >= 0 for i in x))


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
            problem = check(_read_json(f))
            if problem is not None:
                raise CheckpointError(f"{f}: {problem}; fix or re-save it (save_pretrained)")


def _tokenizer_config_problem(cfg: dict[str, Any]) -> str | None:
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        if cfg.get(key) is not None and not _is_token(cfg[key]):
            return f"`{key}` must be a token (a string), got {_short(cfg[key])}"
    if cfg.get("chat_template") is not None and not _is_template(cfg["chat_template"]):
        return "`chat_template` must be a string or a list of {name, template}"
    side = cfg.get("padding_side")
    if side is not None and side not in ("left", "right"):
        return f"`padding_side` must be left or right, got {_short(side)}"
    length = cfg.get("model_max_length")
    if length is not None and not (_is_number(length) and length > 0):
        return f"`model_max_length` must be a positive number, got {_short(length)}"
    decoder = cfg.get("added_tokens_decoder")
    if decoder is not None and not (isinstance(decoder, dict) and all(
            k.isdigit() and _is_token(v) for k, v in decoder.items())):
        return "`added_tokens_decoder` must map token ids to tokens"
    return None


def _special_tokens_problem(cfg: dict[str, Any]) -> str | None:
    for key, v in cfg.items():
        if not (_is_token(v) or (isinstance(v, list) and all(_is_token(t) for t in v))):
            return f"`{key}` must be a token or a list of tokens, got {_short(v)}"
    return None


def _generation_config_problem(cfg: dict[str, Any]) -> str | None:
    for key in ("eos_token_id", "bos_token_id", "pad_token_id", "decoder_start_token_id"):
        if cfg.get(key) is not None and not _is_token_ids(cfg[key]):
            return f"`{key}` must be a token id or a list of them, got {_short(cfg[key])}"
    for key in ("max_length", "max_new_tokens", "top_k", "num_beams"):
        if cfg.get(key) is not None and not (_is_int(cfg[key]) and cfg[key] >= 0):
            return f"`{key}` must be a non-negative integer, got {_short(cfg[key])}"
    for key in ("temperature", "top_p", "repetition_penalty"):
        if cfg.get(key) is not None and not (_is_number(cfg[key]) and cfg[key] >= 0):
            return f"`{key}` must be a non-negative number, got {_short(cfg[key])}"
    if cfg.get("do_sample") is not None and not isinstance(cfg["do_sample"], bool):
        return f"`do_sample` must be true or false, got {_short(cfg['do_sample'])}"
    return None


def _chat_template_problem(cfg: dict[str, Any]) -> str | None:
    return None if _is_template(cfg.get("chat_template")) else "`chat_template` must be a string or a list of {name, template}"


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and x == x  # not NaN


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


# --- resolution --------------------------------------------------------------------------------


def locate(spec: CheckpointSpec, run_dir: str | os.PathLike[str]) -> tuple[str, str]:
    """Return (source, location): a local folder, an adapter folder, or a hub id."""
    raw = os.path.expanduser(spec.path)
    path = Path(raw) if os.path.isabs(raw) else Path(run_dir) / raw
    if path.exists():
        if not path.is_dir():
            raise CheckpointError(
                f"checkpoint {spec.name!r}: {path} is a file; `path` must name a checkpoint folder"
            )
        return ("adapter" if (path / "adapter_config.json").is_file() else "folder"), str(path.resolve())
    first = Path(run_dir) / raw.split("/")[0]
    looks_local = raw.startswith((".", "/", "~")) or first.exists() or spec.is_adapter
    if HUB_ID_RE.match(raw) and not looks_local:
        if hub_snapshot(raw) is None:
            raise CheckpointError(
                f"checkpoint {spec.name!r}: {path} does not exist and hub id {raw!r} is not in the local Hugging Face "
                f"cache; download it first (`hf download {raw}`) or fix `path` in the manifest"
            )
        return "hub", raw
    raise CheckpointError(
        f"checkpoint {spec.name!r}: folder {path} does not exist; fix `path` in the manifest or restore the folder"
    )


def hub_snapshot(repo_id: str) -> Path | None:
    """The local Hugging Face cache's snapshot folder of ``repo_id`` (the one its ``config.json`` is in), or None.

    Hub ids are resolved from that cache only, never over the network: a machine offline (or an id that is not
    cached) is one line at once instead of huggingface_hub's retries for half a minute.
    """
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except (ValueError, OSError):  # an id huggingface_hub does not accept
        return None
    return Path(found).parent if isinstance(found, str) else None


def inspect(
    spec: CheckpointSpec,
    manifest: Manifest,
    run_dir: str | os.PathLike[str],
    *,
    allow_pickle: bool = False,
    _seen: dict[str, CheckpointInfo] | None = None,
) -> CheckpointInfo:
    """Inspect a checkpoint without loading it; problems go to ``info.problem``, not raised."""
    seen = {} if _seen is None else _seen
    if spec.name in seen:
        return seen[spec.name]
    try:
        source, location = locate(spec, run_dir)
    except CheckpointError as e:
        info = CheckpointInfo(spec=spec, source="folder", location=spec.path, problem=_strip_name(str(e), spec))
        seen[spec.name] = info
        return info
    info = CheckpointInfo(spec=spec, source=source, location=location)
    seen[spec.name] = info
    folder = Path(location)
    try:
        if source == "hub":  # its cached snapshot is checked like a folder
            snapshot = hub_snapshot(location)
            if snapshot is None:
                raise CheckpointError(f"hub id {location!r} left the local Hugging Face cache; download it again")
            _inspect_folder(info, snapshot, allow_pickle)
        elif source == "adapter":
            _inspect_adapter(info, folder, manifest, run_dir, allow_pickle, seen)
        else:
            _inspect_folder(info, folder, allow_pickle)
    except CheckpointError as e:
        info.problem = _strip_name(str(e), spec)
    return info


def _strip_name(msg: str, spec: CheckpointSpec) -> str:
    prefix = f"checkpoint {spec.name!r}: "
    return msg[len(prefix):] if msg.startswith(prefix) else msg


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise CheckpointError(f"{path} is not valid JSON; re-save the checkpoint") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object; re-save the checkpoint")
    return data


def _inspect_folder(info: CheckpointInfo, folder: Path, allow_pickle: bool) -> None:
    cfg = folder / "config.json"
    if cfg.is_file():
        info.config = _read_json(cfg)
        _check_config(cfg, info.config)
    info.tokenizer_fingerprint = tokenizer_fingerprint(folder)
    info.chat_template = has_chat_template(folder)
    check_side_files(folder)
    files = safetensors_files(folder)
    if files:
        info.weight_format = "safetensors"
        info.tensors = tensor_metas(files)
    else:
        pk = pickle_files(folder)
        if pk:
            info.weight_format = "pickle"
            if not allow_pickle:
                raise CheckpointError(
                    f"{folder} has only pickle weights ({pk[0].name}), which can run code when loaded; "
                    "convert it to safetensors or pass --allow-pickle if you trust it"
                )
            check_pickle_weights(pk)
        else:
            raise CheckpointError(f"{folder} holds no weights (no *.safetensors or pytorch_model.bin); point `path` at a checkpoint folder")
    if not cfg.is_file():
        raise CheckpointError(f"{folder} has weights but no config.json; save the model with save_pretrained")
    _check_finite_shapes(info)
    problem = config_tensor_mismatch(info.config, info.tensors)
    if problem is not None:
        raise CheckpointError(f"{cfg} disagrees with the weights: {problem}; fix config.json or re-save the checkpoint")


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
    head_dim = cfg.get("head_dim") if _is_int(cfg.get("head_dim")) else (
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


# config.json fields aclarena reads, with the types they must have when present
_CONFIG_INTS = ("vocab_size", "max_position_embeddings", "n_positions", "hidden_size", "num_hidden_layers")


def _check_config(path: Path, cfg: dict[str, Any]) -> None:
    archs = cfg.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise CheckpointError(f"{path}: `architectures` must be a list of class names, got {archs!r}; fix config.json")
    if cfg.get("model_type") is not None and not isinstance(cfg["model_type"], str):
        raise CheckpointError(f"{path}: `model_type` must be a string, got {cfg['model_type']!r}; fix config.json")
    for key in _CONFIG_INTS:
        v = cfg.get(key)
        if v is not None and not (_is_int(v) and v > 0):
            raise CheckpointError(f"{path}: `{key}` must be a positive integer, got {v!r}; fix config.json")
    for key in ("tie_word_embeddings",):
        if cfg.get(key) is not None and not isinstance(cfg[key], bool):
            raise CheckpointError(f"{path}: `{key}` must be true or false, got {cfg[key]!r}; fix config.json")


def _check_adapter_config(path: Path, cfg: Any) -> None:
    """The fields of an adapter_config.json that aclarena, peft or vLLM read, each of its type."""
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path} is a JSON {type(cfg).__name__}, not an object; re-save the adapter")
    r = cfg.get("r")
    if r is not None and not (_is_int(r) and r > 0):
        raise CheckpointError(f"{path}: `r` must be a positive integer, got {r!r}; re-save the adapter")
    alpha = cfg.get("lora_alpha")
    if alpha is not None and not (isinstance(alpha, int | float) and not isinstance(alpha, bool)):
        raise CheckpointError(f"{path}: `lora_alpha` must be a number, got {alpha!r}; re-save the adapter")
    for key in ("alpha_pattern", "rank_pattern"):
        v = cfg.get(key)
        if v is not None and not (isinstance(v, dict) and all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in v.values())):
            raise CheckpointError(f"{path}: `{key}` must map module names to numbers; re-save the adapter")
    ranks = cfg.get("rank_pattern") or {}
    if not all(_is_int(x) and x > 0 for x in ranks.values()):
        raise CheckpointError(f"{path}: `rank_pattern` must map module names to positive integers; re-save the adapter")
    if cfg.get("peft_type") is not None and not isinstance(cfg["peft_type"], str):
        raise CheckpointError(f"{path}: `peft_type` must be a string, got {cfg['peft_type']!r}; re-save the adapter")
    targets = cfg.get("target_modules")
    if targets is not None and not (isinstance(targets, str) or (
            isinstance(targets, list) and all(isinstance(t, str) for t in targets))):
        raise CheckpointError(f"{path}: `target_modules` must be a list of module names or a string, got "
                              f"{_short(targets)}; re-save the adapter")
    if isinstance(targets, str) and targets != "all-linear":
        try:
            re.compile(targets)
        except (re.error, RecursionError):
            raise CheckpointError(f"{path}: `target_modules` {targets!r} is not a regular expression; re-save the "
                                  "adapter") from None
    mts = cfg.get("modules_to_save")
    if mts is not None and not (isinstance(mts, list) and all(isinstance(t, str) for t in mts)):
        raise CheckpointError(f"{path}: `modules_to_save` must be a list of module names, got {_short(mts)}; "
                              "re-save the adapter")
    # read as flags by peft and by aclarena (a string "false" would be taken as true)
    for key in ("use_rslora", "use_dora", "fan_in_fan_out", "inference_mode"):
        if cfg.get(key) is not None and not isinstance(cfg[key], bool):
            raise CheckpointError(f"{path}: `{key}` must be true or false, got {_short(cfg[key])}; re-save the adapter")
    base = cfg.get("base_model_name_or_path")
    if base is not None and not (isinstance(base, str) and "\x00" not in base):
        raise CheckpointError(f"{path}: `base_model_name_or_path` must be a string, got {_short(base)}; re-save the "
                              "adapter")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_adapter_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The adapter_config.json of a LoRA adapter folder, checked for its shape (one line if not).

    Every reader of adapters goes through it (:func:`inspect`, serving, merging), so that a
    config of the wrong shape is refused in one line before peft or vLLM reads it.
    """
    path = Path(folder) / "adapter_config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} is not a LoRA adapter folder (no adapter_config.json); point at a folder "
                              "saved by peft's save_pretrained")
    cfg = _read_json(path)
    _check_adapter_config(path, cfg)
    return cfg


def pattern_value(pattern: dict[str, Any], module: str, default: Any) -> Any:
    """The value of a peft ``rank_pattern`` / ``alpha_pattern`` for ``module``, else ``default``."""
    # PEFT's get_pattern_key: the first key that matches the end of the module path
    for key, value in pattern.items():
        try:
            if re.match(rf"(.*\.)?({key})$", module):
                return value
        except re.error:
            if module == key or module.endswith("." + key):
                return value
    return default


def _targets_module(targets: str | list[str], module: str) -> bool:
    """Whether peft's ``target_modules`` selects ``module`` (list: the name or its last parts; string: a regex)."""
    if isinstance(targets, str):
        return targets == "all-linear" or re.fullmatch(targets, module) is not None
    return any(module == t or module.endswith("." + t) for t in targets)


def check_adapter_tensors(path: Path, cfg: dict[str, Any], tensors: dict[str, TensorMeta]) -> None:
    """Refuse an adapter_config.json that contradicts the adapter's tensors: a rank (``r`` or
    ``rank_pattern``) other than the LoRA matrices', or ``target_modules`` that do not name a module
    the tensors adapt."""
    r = cfg.get("r") if cfg.get("r") is not None else 8  # peft's default
    ranks = cfg.get("rank_pattern") or {}
    targets = cfg.get("target_modules")
    for name, t in tensors.items():
        parsed = lora_module_of(name)
        if parsed is None or len(t.shape) < 2:
            continue
        module, ab = parsed
        want = pattern_value(ranks, module, r)
        got = t.shape[0] if ab == "A" else t.shape[1]
        if got != want:
            raise CheckpointError(f"{path}: rank {want} for {module} contradicts {name} of shape {list(t.shape)} "
                                  f"(rank {got}); re-save the adapter")
        if targets is not None and not _targets_module(targets, module):
            raise CheckpointError(f"{path}: `target_modules` {_short(targets)} does not select {module}, which the "
                                  "adapter's weights adapt; re-save the adapter")


def _same_weights(a: Path, b: Path, *, blocks: int = 16, block: int = 1 << 16) -> bool | None:
    """Whether two checkpoint folders hold the same weights: True / False, or None when it cannot be told.

    Tensor shapes first (headers only): a tensor both hold with other shapes is another model.
    With the same tensors, dtypes and file sizes, 16 blocks of 64 KiB spread over each file are
    compared, so the check reads at most 1 MiB per file. A copy of a checkpoint is the same; a
    re-save in another dtype or layout, or with an output head tied one way and not the other,
    cannot be told (None); so can nothing when either folder cannot be read.
    """
    try:
        fa, fb = safetensors_files(a), safetensors_files(b)
        if not fa or not fb:
            return None
        ma, mb = tensor_metas(fa), tensor_metas(fb)
        if any(ma[k].shape != mb[k].shape for k in ma.keys() & mb.keys()):
            return False
        if ma.keys() != mb.keys() or any(ma[k].dtype != mb[k].dtype for k in ma) \
                or [p.name for p in fa] != [p.name for p in fb]:
            return None
        for pa, pb in zip(fa, fb, strict=True):
            size = pa.stat().st_size
            if size != pb.stat().st_size:
                return None  # the same tensors laid out differently
            with open(pa, "rb") as x, open(pb, "rb") as y:
                for i in range(blocks):
                    at = (size - block) * i // max(blocks - 1, 1) if size > block else 0
                    x.seek(at)
                    y.seek(at)
                    if x.read(block) != y.read(block):
                        return False
    except (CheckpointError, OSError):
        return None
    return True


def adapter_base_mismatch(cfg: dict[str, Any], base: str | os.PathLike[str] | None) -> str | None:
    """Why ``base_model_name_or_path`` contradicts the model the adapter is applied on, or None.

    ``base`` is that model's folder or hub id. Judged only where it can be told: the adapter names
    an absolute folder that exists and holds other weights than ``base`` (another architecture, or
    bytes that differ; a copy of ``base`` elsewhere is the same), or a hub id other than ``base``'s
    when both are hub ids. A relative path, a folder that has moved or an empty field: no verdict.
    """
    named = cfg.get("base_model_name_or_path")
    if not isinstance(named, str) or not named or base is None or not str(base):
        return None
    base_s = str(base)
    if named == base_s:
        return None
    named_path, base_path = Path(os.path.expanduser(named)), Path(os.path.expanduser(base_s))
    if named_path.is_absolute():
        if not named_path.is_dir() or not base_path.is_dir():
            return None
        try:
            if named_path.samefile(base_path):
                return None
        except OSError:
            return None
        if _same_weights(named_path, base_path) is False:
            return f"it was trained on {named}, whose weights differ from {base_s}"
        return None
    if HUB_ID_RE.match(named) and HUB_ID_RE.match(base_s) and not base_path.exists() and not named_path.exists():
        return f"it was trained on {named}, not {base_s}"
    return None


def check_adapter_folder(folder: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None
                         ) -> dict[str, Any]:
    """Check a LoRA adapter folder before peft or vLLM reads it; returns its adapter_config.json.

    Its config's shape, its safetensors header, the config against the tensors, and (with
    ``base``, the folder or hub id of the model it is about to be applied on) the base it names.
    Its weights' values are checked by :func:`aclarena.models.tensors.check_finite_safetensors`.
    """
    folder = Path(folder)
    cfg = read_adapter_config(folder)
    weights = folder / "adapter_model.safetensors"
    if weights.is_file():
        check_adapter_tensors(folder / "adapter_config.json", cfg, tensor_metas([weights]))
    elif not (folder / "adapter_model.bin").is_file():
        raise CheckpointError(f"{folder} holds no adapter weights (adapter_model.safetensors)")
    why = adapter_base_mismatch(cfg, base)
    if why is not None:
        raise CheckpointError(f"adapter {folder} does not belong on this model: {why}; apply it to the model it was "
                              "trained on, or fix base_model_name_or_path in its adapter_config.json")
    return cfg


def _check_finite_shapes(info: CheckpointInfo) -> None:
    for t in info.tensors.values():
        if any(d < 0 for d in t.shape):
            raise CheckpointError(f"tensor {t.name} in {t.file} has a negative dimension; re-save the checkpoint")


def _inspect_adapter(
    info: CheckpointInfo,
    folder: Path,
    manifest: Manifest,
    run_dir: str | os.PathLike[str],
    allow_pickle: bool,
    seen: dict[str, CheckpointInfo],
) -> None:
    info.adapter_config = read_adapter_config(folder)
    spec = info.spec
    if spec.on is None:
        raise CheckpointError(
            f"{folder} is a LoRA adapter; add on = \"<base checkpoint name>\" to its manifest entry"
        )
    base = inspect(manifest.resolve(spec.on), manifest, run_dir, allow_pickle=allow_pickle, _seen=seen)
    info.config = base.config
    info.tokenizer_fingerprint = tokenizer_fingerprint(folder) or base.tokenizer_fingerprint
    info.chat_template = has_chat_template(folder) if tokenizer_fingerprint(folder) else base.chat_template
    check_side_files(folder)
    files = [folder / "adapter_model.safetensors"] if (folder / "adapter_model.safetensors").is_file() else []
    if files:
        info.weight_format = "safetensors"
        info.tensors = tensor_metas(files)
    elif (folder / "adapter_model.bin").is_file():
        info.weight_format = "pickle"
        if not allow_pickle:
            raise CheckpointError(
                f"{folder} has only pickle weights (adapter_model.bin); convert it to safetensors or pass --allow-pickle"
            )
        check_pickle_weights([folder / "adapter_model.bin"])
    else:
        raise CheckpointError(f"{folder} holds no adapter weights (adapter_model.safetensors)")
    if base.problem is not None:
        raise CheckpointError(f"its base {spec.on!r} cannot be loaded: {base.problem}")
    if info.tensors:
        check_adapter_tensors(folder / "adapter_config.json", info.adapter_config, info.tensors)
    why = adapter_base_mismatch(info.adapter_config, base.location)
    if why is not None:
        raise CheckpointError(f"adapter {folder} does not belong on {spec.on!r}: {why}; set `on` to the model it was "
                              "trained on, or fix base_model_name_or_path in its adapter_config.json")
    fit = base  # an adapter on another adapter (a chain of adapter stages) fits the full model at the chain's end
    while fit.source == "adapter" and fit.spec.on is not None:
        fit = inspect(manifest.resolve(fit.spec.on), manifest, run_dir, allow_pickle=allow_pickle, _seen=seen)
    if fit.source != "hub" and info.tensors:
        check_adapter_fits(info, fit)


_LORA_RE = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$")


def lora_module_of(tensor_name: str) -> tuple[str, str] | None:
    """``('model.layers.0.self_attn.q_proj', 'A')`` for a PEFT LoRA tensor name, else None."""
    m = _LORA_RE.match(tensor_name)
    return (m.group("module"), m.group("ab")) if m else None


def check_adapter_fits(adapter: CheckpointInfo, base: CheckpointInfo) -> None:
    """Refuse an adapter whose LoRA matrices do not fit its base's weights (names the tensor)."""
    for name, t in adapter.tensors.items():
        parsed = lora_module_of(name)
        if parsed is None:
            continue
        module, ab = parsed
        target = base.tensors.get(f"{module}.weight")
        if target is None:
            raise CheckpointError(
                f"adapter tensor {name} targets {module}.weight, which base {base.name!r} does not have; "
                "apply the adapter to the model it was trained on"
            )
        if len(target.shape) != 2 or len(t.shape) != 2:
            continue
        out_f, in_f = target.shape
        ok = t.shape[1] == in_f if ab == "A" else t.shape[0] == out_f
        if not ok:
            raise CheckpointError(
                f"adapter tensor {name} has shape {list(t.shape)} but base {base.name!r} has {module}.weight "
                f"of shape {list(target.shape)}; apply the adapter to the model it was trained on"
            )


def require_same_tokenizer(infos: list[CheckpointInfo]) -> str | None:
    """Refuse to compare checkpoints whose tokenizers differ; returns the common fingerprint."""
    known = [i for i in infos if i.tokenizer_fingerprint is not None]
    if not known:
        return None
    first = known[0]
    for other in known[1:]:
        if other.tokenizer_fingerprint != first.tokenizer_fingerprint:
            raise CheckpointError(
                f"tokenizers differ: {first.name!r} ({first.tokenizer_fingerprint}) and {other.name!r} "
                f"({other.tokenizer_fingerprint}); per-token results can only be compared with the same tokenizer"
            )
    return first.tokenizer_fingerprint


def inspect_all(manifest: Manifest, run_dir: str | os.PathLike[str], *, allow_pickle: bool = False) -> list[CheckpointInfo]:
    seen: dict[str, CheckpointInfo] = {}
    return [inspect(s, manifest, run_dir, allow_pickle=allow_pickle, _seen=seen) for s in manifest]


def find_checkpoint_folders(root: Path) -> list[Path]:
    """Sub-folders of ``root`` (any depth up to 3) that hold a model or an adapter."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        names = set(filenames)
        is_ckpt = "adapter_config.json" in names or (
            "config.json" in names and (names & {*SAFETENSORS_SINGLE, SAFETENSORS_INDEX, *PICKLE_NAMES}
                                        or any(n.endswith(".safetensors") for n in names))
        )
        if is_ckpt and Path(dirpath) != root:
            found.append(Path(dirpath))
            dirnames[:] = []
        elif depth >= 3:
            dirnames[:] = []
        else:
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not d.startswith("checkpoint-"))
    return found


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
