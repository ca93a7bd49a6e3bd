"""Writing a checkpoint tensor by tensor: safetensors shards whose headers are known up front.

A safetensors file is an 8-byte header length, a JSON header with every tensor's dtype,
shape and byte range, then the bytes. When the names, dtypes and shapes of every tensor are
known before the first byte is written (as they are for a weight merge: they are those of
the inputs), the headers can be written first and the tensors streamed after them, one at a
time, so that writing a model never needs it in memory::

    layout = [("model.embed_tokens.weight", torch.float32, (1000, 64)), ...]
    with ShardedWriter(folder, layout, max_shard_bytes=2 << 30) as w:
        for name, dtype, shape in layout:
            w.write(name, compute(name))      # in layout order
    copy_model_files(source_folder, folder)   # config, generation config, tokenizer

One shard is saved as ``model.safetensors``; several as ``model-0000i-of-0000N.safetensors``
with ``model.safetensors.index.json``, as ``save_pretrained`` names them, so the folder loads
with ``from_pretrained``. Files are written under temporary names and renamed once complete.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import torch

from aclarena.errors import CheckpointError

DTYPE_CODES: dict[torch.dtype, str] = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}
# What a model folder holds besides its weights (copied as they are).
MODEL_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def _nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    n = _itemsize(dtype)
    for d in shape:
        n *= int(d)
    return n


class ShardedWriter:
    """Stream tensors into safetensors shards of at most ``max_shard_bytes`` (a larger tensor gets its own)."""

    def __init__(self, folder: str | os.PathLike[str], layout: Sequence[tuple[str, torch.dtype, Sequence[int]]],
                 *, max_shard_bytes: int = 2 << 30, metadata: dict[str, str] | None = None) -> None:
        if max_shard_bytes < 1:
            raise ValueError(f"`max_shard_bytes` must be >= 1, got {max_shard_bytes}")
        self.folder = Path(folder)
        names = [n for n, _, _ in layout]
        if len(set(names)) != len(names):
            raise ValueError("tensor names repeat in the layout")
        for _, dtype, _ in layout:
            if dtype not in DTYPE_CODES:
                raise ValueError(f"dtype {dtype} cannot be written to safetensors")
        shards: list[list[tuple[str, torch.dtype, tuple[int, ...]]]] = [[]]
        size = 0
        for name, dtype, shape in layout:
            nb = _nbytes(dtype, shape)
            if shards[-1] and size + nb > max_shard_bytes:
                shards.append([])
                size = 0
            shards[-1].append((name, dtype, tuple(int(d) for d in shape)))
            size += nb
        n = len(shards)
        self.files = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        self._order = names
        self._next = 0
        self._partial = 0
        self._where: dict[str, tuple[int, torch.dtype, tuple[int, ...]]] = {}
        self._handles: list[tuple[Path, BinaryIO]] = []
        self._total = 0
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = {"format": "pt", **(metadata or {})}
        try:
            for i, shard in enumerate(shards):
                header: dict[str, object] = {"__metadata__": meta}
                offset = 0
                for name, dtype, shape in shard:
                    nb = _nbytes(dtype, shape)
                    header[name] = {"dtype": DTYPE_CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + nb]}
                    self._where[name] = (i, dtype, shape)
                    offset += nb
                    self._total += nb
                raw = json.dumps(header, separators=(",", ":")).encode()
                raw += b" " * (-len(raw) % 8)
                tmp = self.folder / f".{self.files[i]}.tmp"
                fh = open(tmp, "wb")  # noqa: SIM115 (closed in close())
                fh.write(len(raw).to_bytes(8, "little"))
                fh.write(raw)
                self._handles.append((tmp, fh))
        except OSError as e:
            self.abort()
            raise CheckpointError(f"cannot write in {self.folder}: {e.strerror or e}; choose a writable folder") from None

    @property
    def total_bytes(self) -> int:
        return self._total

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Write the next tensor of the layout (in layout order), converted to its dtype.

        A tensor may come in row blocks (first axis, in order): each call appends the next
        rows, and the tensor is complete once all its rows are written.
        """
        if self._next >= len(self._order) or self._order[self._next] != name:
            want = self._order[self._next] if self._next < len(self._order) else "nothing"
            raise ValueError(f"tensors must be written in layout order: expected {want}, got {name}")
        i, dtype, shape = self._where[name]
        whole = tuple(tensor.shape) == shape
        if not whole and (not shape or tuple(tensor.shape[1:]) != shape[1:]):
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, layout says {shape}")
        data = tensor.detach().to(device="cpu", dtype=dtype).contiguous()
        nb = data.numel() * _itemsize(dtype)
        need = _nbytes(dtype, shape)
        if self._partial + nb > need:
            raise ValueError(f"{name}: more rows written than its shape {shape} holds")
        buf = data.reshape(-1).view(torch.uint8) if data.numel() else torch.empty(0, dtype=torch.uint8)
        tmp, fh = self._handles[i]
        try:
            fh.write(buf.numpy().data.cast("B"))
        except OSError as e:
            self.abort()
            raise CheckpointError(f"cannot write {tmp.parent}: {e.strerror or e} (disk full?); free space and rerun") from None
        self._partial += nb
        if self._partial == need:
            self._partial = 0
            self._next += 1

    def close(self) -> None:
        """Finish every shard (all tensors must have been written) and write the index."""
        if self._next != len(self._order):
            missing = self._order[self._next]
            self.abort()
            raise ValueError(f"writer closed before {missing} was written")
        try:
            for _tmp, fh in self._handles:
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
            for (tmp, _), name in zip(self._handles, self.files, strict=True):
                os.replace(tmp, self.folder / name)
            if len(self.files) > 1:
                index = {"metadata": {"total_size": self._total},
                         "weight_map": {n: self.files[self._where[n][0]] for n in self._order}}
                (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        except OSError as e:
            self.abort()
            raise CheckpointError(f"cannot write {self.folder}: {e.strerror or e}; free space and rerun") from None
        self._handles = []

    def abort(self) -> None:
        """Close and delete the temporary shard files."""
        for tmp, fh in self._handles:
            try:
                fh.close()
            finally:
                tmp.unlink(missing_ok=True)
        self._handles = []

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def copy_model_files(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> list[str]:
    """Copy config, generation config and tokenizer files from ``source`` (weights excluded)."""
    src, dst = Path(source), Path(dest)
    dst.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in MODEL_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
            copied.append(name)
    return copied
