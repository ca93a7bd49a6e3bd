"""The registry of consolidation methods and what a method run takes and gives.

A method module (``aclarena.consolidate.<module>``) has ``run(job: Job) -> list[Output]``: it
consolidates one replicate of the curriculum (:class:`~aclarena.consolidate.sources.Lineage`)
into one or more checkpoints under ``<run>/checkpoints/`` and returns their manifest entries;
``aclarena-diag consolidate`` adds them to the manifest and records each in results.h5
(:mod:`aclarena.results.consolidation`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.consolidate.options import ConsolidateOptions
from aclarena.consolidate.sources import Lineage
from aclarena.errors import unknown_name
from aclarena.store.manifest import CheckpointSpec, Manifest, check_name, output_folder

CHECKPOINTS = "checkpoints"


@dataclass(frozen=True)
class Method:
    """A consolidation method: its name, a one-line summary, its module, and whether it has a seed of its own."""

    name: str
    summary: str
    module: str
    seeded: bool


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("mmopd", "multi-teacher on-policy distillation of the end point, each prompt's domain teacher, "
           "per-token reverse KL", "mmopd", True),
    Method("sdft", "oracle rollouts, reward filter, one domain-balanced mixed SFT (the study's SDFT)", "sdft", True),
    Method("merge-uniform", "uniform average of the stage checkpoints", "merges", False),
    Method("merge-ta", "task arithmetic θ_base + λ Σ τ_i, one model per λ of the sweep", "merges", False),
    Method("merge-ties", "TIES: trim, elect sign, disjoint mean", "merges", False),
    Method("merge-dare", "DARE: drop with p, rescale by 1/(1-p), add", "merges", True),
    Method("mle", "frozen SDFT backbone + one LoRA expert per domain trained by GRPO, routed by execution context",
           "mle", True),
)}


def get_method(name: str) -> Method:
    """The method called ``name``; unknown names fail with a did-you-mean."""
    try:
        return METHODS[name]
    except KeyError:
        raise unknown_name("consolidation method", name, METHODS, hint="see `aclarena-diag consolidate --help`") from None


@dataclass(frozen=True)
class Job:
    """One replicate to consolidate: the run, its manifest, the lineage, the method's options and seed."""

    run_dir: Path
    manifest: Manifest
    lineage: Lineage
    options: ConsolidateOptions
    seed: int
    force: bool = False
    progress: Callable[[str], None] | None = None
    notes: list[str] = field(default_factory=list)

    def folder(self, name: str) -> Path:
        """``RUN/checkpoints/<name>``, after the one name check (:func:`~aclarena.store.manifest.output_folder`)."""
        return output_folder(self.run_dir, name, what="output name", folder=CHECKPOINTS, manifest=self.manifest)

    def stem(self, default: str) -> str:
        """The output name without the replicate's suffix: ``--name`` when given, else the method's ``default``."""
        name = self.options.name
        return default if name is None else str(name)

    def status(self, text: str) -> None:
        """Show what is being done (the progress bar's label)."""
        if self.progress is not None:
            self.progress(text)

    def discard(self, folder: Path) -> None:
        """Remove a finished output so that it is made again (``--force``)."""
        import shutil

        shutil.rmtree(folder, ignore_errors=True)

    def reusable(self, folder: Path, fingerprint: str) -> Any:
        """The finished phase in ``folder`` made with ``fingerprint`` (see :func:`aclarena.train.phase_record.finished`),
        or None; with ``--force`` a finished one is discarded and None returned, so it is made again (the
        phase runner would otherwise reuse the finished folder)."""
        from aclarena.train.phase_record import finished

        done = finished(folder, fingerprint)
        if done is not None and self.force:
            self.discard(folder)
            return None
        return done

    def note(self, text: str) -> None:
        """A note for the user, printed after the table."""
        self.notes.append(text)


@dataclass(frozen=True)
class Output:
    """A consolidated checkpoint: its manifest entry and how it was made (``log``: the trainer's log history as
    columns, ``summary``: what the method adds; see :class:`aclarena.results.consolidation.CheckpointRecord`)."""

    spec: CheckpointSpec
    settings: Mapping[str, Any]
    seconds: float
    reused: bool = False
    log: dict[str, list[Any]] | None = None
    summary: Any = None
    # a merge's fingerprint, as in its folder's marker: checked under the run lock before the record is written
    fingerprint: str | None = None


def run_method(method: Method, job: Job) -> list[Output]:
    """Run one replicate of ``method``: every output name is checked first (``--name`` for every method, and
    the names a method derives from it, such as merge-ta's ``NAME-l0.5``), so a refused name writes nothing."""
    module = importlib.import_module(f"aclarena.consolidate.{method.module}")
    if job.options.name is not None:
        check_name(job.options.name, "--name")
    for name in getattr(module, "output_names", lambda _job: [])(job):
        job.folder(name)
    try:
        return module.run(job)
    except ModuleNotFoundError as e:
        if e.name is not None and e.name.startswith("aclarena.train"):
            from aclarena.errors import AclarenaError

            raise AclarenaError(f"{method.name} trains models and needs aclarena's training core (aclarena.train), "
                                "which this installation lacks") from None
        raise
