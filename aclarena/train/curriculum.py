"""The curriculum runner: base, stages in order, then single-task oracles, each phase resumable.

:func:`~aclarena.train.plan.plan` turns a :class:`~aclarena.train.config.CurriculumConfig` into the
list of phases to train (:class:`~aclarena.train.plan.Job`), with their names
(:mod:`aclarena.train.naming`), parents, seeds and fingerprints; :func:`run_curriculum` trains them in
order into a run folder:

* ``checkpoints/<name>/``: each phase's checkpoint (HF folder, safetensors, tokenizer), with
  the completion marker written last (:mod:`aclarena.train.phases`);
* ``work/<name>/``: trainer checkpoints of the phase in progress (deleted once it is finished);
* ``aclarena.toml``: the manifest, rewritten after every phase with kind, domain, phase, parent
  and seed of every finished checkpoint (entries the user added are kept);
* ``results.h5``: ``train/<name>`` per phase: the trainer's log history (loss, reward, entropy,
  KL when trl computes it...) as a table, the settings, the time and the steps
  (:mod:`aclarena.results.train_log`);
* ``curriculum.toml``: a copy of the config the run was started with.

An oracle whose fingerprint equals its stage's (the first stage's, trained from the base with the
same recipe and seed; :mod:`aclarena.train.plan`) is registered with the stage's folder instead of
being trained twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.distributed import is_main_process, wait_for_everyone
from aclarena.errors import AclarenaError, CheckpointError
from aclarena.models.arch import context_length
from aclarena.store.manifest import output_folder
from aclarena.train.base import build_mini_base, check_external_base, copy_shipped_base
from aclarena.train.config import CurriculumConfig
from aclarena.train.monitor import monitor_factory
from aclarena.train.phase_record import PhaseResult, finished
from aclarena.train.phases import check_writable, run_rl, run_sft
from aclarena.train.plan import Job, plan

CHECKPOINTS = "checkpoints"
WORK = "work"
CONFIG_COPY = "curriculum.toml"


@dataclass
class PhaseRecord:
    """What happened to a job in this invocation: ``trained``, ``finished`` (already done),
    ``reused`` (an oracle identical to a stage), ``external`` (an HF base) or ``shipped`` (the mini
    base shipped in the package, copied into the run)."""

    job: Job
    status: str
    folder: str
    result: PhaseResult | None = None

    def row(self) -> dict[str, Any]:
        r = self.result
        report = (r.meta or {}).get("data") if r else None
        return {"name": self.job.name, "kind": self.job.kind, "domain": self.job.domain, "phase": self.job.phase,
                "parent": self.job.parent, "seed": self.job.seed, "status": self.status, "folder": self.folder,
                "steps": r.steps if r else None, "time_s": r.time_s if r else None,
                "resumed_from_step": r.resumed_from_step if r else None, "same_as": self.job.same_as,
                "data": report if isinstance(report, dict) else None}


@dataclass
class CurriculumRun:
    """The outcome of :func:`run_curriculum`: one record per job, and this invocation's wall time."""

    out: Path
    records: list[PhaseRecord] = field(default_factory=list)
    wall_s: float = 0.0

    def rows(self) -> list[dict[str, Any]]:
        return [r.row() for r in self.records]


CallbackFactory = Callable[[Job], Sequence[Any]]


def run_curriculum(
    cfg: CurriculumConfig,
    out: str | os.PathLike[str],
    *,
    seeds: int = 1,
    show_progress: bool = True,
    callbacks: CallbackFactory | None = None,
    config_text: str | None = None,
    on_phase: Callable[[PhaseRecord], None] | None = None,
    riders: Callable[[Job, Any], Sequence[Any]] | None = None,
) -> CurriculumRun:
    """Train every phase of ``cfg`` (``seeds`` replicates) into the run folder ``out``.

    Finished phases are skipped, an interrupted one resumes from its last trainer checkpoint.
    ``callbacks(job)`` returns extra ``TrainerCallback`` objects for a phase (e.g. a drift
    monitor on the ecom stage); ``on_phase(record)`` is called after each phase; ``riders(job, monitor)``
    adds callbacks sharing the ``[monitor]``'s writer on a monitored phase (:func:`monitor_factory`).
    """
    jobs = plan(cfg, seeds)
    folders: dict[str, str] = {}
    monitor = None
    if cfg.monitor is not None:  # [monitor]: a drift monitor on the later stages (aclarena.train.monitor)
        monitor = monitor_factory(cfg, Path(out), jobs, lambda name: _location(Path(out), folders[name]), riders)
    return train_jobs(cfg, out, jobs, title=cfg.name, folders=folders, show_progress=show_progress,
                      callbacks=callbacks, monitor=monitor, config_text=config_text, on_phase=on_phase)


def train_jobs(
    cfg: CurriculumConfig,
    out: str | os.PathLike[str],
    jobs: Sequence[Job],
    *,
    title: str,
    folders: dict[str, str] | None = None,
    show_progress: bool = True,
    callbacks: CallbackFactory | None = None,
    monitor: CallbackFactory | None = None,
    config_text: str | None = None,
    on_phase: Callable[[PhaseRecord], None] | None = None,
) -> CurriculumRun:
    """Train ``jobs`` (parents first) into ``out``, registering each finished one in the manifest: the loop of
    :func:`run_curriculum` and of the order study (:func:`aclarena.train.orders.train_orders`). ``folders``
    (name -> folder relative to ``out``) is filled as the jobs finish; ``monitor(job)`` adds drift-monitor
    callbacks. Progress is counted in training steps when every phase sets ``max_steps`` (the rate and ETA are
    then the whole run's; phases an earlier run finished leave the count), else in phases."""
    from aclarena.progress import progress

    t0 = time.monotonic()
    out = Path(out)
    check_writable(out)
    check_writable(out / CHECKPOINTS)
    run = CurriculumRun(out=out)
    if config_text is not None and is_main_process():
        _write_text(out / CONFIG_COPY, config_text)
    chat_template = read_template(cfg)
    folders = {} if folders is None else folders
    planned = planned_steps(jobs)
    done_steps, total_steps = 0, sum(planned.values())
    with progress(show_progress) as bar:
        overall = bar.add_task(f"{title}: {len(jobs)} phases", total=total_steps if planned else len(jobs))
        for job in jobs:
            label = f"{job.name} ({job.phase or 'pretrain'})"
            if job.kind == "base" and not cfg.base.is_mini:
                folders[job.name] = check_external_base(cfg.base)
                rec = PhaseRecord(job, "external", folders[job.name])
            elif not job.trains:
                assert job.same_as is not None
                folders[job.name] = folders[job.same_as]
                rec = PhaseRecord(job, "reused", folders[job.name])
            else:
                rel = f"{CHECKPOINTS}/{job.name}"
                folders[job.name] = rel
                task = bar.add_task(label, total=None)
                counted = planned and job.spec is not None  # a base built here counts no curriculum steps
                cbs = [_progress_callback(bar, task, label, (overall, done_steps) if counted else None)] \
                    if show_progress else []
                cbs += list(callbacks(job)) if callbacks is not None else []
                cbs += list(monitor(job)) if monitor is not None else []
                result = run_job(cfg, job, out, folders, cbs, chat_template)
                bar.update(task, completed=result.steps, total=max(1, result.steps),
                           description=f"{label} {'(already finished)' if result.skipped else ''}".rstrip())
                status = "finished" if result.skipped else (
                    "shipped" if job.kind == "base" and not cfg.base.builds else "trained")
                rec = PhaseRecord(job, status, rel, result)
            run.records.append(rec)
            if is_main_process():
                _register(cfg, out, run.records, folders)
            wait_for_everyone()
            if on_phase is not None:
                on_phase(rec)
            if planned and rec.status == "finished":  # trained by an earlier run: not this run's work (nor its rate)
                total_steps -= planned[job.name]
                bar.update(overall, total=total_steps)
            elif planned:
                done_steps += planned[job.name]
                bar.update(overall, completed=done_steps)
            else:
                bar.advance(overall)
    run.wall_s = time.monotonic() - t0
    return run


def _progress_callback(bar: Any, task: Any, label: str, overall: tuple[Any, int] | None = None) -> Any:
    from aclarena.train.progress import PhaseProgress

    return PhaseProgress(bar, task, label, overall)


def planned_steps(jobs: Sequence[Job]) -> dict[str, int]:
    """Each job's training steps (0 for one that reuses another's folder or the shipped base), or ``{}`` when a
    phase that trains sets no ``max_steps`` (its steps are known only once its trainer starts)."""
    out: dict[str, int] = {}
    for job in jobs:
        if job.spec is None or not job.trains:
            out[job.name] = 0
            continue
        steps = job.spec.trl.get("max_steps")
        if not isinstance(steps, int) or steps <= 0:
            return {}
        out[job.name] = steps
    return out


def _write_text(path: Path, text: str) -> None:
    from aclarena.store.manifest import write_text_atomic

    write_text_atomic(path, text)


def read_template(cfg: CurriculumConfig) -> str | None:
    """The text of the base's ``chat_template`` file, or None when the config names none."""
    if cfg.base.chat_template is None:
        return None
    p = Path(cfg.base.chat_template)
    if not p.is_file():
        raise AclarenaError(f"[base] chat_template = {cfg.base.chat_template!r}: no such file")
    return p.read_text(encoding="utf-8")


def _location(out: Path, folder: str) -> str:
    """Where to load a checkpoint from: run-relative folders under ``out``; absolute folders and hub ids as they are."""
    return str(out / folder) if folder.startswith(CHECKPOINTS + "/") else folder


def _parent_location(out: Path, job: Job, folders: dict[str, str]) -> str:
    """The parent's folder (or hub id), checked: a parent trained in this run must be finished and whole."""
    assert job.parent is not None
    folder = folders[job.parent]
    loc = _location(out, folder)
    if not folder.startswith(CHECKPOINTS + "/"):
        return loc  # the HF base named in the config
    try:
        done = finished(loc)
    except CheckpointError as e:
        raise CheckpointError(f"cannot train {job.name}: its parent checkpoint {job.parent!r} is unusable: {e}") from None
    if done is None:
        raise CheckpointError(f"cannot train {job.name}: its parent checkpoint {job.parent!r} is missing or unfinished "
                              f"in {loc}; rerun the whole curriculum into this --out (finished phases are kept)")
    return loc


def _positions(folder: str) -> int | None:
    """The context length of the checkpoint in ``folder`` (:func:`aclarena.models.arch.context_length` of its
    config.json), None when it has none or its config cannot be read (the model's own limit then applies)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return context_length(config) if isinstance(config, dict) else None


def run_job(cfg: CurriculumConfig, job: Job, out: Path, folders: dict[str, str], callbacks: list[Any],
            chat_template: str | None, *, folder: Path | None = None, work: Path | None = None) -> PhaseResult:
    """Train one job into ``folder`` (default ``out/checkpoints/<name>``; the lead-time measurement
    retrains a stage into a scratch folder instead)."""
    folder = folder if folder is not None else output_folder(out, job.name, what="checkpoint name", folder=CHECKPOINTS)
    work = work if work is not None else out / WORK / job.name
    meta = {"name": job.name, "kind": job.kind, "domain": job.domain, "phase": job.phase, "parent": job.parent,
            "seed": job.seed, "run_seed": job.run_seed, "replicate": job.replicate}
    keep = cfg.keep_trainer_checkpoints
    if job.kind == "base" and not cfg.base.builds:
        return copy_shipped_base(folder, fingerprint=job.fingerprint)
    if job.kind == "base":
        return build_mini_base(cfg.base, folder, seed=job.seed, fingerprint=job.fingerprint, callbacks=callbacks,
                               work_dir=work, keep_trainer_checkpoints=keep)
    done = finished(folder, job.fingerprint)
    if done is not None:
        return done
    spec = job.spec
    assert spec is not None and job.domain is not None
    start = _parent_location(out, job, folders)
    template = chat_template if job.parent == "base" else None
    common: dict[str, Any] = {"trl": spec.trl, "seed": job.seed, "callbacks": callbacks, "work_dir": work,
                              "fingerprint": job.fingerprint, "meta": meta, "keep_trainer_checkpoints": keep,
                              "chat_template": template}
    from aclarena.train import data as D

    if spec.kind == "sft":
        if spec.data == "expert":
            records: Any = D.expert_records(job.domain, spec.n, job.seed)
        elif spec.data == "rejection":
            from aclarena.train.phases import load_start

            model, tok = load_start(start, chat_template=template)
            records, report = D.rejection_phase_data(model, tok, job.domain, spec.n, spec.k, job.seed,
                                                     max_per_task=spec.max_per_task, fallback=spec.fallback)
            del model
            if not records:
                raise AclarenaError(
                    f"rejection sampling for {job.name} kept no trajectory: {job.parent!r} solved none of {spec.n} "
                    f"{job.domain} tasks in {spec.k} samples each; raise n / k, or bootstrap from expert "
                    "demonstrations with fallback = \"expert-if-empty\" (or \"expert\")"
                )
            # the marker keeps where the data came from, so a rerun reports it without sampling again
            common["meta"] = {**meta, "data": report}
        else:
            assert spec.path is not None
            records = D.file_records(spec.path, spec.n)
        return run_sft(start, records, folder, **common)
    if spec.data == "arena":
        rl = D.arena_rl_data(job.domain, spec.n, job.seed, max_context=_positions(start), max_turns=spec.max_turns,
                             max_new_tokens=spec.max_new_tokens)
    else:
        assert spec.path is not None and spec.reward is not None
        rl = D.file_rl_data(spec.path, spec.n, spec.reward, rollout=spec.rollout,
                            max_completion_length=int(spec.trl.get("max_completion_length", 512)))
    return run_rl(start, rl, folder, **common)


def _register(cfg: CurriculumConfig, out: Path, records: list[PhaseRecord], folders: dict[str, str]) -> None:
    """Write the manifest entries and the train logs of every finished job (idempotent)."""
    from aclarena.results.train_log import TrainLog, stored_checkpoints, write_train_logs
    from aclarena.store import ResultsStore
    from aclarena.store.manifest import CheckpointSpec, Manifest, load_manifest, manifest_path, write_manifest
    from aclarena.store.runlock import run_lock
    from aclarena.train.progress import log_table

    with run_lock(out):  # read, changed and written by one writer at a time (issue 43)
        path = manifest_path(out)
        manifest = load_manifest(out) if path.is_file() else Manifest(name=cfg.name)
        before = manifest.to_toml() if path.is_file() else None
        manifest.name = manifest.name if path.is_file() else cfg.name
        manifest.base = "base"
        if cfg.description and manifest.description is None:
            manifest.description = cfg.description
        for rec in records:
            j = rec.job
            spec = CheckpointSpec(name=j.name, path=folders[j.name], kind=j.kind, domain=j.domain, phase=j.phase,
                                  parent=j.parent, seed=j.run_seed if j.kind != "base" else None)
            manifest.checkpoints[j.name] = spec
        manifest.validate()
        if manifest.to_toml() != before:
            write_manifest(manifest, out)
    store = ResultsStore(out)
    have = stored_checkpoints(store)
    logs = []
    for rec in records:
        r = rec.result
        if rec.status in ("external", "reused") or r is None or rec.job.name in have:
            continue
        j = rec.job
        settings = {"spec": j.spec.identity() if j.spec else cfg.base.identity(), "seed": j.seed,
                    "fingerprint": j.fingerprint}
        report = (r.meta or {}).get("data")
        logs.append(TrainLog(checkpoint=j.name, kind=j.kind, domain=j.domain or "", phase=j.phase or "pretrain",
                             parent=j.parent or "", seed=j.seed, steps=r.steps, time_s=r.time_s,
                             resumed_from_step=-1 if r.resumed_from_step is None else r.resumed_from_step,
                             fingerprint=j.fingerprint, log=log_table(r.log_history), settings=settings,
                             data=report if isinstance(report, dict) else None))
    if logs:
        write_train_logs(store, logs, manifest_text=path.read_text(encoding="utf-8"))
