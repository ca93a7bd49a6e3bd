"""MMOPD: the sequential end point distilled on its own rollouts from one teacher per domain.

The student starts from the end of the chain; every domain contributes prompts (tool domains
multi-turn, :func:`aclarena.consolidate.distillation.prompt_records`); each prompt is scored by
its domain's teacher (``--teachers oracle``: the single-task oracle, default; ``stage``: the
checkpoint ending that domain's stage); the loss is the per-token reverse KL (``--divergence``
forward or js selectable). Trained with
:class:`~aclarena.consolidate.distillation.MultiTeacherDistillationTrainer` through the
training core's resumable phase machinery; the result is ``mmopd[-s<r>]`` (or ``--name``), parent = the end point.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from aclarena.consolidate.methods import Job, Output
from aclarena.consolidate.options import MMOPDOptions
from aclarena.errors import AclarenaError, CheckpointError
from aclarena.train.naming import consolidated_name


def _teachers(job: Job) -> str:
    assert isinstance(job.options, MMOPDOptions)
    return job.options.teachers


def output_names(job: Job) -> list[str]:
    """The checkpoint this replicate writes: ``--name`` or ``mmopd`` (``mmopd-stage-teachers`` with stage teachers)."""
    return [consolidated_name(job.stem("mmopd" if _teachers(job) == "oracle" else "mmopd-stage-teachers"),
                              job.lineage.suffix)]


def run(job: Job) -> list[Output]:
    from datasets import Dataset

    from aclarena.consolidate.distillation import divergence_beta, multi_teacher_trainer, prompt_records
    from aclarena.consolidate.recipe import parse_trl, sizes
    from aclarena.models.checkpoint import inspect, require_same_tokenizer
    from aclarena.models.tensors import checkpoint_fingerprint
    from aclarena.store.manifest import CheckpointSpec
    from aclarena.train.phases import load_start, quiet, run_trainer
    from aclarena.train.progress import log_table

    quiet()  # before any model is loaded: no per-model progress bars
    lin = job.lineage
    which = _teachers(job)
    assert isinstance(job.options, MMOPDOptions)
    divergence = job.options.divergence
    beta = divergence_beta(divergence)
    teacher_of = dict(lin.oracles) if which == "oracle" else dict(lin.stages)
    missing = [d for d in lin.domains if d not in teacher_of]
    if missing:
        raise AclarenaError(f"MMOPD needs a teacher per domain; the run has no {which} for {missing[0]!r} "
                            "(use --teachers stage, or train the oracles)")
    seen: dict[str, Any] = {}
    names = [lin.end, *teacher_of.values()]
    infos = {n: inspect(job.manifest.resolve(n), job.manifest, job.run_dir, _seen=seen) for n in names}
    for info in infos.values():
        info.require_loadable()
    try:
        require_same_tokenizer(list(infos.values()))
    except CheckpointError as e:
        raise CheckpointError(f"{e}; a teacher must score the student's own tokens, so MMOPD needs one tokenizer "
                              "for student and teachers") from None
    sz = sizes("mmopd", job.run_dir, job.options)
    overrides = {"max_steps": sz.steps, "per_device_train_batch_size": sz.batch, "learning_rate": sz.lr,
                 "max_completion_length": sz.max_new_tokens, "beta": beta} | parse_trl(list(job.options.trl))
    name = output_names(job)[0]
    settings = {"student": lin.end, "teachers": teacher_of, "divergence": divergence, "n": sz.n, "trl": overrides,
                "seed": job.seed}
    fp = hashlib.sha256(json.dumps({"settings": settings, "inputs": {n: checkpoint_fingerprint(i) for n, i in
                                                                      infos.items()}}, sort_keys=True,
                                   default=str).encode()).hexdigest()[:16]
    folder = job.folder(name)
    spec = CheckpointSpec(name=name, path=f"checkpoints/{name}", kind="consolidated", method="mmopd", parent=lin.end,
                          seed=lin.seed)
    done = job.reusable(folder, fp)
    if done is not None:
        return [Output(spec, settings, done.time_s, reused=True)]
    t0 = time.perf_counter()
    rows = prompt_records(lin.domains, sz.n, job.seed, {d: d for d in lin.domains})
    student, tok = load_start(infos[lin.end].location)
    tok.padding_side = "left"
    teachers = {}
    for d, t in teacher_of.items():
        model, _ = load_start(infos[t].location)
        model.eval()
        model.requires_grad_(False)
        teachers[d] = model
    dataset = Dataset.from_list(rows)

    def build(args: Any) -> Any:
        return multi_teacher_trainer(model=student, teachers=teachers, args=args, train_dataset=dataset,
                                     processing_class=tok)

    job.status(f"{name}: distilling {lin.end} from {', '.join(teacher_of.values())}")
    res = run_trainer(build, tok, folder, kind="distill", trl=overrides, seed=job.seed, fingerprint=fp,
                      meta={"name": name, "method": "mmopd"})
    return [Output(spec, settings, time.perf_counter() - t0, log=log_table(res.log_history),
                   summary={"prompts": len(rows)})]
