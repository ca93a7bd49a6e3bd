"""Merging whole checkpoints out of core: read tensor by tensor, merge, stream to safetensors.

:func:`merge_checkpoints` lines the checkpoints up with
:class:`aclarena.models.tensors.TensorReader` (headers only, then each file read once, front to
back, through ``preadv``), applies a method of :mod:`aclarena.consolidate.merging` to one tensor
at a time, and streams the result into safetensors shards with
:class:`aclarena.models.writing.ShardedWriter`; config, generation config and tokenizer are
copied from the first merged checkpoint, so the output is an ordinary HF folder.

Memory: element-wise methods (uniform, task arithmetic) work on row blocks of
``block_elements`` entries per checkpoint; TIES (which ranks a whole tensor's magnitudes) and
DARE (whose masks are drawn per whole tensor, so a merge does not depend on block sizes) hold
one tensor of each checkpoint at a time: ``K + 2`` float32 copies of the largest tensor.

mergekit (0.1.5) installs with this project's pins and merges out of core as well; this module
exists so that merges run with no extra dependency and write the run's own marker and
manifest entries (docs/consolidation.md compares the two).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from aclarena.consolidate import merging
from aclarena.errors import AclarenaError, CheckpointError
from aclarena.models.checkpoint import CheckpointInfo, require_same_tokenizer
from aclarena.models.tensors import LoraFactors, TensorReader
from aclarena.models.writing import ShardedWriter, copy_model_files

MARKER = "consolidation.json"
MERGE_METHODS = merging.METHODS
BLOCK_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class MergeSpec:
    """A merge: ``method`` (uniform, task_arithmetic, ties, dare) and its settings.

    ``lam`` scales the merged task vector (task arithmetic, TIES, DARE); ``density`` is the
    share of entries TIES keeps; ``p`` DARE's drop rate and ``seed`` its mask seed.
    """

    method: str
    lam: float = 1.0
    density: float = 0.2
    p: float = 0.9
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in MERGE_METHODS:
            from aclarena.errors import unknown_name

            raise unknown_name("merge method", self.method, MERGE_METHODS)
        if not (self.lam == self.lam and abs(self.lam) < float("inf")):
            raise AclarenaError(f"λ must be a finite number, got {self.lam!r}")
        if not 0.0 < self.density <= 1.0:
            raise AclarenaError(f"TIES density must be in (0, 1], got {self.density!r}; e.g. 0.2 keeps the top 20%")
        if not 0.0 <= self.p < 1.0:
            raise AclarenaError(f"DARE drop rate must be in [0, 1), got {self.p!r}; e.g. 0.9")

    @property
    def needs_base(self) -> bool:
        return self.method != "uniform"

    def identity(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        if self.method in ("task_arithmetic", "ties", "dare"):
            out["lam"] = self.lam
        if self.method == "ties":
            out["density"] = self.density
        if self.method == "dare":
            out |= {"p": self.p, "seed": self.seed}
        return out


@dataclass
class MergeResult:
    folder: Path
    spec: MergeSpec
    sources: list[str]
    base: str | None
    n_tensors: int
    bytes_written: int
    seconds: float
    reused: bool = False
    copied: list[str] = field(default_factory=list)
    updates_from: list[str] | None = None
    fingerprint: str = ""


def check_mergeable(infos: Sequence[CheckpointInfo]) -> None:
    """One line when checkpoints cannot be merged: not loadable, adapters, other architectures or tokenizers."""
    for info in infos:
        info.require_loadable()
        if info.source == "adapter":
            raise CheckpointError(
                f"checkpoint {info.name!r} is a LoRA adapter; merge adapters with merge_lora_adapters (peft), "
                "full checkpoints with merge_checkpoints"
            )
    first = infos[0]
    for other in infos[1:]:
        a, b = first.architecture, other.architecture
        if a is not None and b is not None and a != b:
            raise CheckpointError(
                f"cannot merge {first.name!r} ({a}) with {other.name!r} ({b}): weight merging needs checkpoints of "
                "one architecture trained from one base"
            )
        for key in ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size"):
            x, y = first.config.get(key), other.config.get(key)
            if x is not None and y is not None and x != y:
                raise CheckpointError(
                    f"cannot merge {first.name!r} ({key} {x}) with {other.name!r} ({key} {y}): weight merging needs "
                    "checkpoints of one architecture and size"
                )
    try:
        require_same_tokenizer(list(infos))
    except CheckpointError as e:
        raise CheckpointError(f"{e}; merged weights would mix token ids") from None


def fingerprint(spec: MergeSpec, infos: Sequence[CheckpointInfo], base: CheckpointInfo | None,
                starts: Sequence[CheckpointInfo] | None = None,
                adapter_on: Mapping[str, CheckpointInfo] | None = None) -> str:
    import hashlib

    from aclarena.models.tensors import checkpoint_fingerprint

    on = dict(adapter_on or {})

    def fp(i: CheckpointInfo) -> str:
        return checkpoint_fingerprint(i, on=on.get(i.name))

    # version 2: task vectors are measured from each source's start (version 1 took θ_i − θ_base always)
    ident = {"spec": spec.identity(), "sources": [[i.name, fp(i)] for i in infos],
             "base": [base.name, fp(base)] if base is not None else None,
             "starts": [[s.name, fp(s)] for s in starts] if starts is not None else None,
             "version": 2}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def temporary_folder(out: Path) -> Path:
    """A new folder of a unique name beside ``out`` (``.NAME.tmp-PID-RANDOM``) that an output is written into before
    it is complete: two writers of one name never share it, and the leftovers of killed writers are removed."""
    from aclarena.store.staging import staging_folder

    legacy = out.parent / f".{out.name}.tmp"  # the fixed name of earlier versions
    if legacy.is_dir() and not legacy.is_symlink():
        shutil.rmtree(legacy, ignore_errors=True)
    try:
        return staging_folder(out, "tmp")
    except OSError as e:
        raise CheckpointError(f"cannot create {out.parent}: {e.strerror or e}; choose a writable --run") from None


@contextlib.contextmanager
def removed_on_failure(tmp: Path) -> Iterator[None]:
    """Remove the half-written ``tmp`` when the block raises (or is interrupted), then re-raise: a failed
    merge or repair leaves no partial output and the earlier one, if any, in place."""
    try:
        yield
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish(tmp: Path, out: Path, marker: dict[str, Any],
            lock: Callable[[], contextlib.AbstractContextManager[Any]] | None = None) -> None:
    """Write ``marker`` into the finished ``tmp`` and rename it to ``out`` (replacing an earlier output), under
    ``lock`` (the run's write lock) when given; ``out`` is checked there again: not a symbolic link."""
    from aclarena.store.staging import replace_folder

    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    with lock() if lock is not None else contextlib.nullcontext():
        try:
            if out.is_symlink() or out.parent.is_symlink():
                link = out if out.is_symlink() else out.parent
                raise CheckpointError(f"{link} is a symbolic link (to {os.path.realpath(link)}); the output would "
                                      "land there: remove the link (nothing was written)")
            replace_folder(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def read_marker(folder: Path) -> dict[str, Any] | None:
    """A finished merge's marker, or None when there is none or it is not of the marker's shape
    (then the merge is redone into the folder, as for a marker of other settings)."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("fingerprint"), str):
        return None
    counts = [data.get(k, 0) for k in ("n_tensors", "bytes")]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        return None
    updates = data.get("updates_from")
    if updates is not None and not (isinstance(updates, list) and all(isinstance(u, str) for u in updates)):
        return None
    return data


def merge_checkpoints(  # noqa: C901
    infos: Sequence[CheckpointInfo],
    spec: MergeSpec,
    out: str | os.PathLike[str],
    *,
    base: CheckpointInfo | None = None,
    starts: Sequence[CheckpointInfo] | None = None,
    max_shard_bytes: int = 2 << 30,
    block_elements: int = BLOCK_ELEMENTS,
    out_dtype: torch.dtype | None = None,
    force: bool = False,
    on_tensor: Any = None,
    lock: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    adapter_on: Mapping[str, CheckpointInfo] | None = None,
) -> MergeResult:
    """Merge full checkpoints ``infos`` (with ``base`` for the task-vector methods) into ``out``.

    A LoRA adapter among ``infos`` (or ``starts``) takes part as its model plus its update, ``θ_on + s·B·A``:
    ``adapter_on`` maps its name to the inspected model it is on, and the update is added to that model's
    rows as they are read (:meth:`LoraFactors.delta_rows`), one row block at a time, so the output is a full
    checkpoint and TIES and DARE apply to adapters as to any checkpoint.

    ``starts`` (task-vector methods only) names, per source, the checkpoint its update is
    measured from: ``τ_i = θ_i − θ_(starts[i])``; the merge is still ``θ_base + λ (...)``. For the
    stage ends of one sequential chain pass each stage's parent stage end (the base for the first):
    the stage updates then add up to the end point's total update instead of counting early
    stages once per later stage. By default every source starts at ``base``.

    The output folder is written under a temporary name and renamed when complete, with a
    marker holding the settings; a rerun with the same inputs and settings reuses it.

    Raises:
        CheckpointError: other architectures, other tokenizers, unreadable files, an adapter that does not fit
            the model it is on.
        AclarenaError: fewer than one model, a task-vector method without a base, an adapter without its model.
    """
    if not infos:
        raise AclarenaError("nothing to merge: name at least one checkpoint")
    if spec.needs_base and base is None:
        raise AclarenaError(f"{spec.method} merges task vectors θ_i − θ_base: name the base checkpoint")
    if starts is not None and len(starts) != len(infos):
        raise AclarenaError(f"`starts` needs one checkpoint per source: {len(starts)} for {len(infos)} sources")
    if not spec.needs_base or (starts is not None and base is not None and all(s.name == base.name for s in starts)):
        starts = None  # uniform takes no task vectors; every source from the base is the default
    everything = ([base] if spec.needs_base and base is not None else []) + list(infos)
    start_index: list[int] | None = None
    if starts is not None:
        position = {info.name: i for i, info in enumerate(everything)}
        for s in starts:
            if s.name not in position:
                position[s.name] = len(everything)
                everything.append(s)
        start_index = [position[s.name] for s in starts]
    on_map = dict(adapter_on or {})
    for i in everything:
        if i.source == "adapter" and i.name not in on_map:
            raise CheckpointError(f"checkpoint {i.name!r} is a LoRA adapter; name the model it is on (`adapter_on`) "
                                  "to merge it as that model plus its update")
    readable = [on_map[i.name] if i.source == "adapter" else i for i in everything]
    check_mergeable(readable)
    unique: list[CheckpointInfo] = []  # an adapter's model may be a source too: the reader opens each once
    for i in readable:
        if i.name not in [u.name for u in unique]:
            unique.append(i)
    pos = [next(k for k, u in enumerate(unique) if u.name == i.name) for i in readable]
    out = Path(out)
    fp = fingerprint(spec, infos, base if spec.needs_base else None, starts, on_map)
    marker = read_marker(out)
    if marker is not None and marker.get("fingerprint") == fp and not force:
        return MergeResult(out, spec, [i.name for i in infos], base.name if base is not None and spec.needs_base else None,
                           int(marker.get("n_tensors", 0)), int(marker.get("bytes", 0)), 0.0, reused=True,
                           updates_from=marker.get("updates_from"), fingerprint=fp)
    t0 = time.perf_counter()
    tmp = temporary_folder(out)
    n_base = 1 if spec.needs_base else 0
    with TensorReader(unique) as reader:
        loras = _adapter_deltas(everything, reader)
        ref = pos[n_base]  # the first merged model decides stored dtypes and extra tensors
        layout = [(n, out_dtype or reader.dtypes(n)[ref], reader.shape(n)) for n in reader.names]
        extras = _extra_tensors(readable[n_base], reader)
        layout += [(n, t.dtype, tuple(t.shape)) for n, t in extras.items()]
        with (removed_on_failure(tmp),
              ShardedWriter(tmp, layout, max_shard_bytes=max_shard_bytes,
                            metadata={"aclarena-merge": json.dumps(spec.identity())}) as writer):
            for name in reader.names:
                _merge_tensor(reader, name, spec, n_base, len(infos), start_index, writer, block_elements, loras,
                              pos)
                if on_tensor is not None:
                    on_tensor(name)
            for name, t in extras.items():
                writer.write(name, t)
            total = writer.total_bytes
    copied = copy_model_files(readable[n_base].location, tmp)
    seconds = time.perf_counter() - t0
    result = MergeResult(out, spec, [i.name for i in infos], base.name if base is not None and spec.needs_base else None,
                         len(layout), total, seconds, copied=copied,
                         updates_from=[s.name for s in starts] if starts is not None else None, fingerprint=fp)
    publish(tmp, out, {
        "fingerprint": fp, "merge": spec.identity(), "sources": result.sources, "base": result.base,
        "updates_from": result.updates_from,
        "n_tensors": result.n_tensors, "bytes": total, "seconds": round(seconds, 3),
    }, lock=lock)
    return result


def _adapter_deltas(everything: Sequence[CheckpointInfo], reader: TensorReader) -> list[dict[str, LoraFactors]]:
    """Per checkpoint of the reader, its LoRA factors by target tensor (empty for a full checkpoint)."""
    from aclarena.models.tensors import check_finite_safetensors, check_lora_targets, read_lora

    out: list[dict[str, LoraFactors]] = []
    for i in everything:
        if i.source != "adapter":
            out.append({})
            continue
        check_finite_safetensors(sorted({t.file for t in i.tensors.values()}), i.name)
        factors = read_lora(i)
        check_lora_targets(i.name, factors, reader, str(i.spec.on))
        out.append(factors)
    return out


def _with_deltas(ts: Sequence[torch.Tensor], name: str, start: int, stop: int,
                 loras: Sequence[dict[str, LoraFactors]], pos: Sequence[int] | None) -> list[torch.Tensor]:
    """Rows ``start:stop`` of each checkpoint (``ts`` holds the reader's, ``pos`` maps each checkpoint to one of
    them), an adapter's update added to its model's rows (float32)."""
    out = [ts[k] for k in pos] if pos is not None else list(ts)
    for j, lo in enumerate(loras):
        f = lo.get(name)
        if f is not None:
            out[j] = (out[j].double() + f.delta_rows(start, stop).reshape(out[j].shape)).to(torch.float32)
    return out


def _merge_tensor(reader: TensorReader, name: str, spec: MergeSpec, n_base: int, k: int,
                  start_index: Sequence[int] | None, writer: ShardedWriter, block_elements: int,
                  loras: Sequence[dict[str, LoraFactors]] = (), pos: Sequence[int] | None = None) -> None:
    def split(ts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor] | None]:
        starts = [ts[i] for i in start_index] if start_index is not None else None
        return ts[0], list(ts[n_base:n_base + k]), starts

    if spec.method in ("uniform", "task_arithmetic"):
        for chunk in reader.chunks(name, max_elements=block_elements):
            ts = _with_deltas(chunk.tensors, name, chunk.start, chunk.stop, loras, pos)
            if spec.method == "uniform":
                writer.write(name, merging.uniform(ts[:k]))
            else:
                b, models, starts = split(ts)
                writer.write(name, merging.task_arithmetic(b, models, spec.lam, starts=starts))
        return
    whole = reader.read(name)
    b, models, starts = split(_with_deltas(whole, name, 0, whole[0].shape[0] if whole[0].ndim else 1, loras, pos))
    if spec.method == "ties":
        merged = merging.ties(b, models, density=spec.density, lam=spec.lam, starts=starts)
    else:
        merged = merging.dare(b, models, p=spec.p, lam=spec.lam, seed=spec.seed, tensor=name, starts=starts)
    writer.write(name, merged)


def _extra_tensors(info: CheckpointInfo, reader: TensorReader) -> dict[str, torch.Tensor]:
    """Non-floating tensors (integer buffers) of the first model, copied as they are."""
    if not reader.skipped:
        return {}
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    for name in reader.skipped:
        meta = info.tensors.get(name)
        if meta is None:
            continue
        with safe_open(str(meta.file), framework="pt") as f:
            out[name] = f.get_tensor(name)
    return out
