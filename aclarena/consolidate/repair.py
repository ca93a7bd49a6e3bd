"""Writing a repaired checkpoint out of core: OLD and NEW read tensor by tensor, repaired, streamed out.

:func:`repair_checkpoints` lines OLD and NEW up with :class:`aclarena.models.tensors.TensorReader`
(headers first: checkpoints of different shapes fail here, before anything is written), applies a
repair of :mod:`aclarena.diagnostics.repair` to one whole tensor at a time (an SVD needs the whole
matrix) and streams the result into safetensors shards with
:class:`aclarena.models.writing.ShardedWriter`, exactly as the merges of
:mod:`aclarena.consolidate.checkpoint_merge` do; config, generation config and tokenizer are
NEW's. The output is written under a temporary name and renamed when complete, with a marker
(``consolidation.json``) holding the lineage: from (OLD), to (NEW), method and parameters.

What each tensor gets:

* the tensors the repair targets (all floating tensors, or those matching ``modules`` patterns):
  svd-restore / dg-hard filter matrices and keep NEW's 1-D tensors (not counted as repaired);
  layer-rollback takes OLD's
  for every tensor of a rolled-back layer block (or a matching module);
* every other floating tensor, and non-floating buffers: NEW's, unchanged (the output is NEW
  with a repair applied, stored in NEW's dtypes).

Memory: OLD's and NEW's copy of one tensor, the float32 update, its SVD factors (two more
matrices of the tensor's size at most) and the result, i.e. about six float32 copies of the largest
tensor, whatever the model size (``benchmarks/repair.py`` measures it against loading both
checkpoints whole). Layer selection by displacement or cosine reads the checkpoints once more
first, in row blocks.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from aclarena.consolidate.checkpoint_merge import (
    _extra_tensors,
    check_mergeable,
    publish,
    read_marker,
    removed_on_failure,
    temporary_folder,
)
from aclarena.diagnostics import repair as R
from aclarena.diagnostics.task_vectors import group_of
from aclarena.errors import AclarenaError
from aclarena.models.checkpoint import CheckpointInfo
from aclarena.models.tensors import TensorReader
from aclarena.models.writing import ShardedWriter, copy_model_files

COMPUTE_DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class RepairSpec:
    """One repair: ``method`` (svd-restore, dg-hard, layer-rollback) and its settings.

    ``percent``: svd-restore's share of each update's singular directions restored to OLD.
    ``modules``: fnmatch patterns over tensor names (``*.mlp.*``); only matching tensors are
    repaired (all floating tensors when empty). ``layers``: layer-rollback's explicit layer
    indices; otherwise ``select`` (first, displacement, cosine) picks ``count`` layers or
    ``fraction`` of them. layer-rollback with ``modules`` and no ``layers``/``select`` rolls back
    exactly the matching tensors.
    """

    method: str
    percent: float | None = None
    modules: tuple[str, ...] = ()
    layers: tuple[int, ...] | None = None
    select: str | None = None
    fraction: float = 0.25
    count: int | None = None
    compute_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.method not in R.METHODS:
            from aclarena.errors import unknown_name

            raise unknown_name("repair method", self.method, R.METHODS)
        if self.method == "svd-restore":
            if self.percent is None:
                raise AclarenaError("svd-restore needs --rank-percent in (0, 100], e.g. 25")
            try:
                R.check_percent(self.percent)
            except ValueError as e:
                raise AclarenaError(str(e)) from None
        elif self.percent is not None:
            raise AclarenaError(f"--rank-percent is svd-restore's setting; {self.method} takes none")
        if self.method != "layer-rollback" and (self.layers is not None or self.select is not None):
            raise AclarenaError(f"--layers and --select choose layers for layer-rollback; {self.method} repairs every "
                                "matrix (restrict it with --modules)")
        if self.select is not None and self.select not in R.SELECT:
            from aclarena.errors import unknown_name

            raise unknown_name("layer selection", self.select, R.SELECT)
        if self.layers is not None and self.select is not None:
            raise AclarenaError("give --layers or --select, not both")
        if not 0.0 < self.fraction <= 1.0:
            raise AclarenaError(f"--fraction must be in (0, 1], got {self.fraction!r}; e.g. 0.25 for a quarter of the layers")
        if self.count is not None and self.count < 1:
            raise AclarenaError(f"--count must be >= 1, got {self.count}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            from aclarena.errors import unknown_name

            raise unknown_name("compute dtype", self.compute_dtype, COMPUTE_DTYPES)

    @property
    def effective_select(self) -> str | None:
        """How layer-rollback picks layers: None when ``layers`` or ``modules`` alone decide."""
        if self.method != "layer-rollback" or self.layers is not None:
            return None
        if self.select is None and self.modules:
            return None
        return self.select or "first"

    @property
    def needs_oracle(self) -> bool:
        return self.effective_select == "cosine"

    def identity(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        if self.percent is not None:
            out["rank_percent"] = self.percent
        if self.modules:
            out["modules"] = list(self.modules)
        if self.method == "layer-rollback":
            if self.layers is not None:
                out["layers"] = list(self.layers)
            sel = self.effective_select
            if sel is not None:
                out["select"] = sel
                out |= {"count": self.count} if self.count is not None else {"fraction": self.fraction}
        if self.compute_dtype != "float32":
            out["compute_dtype"] = self.compute_dtype
        return out


@dataclass
class RepairResult:
    """A written repair: where, from what, and what the filter did over the repaired tensors."""

    folder: Path
    spec: RepairSpec
    old: str
    new: str
    n_tensors: int
    n_repaired: int
    bytes_written: int
    seconds: float
    energy_removed: float  # share of the whole update's ‖Δ‖² moved back to OLD
    directions_kept: float | None  # share of singular directions kept as NEW's (spectral methods)
    layers: list[str] = field(default_factory=list)  # layer-rollback: the layer blocks rolled back
    reused: bool = False
    fingerprint: str = ""  # of the inputs and settings, as in the output's marker
    notes: list[str] = field(default_factory=list)  # one line each (R.over_rank_note)

    def lineage(self) -> dict[str, Any]:
        return {"from": self.old, "to": self.new, "method": self.spec.method, "parameters": self.spec.identity()}


def targeted(names: Sequence[str], modules: Sequence[str]) -> list[str]:
    """The tensor names matching any fnmatch pattern (all names when there are none); no match is bad input."""
    if not modules:
        return list(names)
    hit = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in modules)]
    if not hit:
        example = names[0] if names else "model.layers.0.mlp.up_proj.weight"
        raise AclarenaError(f"module pattern {', '.join(modules)} matches no tensor of the checkpoints; patterns are "
                            f"fnmatch over tensor names, e.g. '*.mlp.*' (a name: {example})")
    return hit


def _rollback_groups(spec: RepairSpec, reader_names: Sequence[str], stats: dict[str, R.GroupStats] | None) -> list[str]:
    groups = sorted({group_of(n) for n in reader_names})
    if spec.layers is not None:
        have = {g for g in groups if g.startswith("layer.")}
        want = [f"layer.{i}" for i in spec.layers]
        missing = [g for g in want if g not in have]
        if missing:
            raise AclarenaError(f"--layers {','.join(str(i) for i in spec.layers)}: the model has no {missing[0]} "
                                f"(it has layers 0-{len(have) - 1})")
        return want
    sel = spec.effective_select
    if sel is None:
        return []
    pool = stats if stats is not None else {g: R.GroupStats() for g in groups}
    try:
        return R.select_groups(pool, sel, fraction=spec.fraction, count=spec.count)
    except ValueError as e:
        raise AclarenaError(str(e)) from None


def group_stats(old: CheckpointInfo, new: CheckpointInfo, names: Sequence[str], *,
                base: CheckpointInfo | None = None, oracle: CheckpointInfo | None = None,
                block_elements: int = 1 << 20) -> dict[str, R.GroupStats]:
    """Per layer block of ``names``: the update's displacement, and its cosine with ``oracle − base`` when given."""
    infos = [old, new] + ([base, oracle] if base is not None and oracle is not None else [])
    unique: list[CheckpointInfo] = []
    for i in infos:
        if i.name not in [u.name for u in unique]:
            unique.append(i)
    pos = [next(k for k, u in enumerate(unique) if u.name == i.name) for i in infos]
    wanted = set(names)
    stats: dict[str, R.GroupStats] = {}
    with TensorReader(unique) as reader:
        for name in reader.names:
            if name not in wanted:
                continue
            st = stats.setdefault(group_of(name), R.GroupStats())
            for chunk in reader.chunks(name, max_elements=block_elements):
                ts = chunk.tensors
                direction = ts[pos[3]].double() - ts[pos[2]].double() if len(pos) == 4 else None
                st.add(ts[pos[0]], ts[pos[1]], direction)
    return stats


def fingerprint(spec: RepairSpec, old: CheckpointInfo, new: CheckpointInfo,
                extra: Sequence[CheckpointInfo] = ()) -> str:
    from aclarena.models.tensors import checkpoint_fingerprint

    ident = {"spec": spec.identity(), "old": [old.name, checkpoint_fingerprint(old)],
             "new": [new.name, checkpoint_fingerprint(new)],
             "extra": [[i.name, checkpoint_fingerprint(i)] for i in extra], "version": 1}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def repair_checkpoints(
    old: CheckpointInfo,
    new: CheckpointInfo,
    spec: RepairSpec,
    out: str | os.PathLike[str],
    *,
    base: CheckpointInfo | None = None,
    oracle: CheckpointInfo | None = None,
    max_shard_bytes: int = 2 << 30,
    force: bool = False,
    on_tensor: Callable[[str], None] | None = None,
    lock: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
) -> RepairResult:
    """Repair NEW's update from OLD with ``spec`` and write the result to ``out`` (a full HF folder).

    ``base`` and ``oracle`` (the new domain's single-task oracle) are needed for layer-rollback
    by cosine only. A rerun with the same inputs and settings reuses a finished output.

    Raises:
        CheckpointError: adapters, other architectures, shapes or tokenizers, unreadable files.
        AclarenaError: bad settings, a module pattern that matches nothing, a missing oracle.
    """
    if spec.needs_oracle and (base is None or oracle is None):
        raise AclarenaError("--select cosine compares each layer's update with the new domain's oracle direction "
                            "(oracle − base); the manifest has no oracle for that domain: select by displacement")
    if old.name == new.name:
        raise AclarenaError(f"--from and --to are both {old.name!r}; name the checkpoint before the stage and after it")
    check_mergeable([old, new])
    extra = [base, oracle] if spec.needs_oracle and base is not None and oracle is not None else []
    out = Path(out)
    fp = fingerprint(spec, old, new, extra)
    marker = read_marker(out)
    if marker is not None and marker.get("fingerprint") == fp and not force:
        rep = marker.get("repair") or {}
        return RepairResult(out, spec, old.name, new.name, int(marker.get("n_tensors", 0)),
                            int(rep.get("n_repaired", 0)), int(marker.get("bytes", 0)), 0.0,
                            float(rep.get("energy_removed", 0.0)), rep.get("directions_kept"),
                            list(rep.get("layers", [])), reused=True, fingerprint=fp, notes=list(rep.get("notes", [])))
    t0 = time.perf_counter()
    dtype = COMPUTE_DTYPES[spec.compute_dtype]
    with TensorReader([old, new]) as reader:
        names = list(reader.names)
        hit = targeted(names, spec.modules)
        layers: list[str] = []
        if spec.method == "layer-rollback":
            stats = None
            if spec.effective_select in ("displacement", "cosine"):
                stats = group_stats(old, new, hit, base=base if spec.needs_oracle else None,
                                    oracle=oracle if spec.needs_oracle else None)
            layers = _rollback_groups(spec, hit, stats)
            if layers:
                chosen = set(layers)
                hit = [n for n in hit if group_of(n) in chosen]
        repaired = set(hit)
        tmp = temporary_folder(out)
        layout = [(n, reader.dtypes(n)[1], reader.shape(n)) for n in names]
        extras = _extra_tensors(new, reader)
        layout += [(n, t.dtype, tuple(t.shape)) for n, t in extras.items()]
        removed = total = 0.0
        kept = n_dir = 0
        vectors = changed = over = 0  # spectral methods: 1-D tensors left NEW's; matrices changed; fully restored
        example: tuple[int, int] | None = None
        with (removed_on_failure(tmp),
              ShardedWriter(tmp, layout, max_shard_bytes=max_shard_bytes,
                            metadata={"aclarena-repair": json.dumps(spec.identity())}) as writer):
            for name in names:
                t_old, t_new = reader.read(name)
                # the update's energy, accumulated in float64 without a float64 copy of the tensor
                sq = float(torch.linalg.vector_norm((t_new.float() - t_old.float()).flatten(),
                                                    dtype=torch.float64)) ** 2
                total += sq
                if name not in repaired:
                    writer.write(name, t_new)
                elif spec.method == "layer-rollback":
                    removed += sq
                    writer.write(name, t_old)
                else:
                    res = (R.svd_restore(t_old, t_new, float(spec.percent or 0), compute_dtype=dtype)
                           if spec.method == "svd-restore" else R.dg_hard(t_old, t_new, compute_dtype=dtype))
                    removed += res.energy_removed * sq
                    kept += res.kept_in_rank  # directions counted within each update's rank
                    n_dir += res.rank
                    vectors += not R.is_matrix(t_new)
                    changed += res.rank > 0
                    if 0 < res.rank <= res.restored:
                        over += 1
                        example = example or (res.restored, res.rank)
                    writer.write(name, res.tensor)
                if on_tensor is not None:
                    on_tensor(name)
            for name, t in extras.items():
                writer.write(name, t)
            written = writer.total_bytes
    copy_model_files(new.location, tmp)
    seconds = time.perf_counter() - t0
    note = R.over_rank_note(float(spec.percent), changed, over, example) if spec.method == "svd-restore" else None
    result = RepairResult(out, spec, old.name, new.name, len(layout), len(repaired) - vectors, written, seconds,
                          removed / total if total > 0 else 0.0,
                          kept / n_dir if n_dir and spec.method != "layer-rollback" else None, layers,
                          fingerprint=fp, notes=[note] if note else [])
    publish(tmp, out, {
        "fingerprint": fp, "lineage": result.lineage(),
        "repair": {"n_repaired": result.n_repaired, "energy_removed": result.energy_removed,
                   "directions_kept": result.directions_kept, "layers": layers, "notes": result.notes},
        "n_tensors": result.n_tensors, "bytes": written, "seconds": round(seconds, 3),
    }, lock=lock)
    return result
