"""Reading the weights of several checkpoints side by side, tensor by tensor, from safetensors.

Parameter-space analyses (task vectors, displacement, weight merging) need the same tensor of
K checkpoints at once, never K whole models. :class:`TensorReader` lines the checkpoints up
from their safetensors headers (sharded indexes included), refuses checkpoints that are not of
one model with one line naming the tensor and both checkpoints, and then reads each tensor of
each checkpoint exactly once, in file order, so each file is read once from start to end::

    infos = [inspect(manifest.resolve(n), manifest, run_dir) for n in ("base", "seq-math", "seq-search")]
    with TensorReader(infos) as reader:
        for name in reader.names:
            for chunk in reader.chunks(name, max_elements=1 << 18):
                ...  # chunk.tensors: the rows chunk.start:chunk.stop of `name`, one per checkpoint
        # or whole tensors, e.g. to merge weights:
        for name, tensors in reader:
            ...

Tensors come in their stored dtype (convert as needed). Reads go through ``os.preadv`` into
buffers the reader owns rather than through a memory map: a map of every shard keeps each page
it touched in the process's resident set (three 1 GB checkpoints streamed through
``safetensors.safe_open`` peaked at 3.4 GB RSS), whereas buffered reads hold at most
``K × max_elements`` entries (``K ×`` the largest tensor for whole-tensor reads).

Tied weights are counted once: an output head (``lm_head.weight``) that is missing or
duplicated because the config ties it to the input embeddings is left out. Only floating
tensors take part; integer buffers are skipped.

LoRA adapters are read with :func:`read_lora`: their factors, keyed by the name of the base
tensor they modify, with the scaling PEFT applies (``lora_alpha / r``, or
``lora_alpha / sqrt(r)`` with rsLoRA, per-module ``alpha_pattern`` included).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aclarena.diagnostics.task_vectors import LoraFactors
from aclarena.errors import CheckpointError
from aclarena.models.adapter_files import lora_module_of, pattern_value
from aclarena.models.checkpoint import CheckpointInfo, NonFiniteWeightsError, inspect
from aclarena.models.files import read_safetensors_header
from aclarena.store.manifest import Manifest

TORCH_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
HEAD_NAMES = ("lm_head.weight",)

__all__ = [
    "LoraFactors",
    "RowChunk",
    "TensorReader",
    "check_finite_checkpoint",
    "check_finite_safetensors",
    "checkpoint_fingerprint",
    "read_lora",
]


@dataclass(frozen=True)
class _Loc:
    """Where one tensor's bytes are: file, absolute offset, stored dtype and shape."""

    file: Path
    offset: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_shape(self) -> tuple[int, ...]:
        return self.shape[1:] if self.shape else ()

    @property
    def row_bytes(self) -> int:
        n = ITEMSIZE[self.dtype]
        for d in self.row_shape:
            n *= d
        return n


@dataclass(frozen=True)
class RowChunk:
    """Rows ``start:stop`` (first axis) of one tensor, one tensor per checkpoint (stored dtype)."""

    name: str
    start: int
    stop: int
    tensors: tuple[torch.Tensor, ...]


def _layout(path: Path) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """``{name: (dtype, shape, absolute begin, absolute end)}`` for a safetensors file."""
    meta = read_safetensors_header(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    out = {}
    for name, v in meta.items():
        if name == "__metadata__":
            continue
        begin, end = v["data_offsets"]
        out[name] = (v["dtype"], tuple(v["shape"]), 8 + n + begin, 8 + n + end)
    return out


def _pread_into(fd: int, buf: memoryview, offset: int, path: Path) -> None:
    done = 0
    while done < len(buf):
        got = os.preadv(fd, [buf[done:]], offset + done)
        if got <= 0:
            raise CheckpointError(f"{path} ended early at byte {offset + done}; the file is truncated, re-save the checkpoint")
        done += got


def _tied(info: CheckpointInfo) -> bool | None:
    cfg = info.config
    for c in (cfg, cfg.get("text_config") or {}):
        if isinstance(c, dict) and "tie_word_embeddings" in c:
            return bool(c["tie_word_embeddings"])
    return None


class TensorReader:
    """The aligned floating tensors of K full checkpoints, read tensor by tensor.

    Args:
        infos: the checkpoints (from :func:`aclarena.models.checkpoint.inspect`), all local
            HF folders with safetensors weights of one architecture. Adapters are read with
            :func:`read_lora` instead.

    Raises:
        CheckpointError: a checkpoint cannot be read, the architectures differ, or a tensor is
            missing from one checkpoint or has another shape there (one line naming the tensor
            and both checkpoints).

    Attributes:
        checkpoints: the checkpoint names, in the order tensors are returned.
        names: the aligned tensor names, in read order.
        tied: output-head tensors left out because they are tied to the embeddings.
        skipped: non-floating tensors left out.
    """

    def __init__(self, infos: Sequence[CheckpointInfo]) -> None:
        if not infos:
            raise CheckpointError("no checkpoints to read; name at least one")
        for info in infos:
            info.require_loadable()
            if info.source == "hub":
                raise CheckpointError(
                    f"checkpoint {info.name!r} is a hub id ({info.location}); parameter diagnostics read local "
                    "safetensors: download it and point `path` at the folder"
                )
            if info.source == "adapter":
                raise CheckpointError(f"checkpoint {info.name!r} is a LoRA adapter; read it with read_lora, not TensorReader")
            if info.weight_format != "safetensors":
                raise CheckpointError(
                    f"checkpoint {info.name!r} has {info.weight_format} weights; parameter diagnostics read safetensors "
                    "only: convert it (save_pretrained(safe_serialization=True))"
                )
        names = [i.name for i in infos]
        if len(set(names)) != len(names):
            raise CheckpointError(f"checkpoints repeat in {names}; name each once")
        self.checkpoints: tuple[str, ...] = tuple(names)
        self._check_architectures(infos)
        locs: list[dict[str, _Loc]] = []
        self._files: list[list[Path]] = []
        self.skipped: tuple[str, ...] = ()
        skipped: set[str] = set()
        for info in infos:
            files = sorted({t.file for t in info.tensors.values()})
            self._files.append(files)
            table: dict[str, _Loc] = {}
            for path in files:
                for name, (dtype, shape, begin, end) in _layout(path).items():
                    if dtype not in TORCH_DTYPES:
                        skipped.add(name)
                        continue
                    loc = _Loc(path, begin, dtype, shape)
                    if end - begin != loc.rows * loc.row_bytes:
                        raise CheckpointError(f"tensor {name} in {path} has {end - begin} bytes for shape {list(shape)}; "
                                              "re-save the checkpoint")
                    table[name] = loc
            locs.append(table)
        self.skipped = tuple(sorted(skipped))
        self.tied = self._drop_tied(infos, locs)
        self._align(infos, locs)
        self._locs = locs
        first = locs[0]
        file_rank = {p: i for i, p in enumerate(self._files[0])}
        # file order of the first checkpoint: each of its files is read front to back, once
        self.names: tuple[str, ...] = tuple(sorted(first, key=lambda n: (file_rank[first[n].file], first[n].offset)))
        self._fds: dict[Path, int] = {}
        self._bufs: list[torch.Tensor] = [torch.empty(0, dtype=torch.uint8) for _ in infos]

    # --- validation ------------------------------------------------------------------------
    @staticmethod
    def _check_architectures(infos: Sequence[CheckpointInfo]) -> None:
        first = infos[0]
        for other in infos[1:]:
            a, b = first.architecture, other.architecture
            if a is not None and b is not None and a != b:
                raise CheckpointError(
                    f"checkpoints {first.name!r} ({a}) and {other.name!r} ({b}) have different architectures; "
                    "parameter diagnostics compare checkpoints of one model"
                )

    def _drop_tied(self, infos: Sequence[CheckpointInfo], locs: list[dict[str, _Loc]]) -> tuple[str, ...]:
        dropped = []
        for head in HEAD_NAMES:
            having = [k for k, t in enumerate(locs) if head in t]
            if not having:
                continue
            if len(having) < len(locs):
                # missing where the config ties it (or says nothing), a duplicate where present
                drop = all(_tied(i) is not False for i in infos)
            else:
                drop = all(_tied(i) is True for i in infos)
            if drop:
                for k in having:
                    del locs[k][head]
                dropped.append(head)
        return tuple(dropped)

    def _align(self, infos: Sequence[CheckpointInfo], locs: list[dict[str, _Loc]]) -> None:
        first, ref = infos[0], locs[0]
        for info, table in zip(infos[1:], locs[1:], strict=True):
            for name, loc in ref.items():
                other = table.get(name)
                if other is None:
                    raise CheckpointError(
                        f"tensor {name} is in {first.name!r} but not in {info.name!r}; parameter diagnostics compare "
                        "checkpoints of one model (same tensor names)"
                    )
                if other.shape != loc.shape:
                    raise CheckpointError(
                        f"tensor {name} has shape {list(loc.shape)} in {first.name!r} but {list(other.shape)} in "
                        f"{info.name!r}; parameter diagnostics compare checkpoints of one model"
                    )
            for name in table:
                if name not in ref:
                    raise CheckpointError(
                        f"tensor {name} is in {info.name!r} but not in {first.name!r}; parameter diagnostics compare "
                        "checkpoints of one model (same tensor names)"
                    )

    # --- metadata --------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        return self._locs[0][name].shape

    def rows(self, name: str) -> int:
        """Length of the first axis (1 for a scalar)."""
        return self._locs[0][name].rows

    def numel(self, name: str) -> int:
        loc = self._locs[0][name]
        return loc.rows * (loc.row_bytes // ITEMSIZE[loc.dtype])

    def dtypes(self, name: str) -> tuple[torch.dtype, ...]:
        """The stored dtype of ``name`` in each checkpoint."""
        return tuple(TORCH_DTYPES[t[name].dtype] for t in self._locs)

    def nbytes(self, name: str, k: int | None = None) -> int:
        """Bytes of ``name`` in checkpoint ``k`` (all checkpoints together when ``k`` is None)."""
        tables = self._locs if k is None else [self._locs[k]]
        return sum(t[name].rows * t[name].row_bytes for t in tables)

    @property
    def total_bytes(self) -> int:
        return sum(self.nbytes(n) for n in self.names)

    # --- reading ---------------------------------------------------------------------------
    def _fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError as e:
                raise CheckpointError(f"cannot read {path}: {e.strerror}") from None
            self._fds[path] = fd
        return fd

    def read_rows(self, name: str, k: int, start: int, stop: int, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``start:stop`` of ``name`` in checkpoint ``k``, stored dtype, shape ``(rows, *rest)``.

        ``out`` (a uint8 tensor of at least the bytes needed) is filled and viewed instead of a
        new buffer; the result then shares its memory.
        """
        loc = self._locs[k][name]
        if not 0 <= start <= stop <= loc.rows:
            raise IndexError(f"rows {start}:{stop} out of range for {name} ({loc.rows} rows)")
        nbytes = (stop - start) * loc.row_bytes
        buf = torch.empty(nbytes, dtype=torch.uint8) if out is None else out[:nbytes]
        if nbytes:
            _pread_into(self._fd(loc.file), buf.numpy().data.cast("B"), loc.offset + start * loc.row_bytes, loc.file)
        return buf.view(TORCH_DTYPES[loc.dtype]).view(stop - start, *loc.row_shape)

    def read(self, name: str) -> list[torch.Tensor]:
        """The whole tensor ``name`` from every checkpoint (stored dtype, stored shape)."""
        out = []
        for k in range(len(self.checkpoints)):
            loc = self._locs[k][name]
            out.append(self.read_rows(name, k, 0, loc.rows).view(loc.shape))
        return out

    def __iter__(self) -> Iterator[tuple[str, list[torch.Tensor]]]:
        """``(name, [tensor of each checkpoint])`` for every aligned tensor, in read order."""
        for name in self.names:
            yield name, self.read(name)

    def chunks(self, name: str, max_elements: int = 1 << 18, *, reuse: bool = False) -> Iterator[RowChunk]:
        """Row blocks of ``name`` of at most ``max_elements`` entries (at least one row).

        With ``reuse=True`` the chunks share buffers the reader owns: each is valid until the
        next one is produced (no allocation per chunk; for accumulators that consume it at once).
        """
        if max_elements < 1:
            raise ValueError(f"`max_elements` must be >= 1, got {max_elements}")
        loc = self._locs[0][name]
        per_row = max(1, loc.row_bytes // ITEMSIZE[loc.dtype])
        step = max(1, max_elements // per_row)
        for start in range(0, loc.rows, step):
            stop = min(loc.rows, start + step)
            tensors = []
            for k in range(len(self.checkpoints)):
                out = None
                if reuse:
                    need = (stop - start) * self._locs[k][name].row_bytes
                    if self._bufs[k].numel() < need:
                        self._bufs[k] = torch.empty(need, dtype=torch.uint8)
                    out = self._bufs[k]
                tensors.append(self.read_rows(name, k, start, stop, out=out))
            yield RowChunk(name, start, stop, tuple(tensors))

    def _row_blocks(self, names: Sequence[str], max_elements: int) -> Iterator[tuple[str, int, int]]:
        for name in names:
            loc = self._locs[0][name]
            per_row = max(1, loc.row_bytes // ITEMSIZE[loc.dtype])
            step = max(1, max_elements // per_row)
            if loc.rows == 0:
                yield name, 0, 0
            for start in range(0, loc.rows, step):
                yield name, start, min(loc.rows, start + step)

    def stream(self, names: Sequence[str] | None = None, max_elements: int = 1 << 16, *,  # noqa: C901
               prefetch: int = 2) -> Iterator[RowChunk]:
        """Row blocks of every tensor of ``names`` (all, in read order, by default), read ahead.

        A background thread reads up to ``prefetch`` blocks ahead while the caller works on the
        current one (the reads release the GIL), so reading and computing overlap. Each block is
        valid until the next one is requested: its buffers are then recycled. Every tensor yields
        at least one block (an empty one for a tensor without entries), in order, so a change of
        ``chunk.name`` marks the end of a tensor. Read errors are raised here.
        """
        if max_elements < 1:
            raise ValueError(f"`max_elements` must be >= 1, got {max_elements}")
        names = list(self.names if names is None else names)
        for n in names:
            if n not in self._locs[0]:
                raise KeyError(n)
        k_all = range(len(self.checkpoints))
        ring_size = max(1, prefetch) + 2
        ring = [[torch.empty(0, dtype=torch.uint8) for _ in k_all] for _ in range(ring_size)]
        q: queue.Queue[Any] = queue.Queue(maxsize=max(1, prefetch))
        stop = threading.Event()
        end = object()

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for n, (name, a, b) in enumerate(self._row_blocks(names, max_elements)):
                    bufs = ring[n % ring_size]
                    tensors = []
                    for k in k_all:
                        need = (b - a) * self._locs[k][name].row_bytes
                        if bufs[k].numel() < need:
                            bufs[k] = torch.empty(need, dtype=torch.uint8)
                        tensors.append(self.read_rows(name, k, a, b, out=bufs[k]))
                    if not put(RowChunk(name, a, b, tuple(tensors))):
                        return
                put(end)
            except BaseException as e:  # handed to the consumer, raised there
                put(e)

        worker = threading.Thread(target=produce, name="aclarena-tensor-reader", daemon=True)
        worker.start()
        try:
            while True:
                item = q.get()
                if item is end:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            worker.join()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._bufs = [torch.empty(0, dtype=torch.uint8) for _ in self.checkpoints]

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- LoRA adapters ---------------------------------------------------------------------------------


def read_lora(info: CheckpointInfo) -> dict[str, LoraFactors]:
    """The LoRA deltas of an adapter, keyed by the base tensor each modifies (``….q_proj.weight``).

    Raises:
        CheckpointError: not a LoRA adapter, or it holds what parameter diagnostics cannot
            express as ``s·B·A`` on a base weight (DoRA, embedding LoRA, ``modules_to_save``).
    """
    info.require_loadable()
    if info.source != "adapter":
        raise CheckpointError(f"checkpoint {info.name!r} is not an adapter folder")
    if info.weight_format != "safetensors":
        raise CheckpointError(
            f"adapter {info.name!r} has {info.weight_format} weights; parameter diagnostics read safetensors only"
        )
    cfg = info.adapter_config
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise CheckpointError(f"adapter {info.name!r} is {cfg.get('peft_type')}, not LoRA; only LoRA adapters are supported")
    if cfg.get("use_dora"):
        raise CheckpointError(f"adapter {info.name!r} uses DoRA, whose update is not s·B·A; only plain LoRA is supported")
    if cfg.get("target_parameters"):
        raise CheckpointError(f"adapter {info.name!r} targets parameters directly (target_parameters); not supported")
    alpha = float(cfg.get("lora_alpha", cfg.get("r", 8)))
    rslora = bool(cfg.get("use_rslora", False))
    fan = bool(cfg.get("fan_in_fan_out", False))
    alpha_pattern = cfg.get("alpha_pattern") or {}
    files = sorted({t.file for t in info.tensors.values()})
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for path in files:
        layout = _layout(path)
        with open(path, "rb") as f:
            for name, (dtype, shape, begin, end) in layout.items():
                parsed = lora_module_of(name)
                if parsed is None:
                    raise CheckpointError(
                        f"adapter {info.name!r} holds {name}, which is not a LoRA A/B matrix (embedding LoRA, DoRA or "
                        "modules_to_save); parameter diagnostics support plain LoRA on linear layers"
                    )
                if dtype not in TORCH_DTYPES:
                    raise CheckpointError(f"adapter tensor {name} of {info.name!r} has dtype {dtype}; expected floats")
                f.seek(begin)
                raw = f.read(end - begin)
                t = torch.frombuffer(bytearray(raw), dtype=TORCH_DTYPES[dtype]).view(shape) if raw else \
                    torch.zeros(shape, dtype=TORCH_DTYPES[dtype])
                module, ab = parsed
                parts.setdefault(module, {})[ab] = t
    out: dict[str, LoraFactors] = {}
    for module, factors in parts.items():
        if set(factors) != {"A", "B"}:
            missing = ({"A", "B"} - set(factors)).pop()
            raise CheckpointError(f"adapter {info.name!r} has no lora_{missing} for {module}; re-save the adapter")
        a, b = factors["A"], factors["B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise CheckpointError(
                f"adapter {info.name!r}: {module} has lora_A {list(a.shape)} and lora_B {list(b.shape)}, which do not "
                "multiply; only LoRA on linear layers is supported"
            )
        r = a.shape[0]
        a_m = float(pattern_value(alpha_pattern, module, alpha))
        scale = a_m / math.sqrt(r) if rslora else a_m / r
        out[f"{module}.weight"] = LoraFactors(A=a, B=b, scale=scale, fan_in_fan_out=fan)
    return out


def read_lora_chain(info: CheckpointInfo, infos: Callable[[str], CheckpointInfo]) -> tuple[str, dict[str, LoraFactors]]:
    """An adapter's weights as a delta on the full model at the end of its chain of ``on`` (an adapter applied
    on another adapter, as a stage trained from an adapter stage is): ``(that model's name, the summed deltas)``
    (:func:`aclarena.diagnostics.task_vectors.stack_loras`); ``infos`` inspects a checkpoint by name.

    Raises:
        CheckpointError: as :func:`read_lora`, for any adapter of the chain, or two of them that modify one
            weight in other layouts.
    """
    from aclarena.diagnostics.task_vectors import stack_loras

    chain = [info]
    while chain[-1].source == "adapter":
        on = chain[-1].spec.on
        if on is None:
            raise CheckpointError(f"adapter {chain[-1].name!r} names no checkpoint it applies to (`on`)")
        chain.append(infos(on))
    layers = [read_lora(i) for i in reversed(chain[:-1])]
    try:
        return chain[-1].name, stack_loras(layers)
    except ValueError as e:
        raise CheckpointError(f"adapter {info.name!r}: {e}") from None


def check_lora_targets(adapter: str, factors: dict[str, LoraFactors], reader: TensorReader, on: str) -> None:
    """Refuse an adapter whose targets are not tensors of ``reader`` of the right shape."""
    names = set(reader.names)
    for target, lo in factors.items():
        if target not in names:
            extra = " (tied to the embeddings)" if target in reader.tied else ""
            raise CheckpointError(
                f"adapter {adapter!r} modifies {target}, which {on!r} does not have{extra}; apply the adapter to the "
                "model it was trained on"
            )
        if tuple(reader.shape(target)) != lo.shape:
            raise CheckpointError(
                f"adapter {adapter!r} modifies {target} with a delta of shape {list(lo.shape)} but {on!r} has shape "
                f"{list(reader.shape(target))}; apply the adapter to the model it was trained on"
            )


def checkpoint_fingerprint(info: CheckpointInfo, on: CheckpointInfo | None = None, *,
                           on_fingerprint: str | None = None) -> str:
    """A short hash of a checkpoint's weight files (names, sizes, modification times) and configs.

    Cheap (no weights are read), and it changes when a checkpoint is re-saved, so finished
    results can be reused only while their checkpoints are unchanged. For an adapter, pass the
    inspected base it applies to as ``on`` (or that base's own fingerprint as ``on_fingerprint``)
    so that re-saving the base changes the hash too.
    """
    h = hashlib.sha256()
    files = sorted({t.file for t in info.tensors.values()})
    entries = []
    for path in files:
        st = path.stat()
        entries.append([path.name, st.st_size, st.st_mtime_ns])
    h.update(json.dumps({"files": entries, "config": info.config, "adapter": info.adapter_config,
                         "on": info.spec.on}, sort_keys=True, default=str).encode())
    if on_fingerprint is not None:
        h.update(on_fingerprint.encode())
    elif on is not None:
        h.update(checkpoint_fingerprint(on).encode())
    return h.hexdigest()[:16]


def weights_fingerprint(info: CheckpointInfo, manifest: Manifest, run_dir: str | os.PathLike[str]) -> str:
    """The checkpoint's fingerprint, including its base's when it is an adapter, down the whole chain of
    adapters (what a probe set records of the weights that generated it, and ``tokens`` checks before reusing
    it: issue 43). An adapter on a full model hashes as ``checkpoint_fingerprint(info, on=base)`` did, so
    results stored before chains were followed stay valid; an adapter on an adapter now changes when any
    adapter below it is re-saved (it followed one level only)."""
    if info.source == "adapter" and info.spec.on:
        parent = inspect(manifest.resolve(info.spec.on), manifest, run_dir, allow_pickle=True)
        return checkpoint_fingerprint(info, on_fingerprint=weights_fingerprint(parent, manifest, run_dir))
    return checkpoint_fingerprint(info)


def check_finite_safetensors(files: Sequence[Path], name: str, *, chunk: int = 1 << 22) -> None:
    """Refuse safetensors files holding a NaN or infinite floating entry, reading them from disk.

    For weights that are handed to a loader aclarena does not run itself (vLLM, peft's
    ``load_adapter``): the same one line as :func:`aclarena.models.loading.check_finite_weights`,
    naming ``name`` and the tensor. Each floating tensor is read in chunks of ``chunk`` entries
    through one reused buffer, so the check holds little memory whatever the model's size.
    """
    from aclarena.models.loading import nonfinite_message

    buf = bytearray()
    for path in files:
        layout = _layout(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            for tname, (dtype, _shape, begin, end) in sorted(layout.items(), key=lambda kv: kv[1][2]):
                if dtype not in TORCH_DTYPES or end == begin:
                    continue
                step = chunk * ITEMSIZE[dtype]
                for at in range(begin, end, step):
                    n = min(step, end - at)
                    if len(buf) < n:
                        buf = bytearray(n)
                    view = memoryview(buf)[:n]
                    _pread_into(fd, view, at, path)
                    t = torch.frombuffer(view, dtype=TORCH_DTYPES[dtype])
                    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
                        t = t.float()
                    if not bool(torch.isfinite(t).all()):
                        what = "NaN" if bool(torch.isnan(t).any()) else "infinite"
                        raise NonFiniteWeightsError(nonfinite_message(name, what, f"tensor {tname} in {path.name}"))
        finally:
            os.close(fd)


def check_finite_checkpoint(info: CheckpointInfo) -> None:
    """:func:`check_finite_safetensors` over an inspected checkpoint's safetensors files.

    Hub ids (the files are not here yet) and pickle weights (reading them means unpickling) are
    not checked; an adapter's base is checked where the base itself is loaded.
    """
    info.require_loadable()
    if info.source == "hub" or info.weight_format != "safetensors":
        return
    check_finite_safetensors(sorted({t.file for t in info.tensors.values()}), info.name)
