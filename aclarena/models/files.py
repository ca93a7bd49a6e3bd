"""A checkpoint's files read without loading it: safetensors headers, weight files, pickle refused.

Headers and small JSON files only (no torch); :mod:`aclarena.models.checkpoint` builds a checkpoint's
description from them. Weights are read from safetensors only; pickle files (``pytorch_model.bin``,
``*.pt``) need ``allow_pickle=True`` (``--allow-pickle``), and even then only their names are checked here.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError

SAFETENSORS_SINGLE = ("model.safetensors", "adapter_model.safetensors")


SAFETENSORS_INDEX = "model.safetensors.index.json"


PICKLE_NAMES = ("pytorch_model.bin", "adapter_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.bin")


HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}


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


def is_int(x: Any) -> bool:
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
        if not isinstance(shape, list) or not all(is_int(d) and d >= 0 for d in shape):
            raise bad(f"tensor {name!r} has shape {shape!r}, not a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets)
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
        except Exception as e:  # noqa: BLE001 (whatever torch's weights_only loader raises)
            raise CheckpointError(f"{f} cannot be loaded: {library_reason(e)}") from None


def is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and x == x  # not NaN


def read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise CheckpointError(f"{path} is not valid JSON; re-save the checkpoint") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object; re-save the checkpoint")
    return data


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

