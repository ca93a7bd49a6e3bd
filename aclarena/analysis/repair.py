"""Training-free repair of what a stage forgot: the work of ``aclarena-diag repair`` and ``Run.repair()``.

A stage took the model from checkpoint OLD (``--from``) to NEW (``--to``) and forgot something
OLD could do. A repair edits NEW's update ``Δ = θ_NEW − θ_OLD`` using the two checkpoints only
(no data, no training): svd-restore (the update's top-r% singular directions back to OLD, one
checkpoint per r of the sweep), dg-hard (the Donoho–Gavish hard threshold of each update matrix)
or layer-rollback (whole layer blocks or modules back to OLD, chosen by the parameter
diagnostics). The maths and its sources: :mod:`aclarena.diagnostics.repair`; the out-of-core
writer: :mod:`aclarena.consolidate.repair`.

Each output is a ``consolidated`` checkpoint of the run (``method = "repair-<method>"``,
``parent`` = NEW), so ``eval``, ``compare`` and the dashboard include it; its lineage (from, to,
method, parameters) is in the folder's ``consolidation.json`` and in results.h5 under
``consolidate/<name>``, as for every consolidation. Every setting, name and shape is checked
before anything is written.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.analysis._common import Made, RunPath, frame, manifest_or_load, options_of
from aclarena.errors import AclarenaError
from aclarena.results.consolidation import REPAIR_PREFIX
from aclarena.store import Manifest
from aclarena.store.manifest import CheckpointSpec


@dataclass(frozen=True)
class RepairOutput:
    """One repaired checkpoint: its name, lineage, and what the repair changed."""

    checkpoint: str
    method: str
    old: str
    new: str
    parameters: dict[str, Any]
    n_repaired: int
    n_tensors: int
    energy_removed: float
    directions_kept: float | None
    layers: list[str]
    seconds: float
    reused: bool
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "method": self.method, "from": self.old, "to": self.new,
                "parameters": self.parameters, "tensors_repaired": self.n_repaired, "tensors": self.n_tensors,
                "energy_removed": round(self.energy_removed, 6),
                "directions_kept": None if self.directions_kept is None else round(self.directions_kept, 6),
                "layers": self.layers, "seconds": round(self.seconds, 2), "status": "reused" if self.reused else "made",
                "notes": self.notes}


@dataclass(frozen=True)
class RepairRunResult:
    """The repairs made (or reused); ``writes``: the store keys written."""

    outputs: list[RepairOutput]
    writes: tuple[str, ...] = field(default=())

    def to_pandas(self) -> Any:
        return frame([o.row() for o in self.outputs])

    def to_dict(self) -> dict[str, Any]:
        return {"outputs": [o.row() for o in self.outputs]}

    def made(self) -> list[Made]:
        """Each repaired checkpoint, typed (its name and method)."""
        return [Made(o.checkpoint, o.method) for o in self.outputs]


def check_repair_name(name: str, manifest: Manifest, run_dir: RunPath, *, sources: Sequence[str] = ()) -> None:
    """Refuse an output name before anything is written: not a manifest name, one of the sources, or the name of
    a checkpoint that is not an earlier repair (which would be overwritten), or a folder of something else.

    The name and its folder go through the shared check before any write (issue 33:
    :func:`aclarena.store.manifest.output_folder`); what is repair's own is that an earlier repair may be
    replaced and a source may not.
    """
    from aclarena.store.manifest import output_folder

    if name in sources:
        raise AclarenaError(f"--name {name!r} is one of the checkpoints being repaired; give the output a new name")
    output_folder(run_dir, name, what="--name", manifest=manifest)
    existing = manifest.checkpoints.get(name)
    if existing is not None and not (existing.kind == "consolidated" and (existing.method or "").startswith(REPAIR_PREFIX)):
        raise AclarenaError(f"--name {name!r} is taken: the manifest has it (kind {existing.kind}"
                            f"{f', method {existing.method}' if existing.method else ''}); give the repair another --name")
    folder = Path(run_dir) / "checkpoints" / name
    if existing is None and folder.exists() and not _a_repairs_output(folder):
        raise AclarenaError(f"{folder} exists and is not in the manifest; move it away or give another --name")


def _a_repairs_output(folder: Path) -> bool:
    """Whether ``folder`` is a finished repair's output (its marker says so): one that a repair killed between
    publishing it and writing the manifest left, which a rerun reuses or replaces."""
    from aclarena.consolidate.checkpoint_merge import read_marker

    marker = read_marker(folder)
    return marker is not None and isinstance(marker.get("repair"), dict) and isinstance(marker.get("lineage"), dict)


def parse_percents(text: str | float | Sequence[float]) -> tuple[float, ...]:
    """``"10,25,50"`` (or numbers) as rank percents, each in (0, 100]."""
    from aclarena.diagnostics.repair import check_percent

    if isinstance(text, str):
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise AclarenaError("--rank-percent is empty; give e.g. 25 or 10,25,50")
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise AclarenaError(f"--rank-percent {text!r} must be comma-separated numbers in (0, 100], "
                                "e.g. 10,25,50") from None
    elif isinstance(text, int | float):
        values = [float(text)]
    else:
        values = [float(v) for v in text]
    out = []
    for v in values:
        try:
            out.append(check_percent(v))
        except ValueError as e:
            raise AclarenaError(str(e)) from None
    if len(set(out)) != len(out):
        raise AclarenaError(f"--rank-percent repeats a value ({text!r}); give each once")
    return tuple(out)


def parse_layers(text: str | Sequence[int] | None) -> tuple[int, ...] | None:
    """``"0,1,4-6"`` as layer indices (None when not given)."""
    if text is None:
        return None
    if not isinstance(text, str):
        return tuple(int(i) for i in text)
    out: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise AclarenaError(f"--layers {text!r} must be layer indices or ranges, e.g. 0,1 or 0-3") from None
    if not out or any(i < 0 for i in out):
        raise AclarenaError(f"--layers {text!r} must name layers >= 0, e.g. 0-3")
    return tuple(sorted(set(out)))


def _oracle_for(manifest: Manifest, new: CheckpointSpec) -> CheckpointSpec | None:
    """The single-task oracle of NEW's domain (the one of NEW's seed when several)."""
    oracles = [s for s in manifest if s.kind == "oracle" and s.domain is not None and s.domain == new.domain]
    if not oracles:
        return None
    same_seed = [s for s in oracles if s.seed == new.seed]
    return (same_seed or oracles)[0]


@dataclass(frozen=True)
class RepairOptions:
    """How ``repair`` repairs (``aclarena-diag repair``'s options, checked when made): the ``method`` and the
    output ``name`` (svd-restore with several rank ``percents``: ``NAME-r<p>``), the ``modules`` (patterns),
    layer-rollback's ``layers``, ``select``, ``fraction`` and ``count``, the ``compute_dtype`` and ``force``."""

    method: str
    name: str
    percents: str | float | tuple[float, ...] | None = None
    modules: str | tuple[str, ...] = ()
    layers: str | tuple[int, ...] | None = None
    select: str | None = None
    fraction: float = 0.25
    count: int | None = None
    compute_dtype: str = "float32"
    force: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise AclarenaError(f"--name must be a non-empty name, got {self.name!r}")
        if isinstance(self.modules, str):
            object.__setattr__(self, "modules", tuple(m.strip() for m in self.modules.split(",") if m.strip()))
        else:
            object.__setattr__(self, "modules", tuple(self.modules))
        object.__setattr__(self, "layers", parse_layers(self.layers))
        if self.method == "svd-restore":
            object.__setattr__(self, "percents", parse_percents(25.0 if self.percents is None else self.percents))
        elif self.percents is not None:
            raise AclarenaError(f"--rank-percent is svd-restore's setting; {self.method} takes none")
        self.specs()  # each output's RepairSpec checks the method's settings

    def specs(self) -> list[tuple[str, Any]]:
        """``(output name, RepairSpec)`` of every output (one per rank percent for svd-restore)."""
        from aclarena.consolidate.repair import RepairSpec

        percents: tuple[float | None, ...] = tuple(self.percents) if isinstance(self.percents, tuple) else (None,)
        names = [self.name if len(percents) == 1 else f"{self.name}-r{p:g}" for p in percents]
        layers = self.layers if isinstance(self.layers, tuple) else None  # parsed when made
        return [(n, RepairSpec(self.method, percent=p, modules=tuple(self.modules), layers=layers, select=self.select,
                               fraction=self.fraction, count=self.count, compute_dtype=self.compute_dtype))
                for n, p in zip(names, percents, strict=True)]


def repair(run_dir: RunPath, old: str, new: str, options: RepairOptions | None = None, *,
           manifest: Manifest | None = None, progress: Callable[[str], None] | None = None,
           on_tensor: Callable[[int, int | None], None] | None = None, **settings: Any) -> RepairRunResult:
    """Repair NEW's update from OLD into new checkpoints of the run (one per rank percent for svd-restore):
    :class:`RepairOptions`, or its fields as keywords (``method=..., name=...``).

    ``progress`` is called with a line per output checkpoint, ``on_tensor`` with (tensors done, tensors
    in all or None) after each tensor is written.

    Raises:
        AclarenaError: unknown names or methods, bad settings, a module pattern that matches nothing,
            a taken output name (all before anything is written).
        CheckpointError: checkpoints that are not of one model (other shapes, tokenizers).

    When OLD or NEW is a LoRA adapter (the other being the model it is on, or another adapter on that
    model), each output is an adapter on that model, repaired on the factors without densifying.
    """
    from aclarena.consolidate.checkpoint_merge import read_marker
    from aclarena.consolidate.repair import adapter_root, repair_checkpoints
    from aclarena.models.checkpoint import inspect
    from aclarena.results.consolidation import RepairRecord, write_consolidation
    from aclarena.store.manifest import manifest_path
    from aclarena.store.runlock import run_lock, update_manifest

    if options is None and not settings:
        raise AclarenaError("repair needs a method and an output name: RepairOptions(method=..., name=...)")
    options = options_of(RepairOptions, options, settings)
    method, force = options.method, options.force
    run_dir = Path(run_dir)
    manifest = manifest_or_load(run_dir, manifest)
    old_spec, new_spec = manifest.resolve(old), manifest.resolve(new)
    specs = options.specs()
    for n, _ in specs:
        check_repair_name(n, manifest, run_dir, sources=(old_spec.name, new_spec.name))
    seen: dict[str, Any] = {}
    old_info = inspect(old_spec, manifest, run_dir, _seen=seen)
    new_info = inspect(new_spec, manifest, run_dir, _seen=seen)
    def infos(n: str) -> Any:
        return inspect(manifest.resolve(n), manifest, run_dir, _seen=seen)

    root = adapter_root(old_info, new_info, infos)  # an adapter on another model than its partner: one line here
    on_info = inspect(manifest.resolve(root), manifest, run_dir, _seen=seen) if root is not None else None
    base_info = oracle_info = None
    oracle_spec = None
    if specs[0][1].needs_oracle:
        oracle_spec = _oracle_for(manifest, new_spec)
        if oracle_spec is None:
            raise AclarenaError(f"--select cosine needs the single-task oracle of {new_spec.name!r}'s domain "
                                f"({new_spec.domain}); the manifest has none: --select displacement")
        if manifest.base is None:
            raise AclarenaError("--select cosine measures the oracle direction from the run's base; the manifest "
                                "names no base ([run] base = ...): --select displacement")
        base_info = inspect(manifest.resolve(manifest.base), manifest, run_dir, _seen=seen)
        oracle_info = inspect(oracle_spec, manifest, run_dir, _seen=seen)
    outputs: list[RepairOutput] = []
    writes: list[str] = []
    for out_name, spec in specs:
        if progress is not None:
            progress(f"{out_name}: {method} of {new_spec.name} from {old_spec.name}")
        t0 = time.perf_counter()
        done = [0]

        def tick(_: str, done: list[int] = done) -> None:
            done[0] += 1
            if on_tensor is not None:
                on_tensor(done[0], len(new_info.tensors) or None)

        folder = run_dir / "checkpoints" / out_name
        res = repair_checkpoints(old_info, new_info, spec, folder, base=base_info, oracle=oracle_info, force=force,
                                 lock=functools.partial(run_lock, run_dir), on_tensor=tick, on=on_info, infos=infos)
        seconds = time.perf_counter() - t0
        ck = CheckpointSpec(name=out_name, path=f"checkpoints/{out_name}", kind="consolidated",
                            method=f"{REPAIR_PREFIX}{method}", parent=new_spec.name, seed=new_spec.seed, on=root)
        settings = res.lineage() | {"oracle": oracle_spec.name if oracle_spec is not None else None,
                                    "layers": res.layers, "tensors_repaired": res.n_repaired,
                                    "energy_removed": res.energy_removed, "directions_kept": res.directions_kept,
                                    "notes": res.notes}
        with run_lock(run_dir):  # the folder, its manifest entry and its record: one writer's, together
            marker = read_marker(folder) or {}
            if marker.get("fingerprint") != res.fingerprint:
                raise AclarenaError(f"{folder} was replaced by another repair of the name {out_name!r} (other inputs "
                                    "or settings) while this one ran; its output and record stand: rerun this one "
                                    "under another --name")
            update_manifest(run_dir, functools.partial(Manifest.add, spec=ck, replace_existing=True))
            key = write_consolidation(run_dir, RepairRecord(name=out_name, method=f"{REPAIR_PREFIX}{method}",
                                                      seconds=seconds, reused=res.reused, settings=settings),
                                manifest_text=manifest_path(run_dir).read_text(encoding="utf-8"))
        writes.append(key)
        outputs.append(RepairOutput(out_name, method, old_spec.name, new_spec.name, spec.identity(), res.n_repaired,
                                    res.n_tensors, res.energy_removed, res.directions_kept, res.layers, seconds,
                                    res.reused, res.notes))
    return RepairRunResult(outputs, tuple(writes))


