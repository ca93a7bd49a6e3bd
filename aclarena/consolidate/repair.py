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

LoRA stages (OLD or NEW an adapter, the other its model or another adapter on it) go through
:func:`repair_adapters`: the repair on the factors, written as an adapter on that model.

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
import math
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


#: tall matrices above this size are repaired in row blocks (memory: the result plus a block, not 6.9x the tensor)
ROW_BLOCK_MIN_BYTES = 64 << 20
#: the float64 size of one row block
ROW_BLOCK_BYTES = 16 << 20


def block_rows(t: torch.Tensor) -> int | None:
    """The row-block size for a spectral repair of ``t`` (None: the thin SVD of the whole matrix)."""
    if t.ndim < 2 or t.numel() * 4 < ROW_BLOCK_MIN_BYTES:
        return None
    cols = max(1, t.numel() // int(t.shape[0]))
    return max(1, ROW_BLOCK_BYTES // (8 * cols))


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


def _rollback_selection(spec: RepairSpec, hit: list[str], stats: Callable[[], Any]) -> tuple[list[str], list[str]]:
    """(the tensors to repair, the layer groups rolled back): for layer-rollback, the tensors of the groups it
    chooses (``stats()`` computes the per-group diagnostics when it selects by displacement or cosine); for
    the spectral methods, every targeted tensor and no group."""
    if spec.method != "layer-rollback":
        return hit, []
    layers = _rollback_groups(spec, hit, stats() if spec.effective_select in ("displacement", "cosine") else None)
    if layers:
        chosen = set(layers)
        hit = [n for n in hit if group_of(n) in chosen]
    return hit, layers


def _finished(out: Path, spec: RepairSpec, old: CheckpointInfo, new: CheckpointInfo, fp: str) -> RepairResult | None:
    """The repair already in ``out`` with these inputs and settings (its marker's fingerprint), read back; else None."""
    marker = read_marker(out)
    if marker is None or marker.get("fingerprint") != fp:
        return None
    rep = marker.get("repair") or {}
    return RepairResult(out, spec, old.name, new.name, int(marker.get("n_tensors", 0)),
                        int(rep.get("n_repaired", 0)), int(marker.get("bytes", 0)), 0.0,
                        float(rep.get("energy_removed", 0.0)), rep.get("directions_kept"),
                        list(rep.get("layers", [])), reused=True, fingerprint=fp, notes=list(rep.get("notes", [])))


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
    on: CheckpointInfo | None = None,
    infos: Callable[[str], CheckpointInfo] | None = None,
) -> RepairResult:
    """Repair NEW's update from OLD with ``spec`` and write the result to ``out`` (a full HF folder).

    ``base`` and ``oracle`` (the new domain's single-task oracle) are needed for layer-rollback
    by cosine only. A rerun with the same inputs and settings reuses a finished output. When OLD or
    NEW is a LoRA adapter, ``on`` is the model it applies to (the other is ``on`` or another adapter on
    it) and the result is an adapter on ``on``, repaired on the factors (:func:`repair_adapters`); ``infos``
    (inspects a checkpoint by name) lets an adapter on another adapter count as on the end of its chain.

    Raises:
        CheckpointError: other architectures, shapes or tokenizers, unreadable files.
        AclarenaError: bad settings, a module pattern that matches nothing, a missing oracle, an adapter
            on another model than its partner.
    """
    if spec.needs_oracle and (base is None or oracle is None):
        raise AclarenaError("--select cosine compares each layer's update with the new domain's oracle direction "
                            "(oracle − base); the manifest has no oracle for that domain: select by displacement")
    root = adapter_root(old, new, infos)
    if root is not None:
        if on is None or on.name != root:
            raise AclarenaError(f"repairing adapters needs the model they are on ({root!r}) as `on`")
        return repair_adapters(old, new, on, spec, out, base=base, oracle=oracle, force=force, on_tensor=on_tensor,
                               lock=lock, infos=infos)
    if old.name == new.name:
        raise AclarenaError(f"--from and --to are both {old.name!r}; name the checkpoint before the stage and after it")
    check_mergeable([old, new])
    extra = [base, oracle] if spec.needs_oracle and base is not None and oracle is not None else []
    out = Path(out)
    fp = fingerprint(spec, old, new, extra)
    if not force and (done := _finished(out, spec, old, new, fp)) is not None:
        return done
    t0 = time.perf_counter()
    dtype = COMPUTE_DTYPES[spec.compute_dtype]
    with TensorReader([old, new]) as reader:
        names = list(reader.names)
        hit = targeted(names, spec.modules)
        hit, layers = _rollback_selection(spec, hit, lambda: group_stats(
            old, new, hit, base=base if spec.needs_oracle else None, oracle=oracle if spec.needs_oracle else None))
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
                rows = block_rows(t_new)
                # the update's energy, accumulated in float64 without a float64 copy of the tensor
                sq = R.update_sq_norm(t_old, t_new, rows)
                total += sq
                if name not in repaired:
                    writer.write(name, t_new)
                elif spec.method == "layer-rollback":
                    removed += sq
                    writer.write(name, t_old)
                else:
                    if R.is_row_blocked(t_new, rows):  # written block by block: never the whole result in memory
                        assert rows is not None
                        plan = R.plan_row_blocked(t_old, t_new, spec.method, spec.percent, rows, compute_dtype=dtype)
                        res = plan.info
                        for block in plan.blocks():
                            writer.write(name, block)
                    else:
                        res = (R.svd_restore(t_old, t_new, float(spec.percent or 0), compute_dtype=dtype)
                               if spec.method == "svd-restore" else R.dg_hard(t_old, t_new, compute_dtype=dtype))
                        writer.write(name, res.tensor)
                    removed += res.energy_removed * sq
                    kept += res.kept_in_rank  # directions counted within each update's rank
                    n_dir += res.rank
                    vectors += not R.is_matrix(t_new)
                    changed += res.rank > 0
                    if 0 < res.rank <= res.restored:
                        over += 1
                        example = example or (res.restored, res.rank)
                if on_tensor is not None:
                    on_tensor(name)
            for name, t in extras.items():
                writer.write(name, t)
            written = writer.total_bytes
    copy_model_files(new.location, tmp)
    seconds = time.perf_counter() - t0
    note = R.over_rank_note(float(spec.percent or 0), changed, over, example) if spec.method == "svd-restore" else None
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


# --- LoRA adapters: the repair on the factors --------------------------------------------------------


def adapter_root(old: CheckpointInfo, new: CheckpointInfo,
                 infos: Callable[[str], CheckpointInfo] | None = None) -> str | None:
    """The model OLD and NEW both are or are adapters on (None when neither is an adapter). With ``infos``
    (inspects a checkpoint by name), an adapter on another adapter counts as on the full model at the end of
    its chain of ``on`` (a stage trained from an adapter stage: NEW on OLD, both adapters).

    Raises:
        AclarenaError: an adapter on another model than its partner is or is on (one line).
    """
    if old.source != "adapter" and new.source != "adapter":
        return None

    def root(i: CheckpointInfo) -> str:
        while i.source == "adapter" and i.spec.on is not None:
            if infos is None:
                return i.spec.on
            i = infos(i.spec.on)
        return i.name

    a, b = root(old), root(new)
    if a != b:
        def what(i: CheckpointInfo, r: str) -> str:
            return f"{i.name!r} is a LoRA adapter on {r!r}" if i.source == "adapter" else f"{i.name!r} is a full model"
        raise AclarenaError(f"cannot repair between {old.name!r} and {new.name!r}: {what(old, a)} and {what(new, b)}; "
                            "a repair of adapters needs an adapter and the model it is on, or two adapters on one model")
    return a


def _factors(info: CheckpointInfo, root: CheckpointInfo, reader: TensorReader, dtype: torch.dtype,
             infos: Callable[[str], CheckpointInfo] | None = None
             ) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor, bool]], torch.dtype | None]:
    """An adapter's updates as ``{target: (P, Q, fan_in_fan_out)}`` with ``P Q = s·B·A`` (nothing for the root),
    and the dtype its factors are stored in. An adapter on another adapter: the sum of its chain's updates
    (:func:`aclarena.models.tensors.read_lora_chain`; ``infos`` inspects the chain's checkpoints by name)."""
    from aclarena.models.tensors import check_lora_targets, read_lora, read_lora_chain

    if info.source != "adapter":
        return {}, None
    _check_finite_adapter(info)
    between = _chain_between(info, root, infos)
    for i in between:
        _check_finite_adapter(i)
    factors = read_lora_chain(info, infos)[1] if between and infos is not None else read_lora(info)
    check_lora_targets(info.name, factors, reader, root.name)
    stored = next(iter(factors.values())).A.dtype if factors else None
    return {t: (lo.B.to(dtype) * lo.scale, lo.A.to(dtype), lo.fan_in_fan_out) for t, lo in factors.items()}, stored


def _chain_between(info: CheckpointInfo, root: CheckpointInfo, infos: Callable[[str], CheckpointInfo] | None
                   ) -> list[CheckpointInfo]:
    """The adapters ``info`` is applied on, down to ``root`` (empty unless ``info`` is an adapter on an adapter)."""
    out: list[CheckpointInfo] = []
    on = info.spec.on if info.source == "adapter" else None
    while infos is not None and on is not None and on != root.name:
        out.append(infos(on))
        on = out[-1].spec.on if out[-1].source == "adapter" else None
    return out


def _check_finite_adapter(info: CheckpointInfo) -> None:
    """NaN or infinite LoRA weights: one line naming the adapter and the tensor (no result of them would be real)."""
    from aclarena.models.tensors import check_finite_safetensors

    check_finite_safetensors(sorted({t.file for t in info.tensors.values()}), info.name)


def _sq_norm(p: torch.Tensor, q: torch.Tensor) -> float:
    """``‖p q‖²_F = Σ (pᵀp) ⊙ (q qᵀ)``, from the factors."""
    return float(((p.double().T @ p.double()) * (q.double() @ q.double().T)).sum())


def _lowrank_group_stats(names: Sequence[str], delta: dict[str, tuple[torch.Tensor, torch.Tensor, bool]], *,
                         base: CheckpointInfo | None, oracle: CheckpointInfo | None) -> dict[str, R.GroupStats]:
    """Per layer block: ``‖Δ_g‖²`` from the factors and, with an oracle, ``⟨Δ_g, τ_g⟩`` as ``Σ p ⊙ (τ qᵀ)``."""
    stats = {group_of(n): R.GroupStats() for n in names}
    for n, (p, q, _) in delta.items():
        if n in names:
            stats[group_of(n)].sq_delta += _sq_norm(p, q)
    if base is None or oracle is None:
        return stats
    wanted = set(names)
    with TensorReader([base, oracle]) as reader:
        for name in reader.names:
            if name not in wanted:
                continue
            t_base, t_oracle = reader.read(name)
            tau = t_oracle.double() - t_base.double()
            st = stats[group_of(name)]
            st.sq_oracle += float((tau * tau).sum())
            if name in delta:
                p, q, fan = delta[name]
                tau2 = tau.T if fan else tau
                st.dot_oracle += float((p.double() * (tau2 @ q.double().T)).sum())
    return stats


def _adapter_config(old: CheckpointInfo, new: CheckpointInfo, rank: int, modules: Sequence[str]) -> dict[str, Any]:
    """NEW's adapter_config.json (OLD's when NEW is the model), for factors of rank ``rank`` and scaling 1."""
    src = new if new.source == "adapter" else old
    cfg = dict(src.adapter_config)
    cfg.update({"r": rank, "lora_alpha": rank, "use_rslora": False, "alpha_pattern": {}, "rank_pattern": {},
                "target_modules": sorted({m.rsplit(".", 1)[-1] for m in modules}), "layers_to_transform": None,
                "layers_pattern": None, "init_lora_weights": True})
    return cfg


def repair_adapters(old: CheckpointInfo, new: CheckpointInfo, root: CheckpointInfo, spec: RepairSpec,  # noqa: C901
                    out: str | os.PathLike[str], *, base: CheckpointInfo | None = None,
                    oracle: CheckpointInfo | None = None, force: bool = False,
                    on_tensor: Callable[[str], None] | None = None,
                    lock: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
                    infos: Callable[[str], CheckpointInfo] | None = None) -> RepairResult:
    """The repair of NEW's update from OLD where either is a LoRA adapter on ``root`` and the other is ``root`` or
    another adapter on it: written as a LoRA adapter on ``root`` (``W_rep = root + L_old + P Q``). An adapter on
    another adapter (NEW trained from the adapter stage OLD) stands for its chain's summed factors on ``root``
    (``infos`` inspects the chain's checkpoints by name), so ``L_new − L_old`` is NEW's own update.

    The update ``Δ = L_new − L_old = [s_n B_n, −s_o B_o] · [A_n; A_o]`` has rank at most ``r_n + r_o``; its thin SVD
    comes from QR of the factors (:func:`aclarena.diagnostics.repair.factored_svd`), so no ``d × d`` matrix is
    formed. The result equals the dense repair of the densified checkpoints (``repair_checkpoints`` on
    ``root + s·B·A``): svd-restore and dg-hard count and threshold over all ``min(m, n)`` singular values, the zero
    ones included. Modules of every adapter are written, padded with zeros to one rank, scaling 1.
    """
    from safetensors.torch import save_file

    if old.name == new.name:
        raise AclarenaError(f"--from and --to are both {old.name!r}; name the checkpoint before the stage and after it")
    for i in (old, new, root):
        i.require_loadable()
    out = Path(out)
    between = _chain_between(old, root, infos) + _chain_between(new, root, infos)
    fp = fingerprint(spec, old, new, [root] + ([base, oracle] if spec.needs_oracle and base and oracle else [])
                     + [i for i in between if i.name not in (old.name, new.name)])
    if not force and (done := _finished(out, spec, old, new, fp)) is not None:
        return done
    t0 = time.perf_counter()
    dtype = COMPUTE_DTYPES[spec.compute_dtype]
    with TensorReader([root]) as reader:
        names = list(reader.names)
        shapes = {n: tuple(reader.shape(n)) for n in names}
        f_old, stored_old = _factors(old, root, reader, dtype, infos)
        f_new, stored_new = _factors(new, root, reader, dtype, infos)
    fans = {t: fac[2] for fs in (f_old, f_new) for t, fac in fs.items()}
    for t in f_old.keys() & f_new.keys():
        if f_old[t][2] != f_new[t][2]:
            raise AclarenaError(f"{old.name!r} and {new.name!r} store {t} in other layouts (fan_in_fan_out); "
                                "repair adapters of one configuration")
    targets = sorted(f_old.keys() | f_new.keys())

    def delta_of(t: str) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [(f[t][0], f[t][1]) for f in (f_new,) if t in f] + [(-f[t][0], f[t][1]) for f in (f_old,) if t in f]
        return torch.cat([p for p, _ in parts], dim=1), torch.cat([q for _, q in parts], dim=0)

    deltas = {t: (*delta_of(t), fans[t]) for t in targets}
    hit = targeted(names, spec.modules)
    hit, layers = _rollback_selection(spec, hit, lambda: _lowrank_group_stats(
        hit, deltas, base=base if spec.needs_oracle else None, oracle=oracle if spec.needs_oracle else None))
    repaired = set(hit)
    removed = total = 0.0
    kept = n_dir = 0
    pieces: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # target: (B', A') of W_rep − root, scaling 1
    empty = torch.zeros(0, dtype=dtype)
    for t in targets:
        p, q, _ = deltas[t]
        sq = _sq_norm(p, q)
        total += sq
        old_p, old_q = f_old.get(t, (empty.reshape(p.shape[0], 0), empty.reshape(0, q.shape[1]), False))[:2]
        new_p, new_q = f_new.get(t, (empty.reshape(p.shape[0], 0), empty.reshape(0, q.shape[1]), False))[:2]
        if t not in repaired:
            pieces[t] = (new_p, new_q)
        elif spec.method == "layer-rollback":
            removed += sq
            pieces[t] = (old_p, old_q)
        else:
            res = (R.svd_restore_lowrank(p, q, float(spec.percent or 0), compute_dtype=dtype)
                   if spec.method == "svd-restore" else R.dg_hard_lowrank(p, q, compute_dtype=dtype))
            removed += res.energy_removed * sq
            kept += res.kept
            n_dir += res.n
            pieces[t] = (torch.cat([old_p, res.P], dim=1), torch.cat([old_q, res.Q], dim=0))
        if on_tensor is not None:
            on_tensor(t)
    # the spectral methods count the directions of every repaired matrix, LoRA-free ones (Δ = 0) included, as the
    # dense repair does: svd-restore keeps n − k of their n directions, dg-hard none (τ = 0, every σ = 0)
    if spec.method != "layer-rollback":
        for n in repaired - set(targets):
            shape = shapes[n]
            if len(shape) >= 2 and math.prod(shape) > 0:
                n_zero = min(int(shape[0]), math.prod(shape[1:]))
                n_dir += n_zero
                if spec.method == "svd-restore":
                    kept += n_zero - R.rank_of_percent(float(spec.percent or 0), n_zero)
    rank = max([1] + [b.shape[1] for b, _ in pieces.values()])
    store_dtype = stored_new or stored_old or torch.float32
    tensors: dict[str, torch.Tensor] = {}
    for t, (b, a) in pieces.items():
        module = t.removesuffix(".weight")
        pad = rank - b.shape[1]
        b = torch.cat([b, b.new_zeros(b.shape[0], pad)], dim=1)
        a = torch.cat([a, a.new_zeros(pad, a.shape[1])], dim=0)
        tensors[f"base_model.model.{module}.lora_A.weight"] = a.to(store_dtype).contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = b.to(store_dtype).contiguous()
    tmp = temporary_folder(out)  # made, empty, of a unique name (issue 43)
    with removed_on_failure(tmp):
        save_file(tensors, str(tmp / "adapter_model.safetensors"),
                  metadata={"format": "pt", "aclarena-repair": json.dumps(spec.identity())})
        cfg = _adapter_config(old, new, rank, [t.removesuffix(".weight") for t in pieces])
        if between:  # an adapter of a chain names the adapter it is on; the output is on the chain's end
            cfg["base_model_name_or_path"] = root.location
        (tmp / "adapter_config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        written = (tmp / "adapter_model.safetensors").stat().st_size
    seconds = time.perf_counter() - t0
    result = RepairResult(out, spec, old.name, new.name, len(names), len(repaired), written, seconds,
                          removed / total if total > 0 else 0.0,
                          kept / n_dir if n_dir and spec.method != "layer-rollback" else None, layers, fingerprint=fp)
    publish(tmp, out, {
        "fingerprint": fp, "lineage": result.lineage() | {"on": root.name, "lora": True},
        "repair": {"n_repaired": result.n_repaired, "energy_removed": result.energy_removed,
                   "directions_kept": result.directions_kept, "layers": layers, "rank": rank},
        "n_tensors": result.n_tensors, "bytes": written, "seconds": round(seconds, 3),
    }, lock=lock)
    return result
