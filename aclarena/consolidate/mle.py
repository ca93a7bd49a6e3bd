"""MLE: a frozen SDFT backbone, one LoRA expert per domain trained by GRPO, routed by execution context.

For one replicate, :func:`run`

1. finds the SDFT backbone (``sdft[-s<r>]``, made by ``consolidate --method sdft``);
2. trains one LoRA adapter per curriculum domain on it with GRPO in that domain's
   environment (the backbone is frozen: only the adapter's weights train), registered as
   ``mle-<domain>[-s<r>]`` (``--name X``: ``X-<domain>``) with ``on`` = the backbone;
3. trains and scores the routers (:mod:`aclarena.consolidate.routers`) on labelled contexts
   and writes ``routing/<router>``;
4. routes each suite's deployed context with every router and records, under
   ``consolidate/mle[-s<r>]`` (``consolidate/X[-s<r>]``), which checkpoint answers it (an
   expert, or the backbone when the router finds none): ``compare`` builds the MLE row from that.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from aclarena.consolidate.methods import Job, Output
from aclarena.consolidate.options import MLEOptions
from aclarena.errors import AclarenaError
from aclarena.models.arch import context_length
from aclarena.train import naming

ROUTER_TRAIN_N = 60
ROUTER_EVAL_N = 20


def _stem(job: Job) -> str:
    return job.stem("mle")


def expert_name(job: Job, domain: str) -> str:
    """``--name``-``domain`` (default ``mle-<domain>``), with the replicate's suffix."""
    return naming.expert_name(_stem(job), domain, job.lineage.suffix)


def backbone_name(suffix: str) -> str:
    return naming.consolidated_name(naming.SDFT_BACKBONE, suffix)


def output_names(job: Job) -> list[str]:
    """The experts this replicate writes (checked before any is trained)."""
    return [] if _options(job).routers_only else [expert_name(job, d) for d in job.lineage.domains]


def run(job: Job) -> list[Output]:
    from aclarena.envs import DOMAINS

    domains = job.lineage.domains
    foreign = [d for d in domains if d not in DOMAINS]
    if foreign:
        raise AclarenaError(f"MLE routes by the arena environments' contexts; domain {foreign[0]!r} has no environment "
                            f"in the arena (known: {', '.join(DOMAINS)})")
    routes = naming.consolidated_name(_stem(job), job.lineage.suffix)
    if job.options.name is not None and routes in job.manifest:
        raise AclarenaError(f"--name {job.options.name}: MLE records its routes under consolidate/{routes}, the "
                            f"record of the checkpoint {routes!r}; give another --name")
    outputs: list[Output] = []
    if not _options(job).routers_only:
        outputs += train_experts(job, domains)
    if job.lineage.replicate == 0:
        for note in score_routers(job, domains):
            job.note(note)
    if outputs:
        record_routes(job, domains)
    return outputs


def _options(job: Job) -> MLEOptions:
    assert isinstance(job.options, MLEOptions)
    return job.options


def _routers(job: Job) -> list[str]:
    return list(_options(job).routers)


def train_experts(job: Job, domains: Sequence[str]) -> list[Output]:
    """One LoRA expert per domain on the frozen SDFT backbone, trained by GRPO in the domain's environment."""
    import hashlib
    import json

    from peft import LoraConfig

    from aclarena.consolidate.recipe import curriculum, parse_trl, sizes
    from aclarena.consolidate.serving import expert_parameters
    from aclarena.models.checkpoint import inspect
    from aclarena.models.tensors import checkpoint_fingerprint
    from aclarena.store.manifest import CheckpointSpec
    from aclarena.train.data import arena_rl_data
    from aclarena.train.phases import run_rl
    from aclarena.train.progress import log_table

    suffix = job.lineage.suffix
    backbone = backbone_name(suffix)
    if backbone not in job.manifest:
        raise AclarenaError(f"MLE trains its experts on the SDFT backbone {backbone!r}, which the run does not have yet; "
                            f"run `aclarena-diag consolidate --run {job.run_dir} --method sdft` first (same --seeds)")
    info = inspect(job.manifest.resolve(backbone), job.manifest, job.run_dir)
    info.require_loadable()
    lora = _options(job).lora()
    sz = sizes("mle", job.run_dir, _options(job))
    cfg = curriculum(job.run_dir)
    positions = context_length(info.config) or 1024  # an episode's bound when the backbone's config sets none
    outputs = []
    for d in domains:
        name = expert_name(job, d)
        stage_rl = _stage_rl(cfg, d)
        trl: dict[str, Any] = dict(sz.extra)
        if cfg is not None and stage_rl is not None:  # (a stage's RL phase implies a curriculum)
            # the run's RL recipe for that stage (batch, generations...), at the adapters' steps and learning rate
            trl |= {k: v for k, v in {**cfg.defaults.get("rl", {}), **stage_rl.trl}.items()
                    if k not in ("learning_rate", "max_steps")}
        trl |= {"max_steps": sz.steps, "learning_rate": sz.lr}
        if _options(job).batch is not None:
            trl["per_device_train_batch_size"] = sz.batch
        trl |= parse_trl(list(_options(job).trl))
        settings: dict[str, Any] = {
            "backbone": backbone, "domain": d, "lora": lora, "n": sz.n, "trl": trl, "seed": job.seed,
            "max_turns": getattr(stage_rl, "max_turns", None),
            "max_new_tokens": getattr(stage_rl, "max_new_tokens", None)}
        fp = hashlib.sha256(json.dumps({"settings": settings, "backbone": checkpoint_fingerprint(info)},
                                       sort_keys=True, default=str).encode()).hexdigest()[:16]
        folder = job.folder(name)
        spec = CheckpointSpec(name=name, path=f"checkpoints/{name}", kind="consolidated", method="mle", domain=d,
                              phase="rl", parent=backbone, on=backbone, seed=job.lineage.seed)
        done = job.reusable(folder, fp)
        if done is not None:
            outputs.append(Output(spec, {**settings, "parameters": expert_parameters(folder)}, done.time_s, reused=True))
            continue
        job.status(f"{name}: GRPO of a LoRA expert on {backbone}")
        data = arena_rl_data(d, sz.n, job.seed, max_context=positions, max_turns=settings["max_turns"],
                             max_new_tokens=settings["max_new_tokens"])
        t0 = time.perf_counter()
        res = run_rl(info.location, data, folder, trl=trl, seed=job.seed, fingerprint=fp,
                     meta={"name": name, "method": "mle", "domain": d},
                     peft_config=LoraConfig(task_type="CAUSAL_LM", **lora))
        outputs.append(Output(spec, {**settings, "parameters": expert_parameters(folder)}, time.perf_counter() - t0,
                              log=log_table(res.log_history)))
    return outputs


def _stage_rl(cfg: Any, domain: str) -> Any:
    if cfg is None:
        return None
    try:
        stage = cfg.stage(domain)
    except Exception:  # a curriculum without that stage: the defaults apply
        return None
    return next((p for p in stage.phases if p.kind == "rl"), None)


def _success_signal(job: Job, domains: Sequence[str]) -> Any:
    from aclarena.consolidate.routers import MatrixSuccess
    from aclarena.results.capability import load_matrix
    from aclarena.store import ResultsStore

    mode = _options(job).router_reward
    if mode == "simulated":
        return MatrixSuccess.simulated(domains)
    rates: dict[str, dict[str, float]] = {}
    store = ResultsStore(job.run_dir)
    if store.exists():
        with store.reader() as r:
            matrix = load_matrix(r, job.manifest)
        for e in domains:
            rates[e] = {d: matrix.value(expert_name(job, e), f"{d}/id") for d in domains}
    complete = bool(rates) and all(v == v for row in rates.values() for v in row.values())
    if complete:
        return MatrixSuccess(rates, "measured")
    if mode == "measured":
        raise AclarenaError("--router-reward measured needs every MLE expert scored on every domain's in-domain suite; "
                            f"run `aclarena-diag eval --run {job.run_dir} --suites id` first")
    return MatrixSuccess.simulated(domains)


def score_routers(job: Job, domains: Sequence[str]) -> list[str]:
    """Train and score every router of ``--routers``; write ``routing/<router>``; one note per router."""
    from aclarena.consolidate.contexts import evaluation_contexts, fingerprint, training_contexts
    from aclarena.consolidate.router_eval import evaluate_router
    from aclarena.consolidate.routers import build_router
    from aclarena.results.routing import write_routing
    from aclarena.store import ResultsStore

    names = _routers(job)
    train = training_contexts(domains, n=ROUTER_TRAIN_N, seed=job.seed)
    held = evaluation_contexts(domains, n=ROUTER_EVAL_N, seed=job.seed + 1)
    signal = _success_signal(job, domains)
    store = ResultsStore(job.run_dir)
    notes = []
    for name in names:
        t0 = time.perf_counter()
        router = build_router(name, domains, train, signal=signal, seed=job.seed)
        fit_s = time.perf_counter() - t0
        settings: dict[str, Any] = {"experts": list(domains), "train_n": ROUTER_TRAIN_N, "eval_n": ROUTER_EVAL_N,
                                    "seed": job.seed, "fit_seconds": round(fit_s, 3)}
        regret = None
        if name == "bandit":
            settings["reward"] = signal.source
            import numpy as np

            regret = np.asarray(router.log.regret, dtype=np.float64)  # type: ignore[attr-defined]
        report = evaluate_router(router, held, settings)
        write_routing(store, report.payload(fingerprint=fingerprint(held), regret=regret))
        parts = [f"{g.group} {g.accuracy:.2f}" for g in report.groups]
        notes.append(f"{name} router: " + ", ".join(parts))
    return notes


def record_routes(job: Job, domains: Sequence[str]) -> None:
    """Route every suite's deployed context; write ``consolidate/mle[-s<r>]`` with the answering checkpoints."""
    from aclarena.consolidate.contexts import env_context, training_contexts
    from aclarena.consolidate.routers import build_router
    from aclarena.envs import SUITES
    from aclarena.results.consolidation import MleRecord, write_consolidation

    suffix = job.lineage.suffix
    backbone = backbone_name(suffix)
    fallback = _options(job).fallback
    names = _routers(job)
    train = training_contexts(domains, n=ROUTER_TRAIN_N, seed=job.seed)
    signal = _success_signal(job, domains)
    routes: dict[str, dict[str, Any]] = {}
    for name in names:
        router = build_router(name, domains, train, signal=signal, seed=job.seed)
        routes[name] = {}
        for suite, (env, variant) in SUITES.items():
            r = router.route(env_context(env, variant))
            if r.expert is not None:
                ckpt: str | None = expert_name(job, r.expert)
            else:
                ckpt = backbone if fallback == "backbone" else None  # refuse: the suite is not served
            routes[name][suite] = {"expert": r.expert, "checkpoint": ckpt, "reason": r.reason}
    write_consolidation(job.run_dir, MleRecord(
        name=naming.consolidated_name(_stem(job), suffix), method="mle", replicate=job.lineage.replicate, seed=job.seed, fallback=fallback,
        routes=routes, experts={d: expert_name(job, d) for d in domains}, backbone=backbone))
