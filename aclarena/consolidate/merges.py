"""The merge methods of ``consolidate``: merge-uniform, merge-ta (λ sweep), merge-ties, merge-dare.

Sources (``--sources``): ``stages`` (default: the checkpoint ending each stage of the chain,
as the study's uniform merge), ``oracles`` (the single-task oracles, each trained from the
base: the setting task arithmetic, TIES and DARE were designed for), or explicit names. Task
vectors are each source's own update, ``τ_i = θ_i − θ_(start of i)``, where the start is the
source's nearest ancestor among the other sources, or the base when it has none: for oracles
that is ``θ_i − θ_base``; for the stage ends of one chain it is the stage update
``θ_i − θ_(i−1)`` (``θ_i − θ_base`` would be cumulative there: at λ = 1 task arithmetic of four
stage ends would give ``θ_base + 4 δ_1 + 3 δ_2 + 2 δ_3 + δ_4``). Task arithmetic of a whole chain's
stage updates at λ = 1 is then the end point itself; TIES and DARE resolve the stage updates'
interference instead of adding them. Full checkpoints are merged out of core
(:mod:`aclarena.consolidate.checkpoint_merge`); LoRA adapters on one model are merged with peft's
``cat`` (:mod:`aclarena.consolidate.lora_merge`), exact for uniform and task arithmetic, into an
adapter on that model. Any other merge with adapters among the sources (adapters with full
checkpoints, adapters on several models, TIES or DARE of adapters) takes each adapter as its model
plus its update ``s·B·A``, added row block by row block while streaming, into a full checkpoint.

Defaults: task arithmetic sweeps λ over 0.25, 0.5, 0.75 and 1.0 (one checkpoint each);
TIES keeps 20% of each task vector (density 0.2) with λ = 1; DARE drops half of each task
vector (``--drop 0.5``; the paper's 0.9 suits large models, whose updates are more redundant
than a few-million-parameter model's) and averages the rescaled vectors (λ = 1/K, as
mergekit's ``normalize``).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from aclarena.consolidate.checkpoint_merge import MergeSpec, merge_checkpoints
from aclarena.consolidate.methods import Job, Output
from aclarena.consolidate.options import MergeDareOptions, MergeOptions, MergeTAOptions, MergeTiesOptions
from aclarena.errors import AclarenaError
from aclarena.store.manifest import CheckpointSpec
from aclarena.store.runlock import run_lock
from aclarena.train.naming import consolidated_name, lambda_name

MERGE_OF = {"merge-uniform": "uniform", "merge-ta": "task_arithmetic", "merge-ties": "ties", "merge-dare": "dare"}


def _lambdas(job: Job) -> tuple[float, ...]:
    assert isinstance(job.options, MergeTAOptions)
    return job.options.lambdas


def source_names(job: Job) -> tuple[list[str], str]:
    """The checkpoints to merge and the name tag of that choice (``""``, ``-oracles``, ``-custom``)."""
    assert isinstance(job.options, MergeOptions)
    choice = job.options.sources
    lin = job.lineage
    if choice == "stages":
        return list(lin.stages.values()), ""
    if choice == "oracles":
        if not lin.oracles:
            raise AclarenaError("the manifest has no oracles (kind = \"oracle\") for this replicate; merge --sources stages "
                                "or train the oracles")
        return [lin.oracles[d] for d in lin.domains if d in lin.oracles], "-oracles"
    names = [n.strip() for n in str(choice).split(",") if n.strip()]
    for n in names:
        job.manifest.resolve(n)
    if len(names) < 2:
        raise AclarenaError("--sources needs at least two checkpoints (or 'stages' / 'oracles')")
    return names, "-custom"


def update_starts(job: Job, names: list[str]) -> list[str]:
    """Per source, the checkpoint its update is measured from: its nearest ancestor among ``names``, else the base.

    The stage ends of one chain thus give the stage updates ``θ_i − θ_(i−1)``, which add up to the
    end point's update; sources trained from the base (oracles) keep ``θ_i − θ_base``.
    """
    chosen = set(names)
    out = []
    for n in names:
        nearest = next((a for a in job.manifest.ancestors(n) if a in chosen), None)
        out.append(nearest if nearest is not None else job.lineage.base)
    return out


def _prefix(job: Job, tag: str) -> str:
    prefix = job.options.name
    return f"{job.options.METHOD}{tag}" if prefix is None else str(prefix)


def output_names(job: Job) -> list[str]:
    """The checkpoints this merge writes (checked by :func:`~aclarena.consolidate.methods.run_method` before any)."""
    _, tag = source_names(job)
    prefix = _prefix(job, tag)
    stems = ([lambda_name(prefix, lam) for lam in _lambdas(job)] if MERGE_OF[job.options.METHOD] == "task_arithmetic"
             else [prefix])
    return [consolidated_name(stem, job.lineage.suffix) for stem in stems]


def run(job: Job) -> list[Output]:
    from aclarena.models.checkpoint import inspect

    method = job.options.METHOD
    kind = MERGE_OF[method]
    names, tag = source_names(job)
    prefix = _prefix(job, tag)
    specs = [job.manifest.resolve(n) for n in names]
    for src in specs:
        if src.is_adapter and src.on is not None and job.manifest.resolve(src.on).is_adapter:
            raise AclarenaError(f"{src.name!r} is a LoRA adapter on another adapter ({src.on!r}); merges do not read a "
                                "chain of adapters yet: merge the chain into a full folder (peft merge_and_unload) "
                                "and merge that")
    adapters = [s for s in specs if s.is_adapter]
    if adapters and len(adapters) == len(specs) and len({s.on for s in specs}) == 1 \
            and kind in ("uniform", "task_arithmetic"):
        return _merge_adapters(job, kind, specs, prefix)  # exact and low-rank: an adapter on their model
    # full checkpoints, adapters among them (each densified tensor by tensor: its model plus s·B·A), or
    # TIES/DARE of adapters: a full checkpoint
    seen: dict[str, Any] = {}
    infos = [inspect(s, job.manifest, job.run_dir, _seen=seen) for s in specs]
    base = inspect(job.manifest.resolve(job.lineage.base), job.manifest, job.run_dir, _seen=seen)
    starts = update_starts(job, names)
    by_name = {i.name: i for i in [base, *infos]}
    for s in starts:
        if s not in by_name:
            by_name[s] = inspect(job.manifest.resolve(s), job.manifest, job.run_dir, _seen=seen)
    start_infos = [by_name[s] for s in starts]
    adapter_on = {i.name: inspect(job.manifest.resolve(str(i.spec.on)), job.manifest, job.run_dir, _seen=seen)
                  for i in [*infos, *start_infos] if i.source == "adapter"}
    k = len(infos)
    if kind == "task_arithmetic":
        plans = [(lambda_name(prefix, lam), MergeSpec(kind, lam=lam)) for lam in _lambdas(job)]
    elif kind == "ties":
        assert isinstance(job.options, MergeTiesOptions)
        lam = 1.0 if job.options.lam is None else job.options.lam  # λ = 0 is valid (the base itself)
        plans = [(prefix, MergeSpec(kind, density=job.options.density, lam=lam))]
    elif kind == "dare":
        assert isinstance(job.options, MergeDareOptions)
        lam = 1.0 / k if job.options.lam is None else job.options.lam
        plans = [(prefix, MergeSpec(kind, p=job.options.drop, lam=lam, seed=job.seed))]
    else:
        plans = [(prefix, MergeSpec(kind))]
    outputs = []
    for stem, spec in plans:
        name = consolidated_name(stem, job.lineage.suffix)
        job.status(f"{name}: {spec.method} of {', '.join(names)}")
        t0 = time.perf_counter()
        res = merge_checkpoints(infos, spec, job.folder(name), base=base, starts=start_infos, force=job.force,
                                lock=functools.partial(run_lock, job.run_dir), adapter_on=adapter_on)
        out_spec = CheckpointSpec(name=name, path=f"checkpoints/{name}", kind="consolidated", method=method,
                                  parent=job.lineage.base, seed=job.lineage.seed)
        settings = {"merge": spec.identity(), "sources": names, "base": res.base, "k": k}
        if spec.needs_base:
            settings["updates_from"] = starts
        outputs.append(Output(out_spec, settings, time.perf_counter() - t0, reused=res.reused,
                              fingerprint=res.fingerprint))
    return outputs


def _merge_adapters(job: Job, kind: str, specs: list[CheckpointSpec], prefix: str) -> list[Output]:
    from aclarena.consolidate.lora_merge import merge_lora_adapters
    from aclarena.models.checkpoint import inspect
    from aclarena.models.loading import load_model

    on = specs[0].on  # run() routes here only adapters of one model, merged uniformly or by task arithmetic
    assert on is not None and kind in ("uniform", "task_arithmetic")
    k = len(specs)
    plans = ([(prefix, 1.0 / k)] if kind == "uniform" else
             [(lambda_name(prefix, lam), lam) for lam in _lambdas(job)])
    outputs = []
    infos = [inspect(s, job.manifest, job.run_dir) for s in specs]
    for info in infos:  # an adapter that does not belong on its model: one line, before any model is loaded
        info.require_loadable()
    folders = [(i.name, i.location) for i in infos]
    for stem, w in plans:
        name = consolidated_name(stem, job.lineage.suffix)
        t0 = time.perf_counter()
        base_model = load_model(on, job.manifest, job.run_dir)
        merge_lora_adapters(base_model, folders, [w] * k, job.folder(name))
        spec = CheckpointSpec(name=name, path=f"checkpoints/{name}", kind="consolidated", method=job.options.METHOD,
                              parent=on, on=on, seed=job.lineage.seed)
        settings = {"merge": {"method": kind, "weight": w, "lora": "cat"}, "sources": [s.name for s in specs], "k": k}
        outputs.append(Output(spec, settings, time.perf_counter() - t0))
    return outputs
