"""Consolidated models from the stage checkpoints, added to the manifest (``aclarena-diag consolidate``).

Each method (:data:`aclarena.consolidate.methods.METHODS`) consolidates every replicate of the
curriculum asked for (``seeds``: the run's first N chains; a run with fewer chains repeats its
first with another seed, which only methods with a seed of their own use). Outputs go to
``<run>/checkpoints/<name>`` with ``kind = "consolidated"`` and ``method`` in the manifest, so
``eval``, ``tokens``, ``vectors`` and ``compare`` include them; each is recorded in results.h5
under ``consolidate/<name>``. A rerun reuses finished outputs. Methods and settings:
docs/consolidation.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.analysis._common import Made, RunPath, frame, manifest_or_load
from aclarena.consolidate.options import ConsolidateOptions, check_options, options_for
from aclarena.errors import AclarenaError
from aclarena.progress import progress
from aclarena.store import Manifest


@dataclass
class ConsolidateResult:
    """The outputs of one method (one row per checkpoint made or reused) and notes on skipped replicates."""

    method: str
    outputs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What ``aclarena-diag consolidate --json`` prints."""
        return {"method": self.method, "outputs": self.outputs, "notes": self.notes}

    def to_pandas(self) -> Any:
        return frame(self.outputs)

    @property
    def checkpoints(self) -> list[str]:
        return [o["checkpoint"] for o in self.outputs]

    def made(self) -> list[Made]:
        """Each output, typed: checkpoint, method, replicate and an MLE expert's domain."""
        return [Made(o["checkpoint"], o["method"], int(o.get("replicate") or 0), o.get("domain"))
                for o in self.outputs]


def _require_own_output(run_dir: Path, out: Any) -> None:
    """A merge's folder must still hold what this run published (its marker's fingerprint): another consolidate of
    the same name may have replaced it meanwhile, and then its record, not this one's, belongs beside it."""
    if not out.fingerprint:
        return
    from aclarena.consolidate.checkpoint_merge import read_marker

    folder = run_dir / out.spec.path
    marker = read_marker(folder) or {}
    if marker.get("fingerprint") != out.fingerprint:
        raise AclarenaError(f"{folder} was replaced by another consolidation of the name {out.spec.name!r} (other "
                            "inputs or settings) while this one ran; its output and record stand: rerun this one "
                            "under another --name")


def consolidate(
    run_dir: RunPath,
    method: str,
    *,
    seeds: int = 1,
    options: ConsolidateOptions | None = None,
    force: bool = False,
    show_progress: bool = False,
    manifest: Manifest | None = None,
    **settings: Any,
) -> ConsolidateResult:
    """Consolidate ``seeds`` replicates of the run's curriculum with ``method``; each output is added to the
    manifest and recorded in the store as soon as it is made (a rerun reuses it unless ``force``).

    ``options``: the method's own options class (:mod:`aclarena.consolidate.options`, e.g.
    ``MergeTiesOptions(density=0.3)``), or its fields as keywords (``density=0.3``); an option the method does
    not take is one line."""
    if settings:
        if options is not None:
            raise AclarenaError("give the method's options either as an options object or as keywords, not both")
        options = options_for(method, settings)
    from aclarena.consolidate.methods import Job, get_method, run_method
    from aclarena.consolidate.sources import pick
    from aclarena.results.consolidation import CheckpointRecord, write_consolidation
    from aclarena.store.manifest import manifest_path
    from aclarena.store.runlock import run_lock, update_manifest

    chosen = get_method(method)
    manifest = manifest_or_load(run_dir, manifest)
    opts = check_options(chosen.name, options)
    lineages = pick(manifest, seeds)
    run_path = Path(run_dir)
    result = ConsolidateResult(method=chosen.name)
    with progress(enabled=show_progress) as bar:
        task = bar.add_task(f"consolidate {chosen.name}", total=len(lineages))
        for lin in lineages:
            if lin.repeat and not chosen.seeded:
                result.notes.append(f"replicate {lin.replicate}: the run has one chain and {chosen.name} has no "
                                    "seed of its own, so it would repeat replicate 0; skipped")
                bar.advance(task)
                continue
            seed = lin.seed if lin.seed is not None else lin.replicate
            job = Job(run_dir=run_path, manifest=manifest, lineage=lin, options=opts, seed=seed, force=force,
                      progress=lambda text: bar.update(task, description=f"consolidate {text}"))
            for out in run_method(chosen, job):

                def add(m: Manifest, spec: Any = out.spec) -> None:
                    existing = m.checkpoints.get(spec.name)
                    if existing is not None and existing.kind != "consolidated":
                        raise AclarenaError(f"{spec.name!r} is already a {existing.kind} checkpoint of the manifest; "
                                            "give the consolidation another --name")
                    m.add(spec, replace_existing=True)

                with run_lock(run_path):  # the manifest entry and the record together (the folder was published
                    _require_own_output(run_path, out)  # under this lock too), and the folder still this run's
                    manifest = update_manifest(run_path, add)
                    text = manifest_path(run_path).read_text(encoding="utf-8")
                    write_consolidation(run_path, CheckpointRecord(
                        name=out.spec.name, method=chosen.name, replicate=lin.replicate, seed=seed,
                        seconds=out.seconds, reused=out.reused, settings=dict(out.settings), log=out.log,
                        summary=out.summary), manifest_text=text)
                result.outputs.append({"checkpoint": out.spec.name, "method": chosen.name,
                                       "replicate": lin.replicate, "seed": seed, "parent": out.spec.parent,
                                       "on": out.spec.on, "domain": out.spec.domain,
                                       "seconds": round(out.seconds, 2), "status": "reused" if out.reused else "made",
                                       "settings": dict(out.settings)})
            result.notes.extend(job.notes)
            bar.advance(task)
    return result
