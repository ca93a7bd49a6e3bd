"""SDFT as the ACLArena study defines it: oracle rollouts, a reward filter, one domain-balanced mixed SFT.

For each domain, the domain's single-task oracle samples ``k`` trajectories on ``n`` training
tasks; the trajectories with reward 1 are kept (:func:`aclarena.train.data.rejection_records`);
then one SFT phase trains on all domains at once, every batch holding an equal share of each
domain (:func:`balanced_order`, read in order by the trainer), from the base by default
(``--start end``: from the sequential end point). Each batch is read in micro-batches of one domain's
share, shortest records together, with gradient accumulation (:func:`length_grouped`): the same
optimizer steps as the whole batch at once, without padding math conversations to e-commerce length.

A domain whose oracle solves too few tasks is topped up with the arena's scripted expert
trajectories, and the run records how many (``settings.filled``): on a tiny model an oracle of a
hard domain may solve almost nothing, and SFT on nothing would drop the domain silently.

Not to be confused with *Self-Distillation Fine-Tuning* (Yang et al., 2024, arXiv 2402.13669),
also abbreviated SDFT, which fine-tunes on the model's own rewrites of demonstrations
(demonstration-conditioned self-distillation); docs/consolidation.md compares the two.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aclarena.consolidate.options import SDFTOptions
from aclarena.errors import AclarenaError
from aclarena.train.naming import consolidated_name


def balanced_order(by_domain: Mapping[str, Sequence[dict[str, Any]]], batch_size: int, n_batches: int,
                   seed: int) -> list[dict[str, Any]]:
    """``n_batches`` consecutive batches of ``batch_size`` records, each with ``batch_size / D`` of every domain.

    Each domain's records are cycled through in a shuffled order (reshuffled on every pass),
    and each batch is shuffled, so a trainer reading the list in order (a sequential sampler)
    sees every domain equally in every batch.
    """
    domains = [d for d in by_domain]
    if not domains:
        raise AclarenaError("no domain to train on")
    empty = [d for d in domains if not by_domain[d]]
    if empty:
        raise AclarenaError(f"no training record for domain {empty[0]!r}; SDFT needs every domain")
    if batch_size % len(domains):
        raise AclarenaError(f"the SDFT batch size ({batch_size}) must be a multiple of the number of domains "
                            f"({len(domains)}) so that every batch holds an equal share of each")
    per = batch_size // len(domains)
    rng = random.Random(seed)
    pools: dict[str, list[dict[str, Any]]] = {d: [] for d in domains}

    def draw(d: str) -> dict[str, Any]:
        if not pools[d]:
            pools[d] = list(by_domain[d])
            rng.shuffle(pools[d])
        return pools[d].pop()

    out: list[dict[str, Any]] = []
    for _ in range(n_batches):
        batch = [draw(d) for d in domains for _ in range(per)]
        rng.shuffle(batch)
        out.extend(batch)
    return out


def length_grouped(order: Sequence[dict[str, Any]], batch: int) -> list[dict[str, Any]]:
    """``order`` with the records of each consecutive batch of ``batch`` sorted by length (shortest first).

    A domain-balanced batch mixes e-commerce conversations (~580 tokens in the mini arena) with math and IF
    ones (~100): padded together, most of the batch is padding. Read in micro-batches of one domain's share
    with gradient accumulation, each optimizer step still sees the same records (the same sum of token losses
    over the same token count: trl divides by the step's item count), but each micro-batch pads only to its
    own longest record. The length is the record's serialized size, a proxy for its token count.
    """
    import json

    out: list[dict[str, Any]] = []
    for i in range(0, len(order), batch):
        out.extend(sorted(order[i:i + batch], key=lambda r: len(json.dumps(r, sort_keys=True, default=str))))
    return out


def batching(batch: int, domains: int, given: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """The trainer's batch fields for a balanced batch of ``batch`` records over ``domains`` domains, and the
    micro-batch: one domain's share, read with gradient accumulation (:func:`length_grouped`), unless the
    ``--trl`` fields ``given`` set the batching themselves (then the whole batch at once, micro-batch None)."""
    if {"per_device_train_batch_size", "gradient_accumulation_steps"} & set(given):
        return {"per_device_train_batch_size": batch}, None
    micro = batch // domains
    return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": batch // micro}, micro


def trainer_fields(steps: int, lr: float, batch: int, domains: int,
                   given: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """SDFT's trl fields (``given``, the ``--trl`` ones, win) and its micro-batch (:func:`batching`)."""
    per_step, micro = batching(batch, domains, given)
    return {"max_steps": steps, **per_step, "learning_rate": lr, "train_sampling_strategy": "sequential"} | dict(
        given), micro


def mixed_order(by_domain: Mapping[str, Sequence[dict[str, Any]]], batch: int, steps: int, trl: Mapping[str, Any],
                micro: int | None, seed: int) -> list[dict[str, Any]]:
    """The records the trainer reads in order for ``steps`` optimizer steps (see :func:`batching`)."""
    if micro is None:
        return balanced_order(by_domain, batch, steps * int(trl.get("gradient_accumulation_steps", 1)), seed)
    return length_grouped(balanced_order(by_domain, batch, steps, seed), batch)


def top_up(records: list[dict[str, Any]], domain: str, minimum: int, seed: int) -> tuple[list[dict[str, Any]], int]:
    """``records`` with scripted expert trajectories added up to ``minimum``; returns them and how many were added."""
    from aclarena.train.data import expert_records

    missing = max(0, minimum - len(records))
    if not missing:
        return records, 0
    return records + expert_records(domain, missing, seed + 7919), missing


def _rollout_cache(run_dir: Any, domain: str, oracle: str, n: int, k: int, seed: int) -> Path:
    """Where the oracle's kept rollouts of ``domain`` are kept for the next SDFT of the same replicate (from the
    base and from the end sample the same oracles alike: the second reads the first's), named by what decides them:
    the oracle's weights (``oracle``: its fingerprint), the tasks and the samples."""
    import hashlib
    import json

    key = hashlib.sha256(json.dumps({"oracle": oracle, "domain": domain, "n": n, "k": k, "seed": seed},
                                    sort_keys=True).encode()).hexdigest()[:16]
    return Path(run_dir) / "work" / "sdft-rollouts" / f"{domain}-{key}.json"


def _read_rollouts(path: Path) -> list[dict[str, Any]] | None:
    """The records kept in ``path``; None when there are none (or the file is unreadable: they are sampled again)."""
    import json

    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return records if isinstance(records, list) and all(isinstance(r, dict) for r in records) else None


def _start(job: Any) -> str:
    assert isinstance(job.options, SDFTOptions)
    return job.options.start


def output_names(job: Any) -> list[str]:
    """The checkpoint this replicate writes: ``--name`` or ``sdft`` (``sdft-from-end`` with ``--start end``)."""
    return [consolidated_name(job.stem("sdft" if _start(job) == "base" else "sdft-from-end"), job.lineage.suffix)]


def run(job: Any) -> list[Any]:
    """Consolidate one replicate with SDFT into ``sdft[-s<r>]`` (``sdft-from-end[-s<r>]`` with ``--start end``)."""
    import hashlib
    import json
    import time

    from aclarena.consolidate.methods import Output
    from aclarena.consolidate.recipe import parse_trl, sizes
    from aclarena.models.checkpoint import inspect
    from aclarena.models.tensors import checkpoint_fingerprint
    from aclarena.store.manifest import CheckpointSpec, write_text_atomic
    from aclarena.train.data import rejection_records
    from aclarena.train.phases import load_start, quiet, run_sft
    from aclarena.train.progress import log_table

    quiet()  # before any model is loaded: no per-model progress bars
    lin = job.lineage
    domains = lin.domains
    missing = [d for d in domains if d not in lin.oracles]
    if missing:
        raise AclarenaError(f"SDFT samples each domain's oracle; the run has no oracle for {missing[0]!r} "
                            "(train the oracles: [oracles] in the curriculum config)")
    start = _start(job)
    start_name = lin.base if start == "base" else lin.end
    name = output_names(job)[0]
    sz = sizes("sdft", job.run_dir, job.options)
    batch = sz.batch if sz.batch % len(domains) == 0 else len(domains) * max(1, sz.batch // len(domains))
    trl, micro = trainer_fields(sz.steps, sz.lr, batch, len(domains), parse_trl(list(job.options.trl)))
    seen: dict[str, Any] = {}
    infos = {n: inspect(job.manifest.resolve(n), job.manifest, job.run_dir, _seen=seen)
             for n in [start_name, *lin.oracles.values()]}
    for info in infos.values():
        info.require_loadable()
    settings = {"start": start_name, "oracles": dict(lin.oracles), "n": sz.n, "k": sz.k, "minimum": sz.minimum,
                "batch": batch, "micro_batch": micro, "trl": trl, "seed": job.seed}
    fp = hashlib.sha256(json.dumps({"settings": settings, "inputs": {n: checkpoint_fingerprint(i) for n, i in
                                                                      infos.items()}}, sort_keys=True,
                                   default=str).encode()).hexdigest()[:16]
    folder = job.folder(name)
    spec = CheckpointSpec(name=name, path=f"checkpoints/{name}", kind="consolidated", method="sdft", parent=start_name,
                          seed=lin.seed)
    done = job.reusable(folder, fp)
    if done is not None:
        return [Output(spec, {**settings, **done.meta.get("data", {})}, done.time_s, reused=True)]
    t0 = time.perf_counter()
    by_domain: dict[str, list[dict[str, Any]]] = {}
    kept: dict[str, int] = {}
    filled: dict[str, int] = {}
    reused: dict[str, bool] = {}
    for d in domains:
        job.status(f"{name}: rollouts of {lin.oracles[d]}")
        oracle = infos[lin.oracles[d]]
        cache = _rollout_cache(job.run_dir, d, checkpoint_fingerprint(oracle), sz.n, sz.k, job.seed)
        recs = _read_rollouts(cache)
        reused[d] = recs is not None
        if recs is None:
            model, tok = load_start(oracle.location)
            recs = rejection_records(model, tok, d, sz.n, sz.k, job.seed)
            del model
            write_text_atomic(cache, json.dumps(recs))
        kept[d] = len(recs)
        by_domain[d], filled[d] = top_up(recs, d, sz.minimum, job.seed)
        if filled[d]:
            job.note(f"{name}: {lin.oracles[d]} solved {kept[d]} of {sz.n} {d} tasks ({sz.k} samples each); "
                     f"{filled[d]} scripted expert trajectories fill the {d} share")
    rollout_s = time.perf_counter() - t0
    order = mixed_order(by_domain, batch, sz.steps, trl, micro, job.seed)
    data = {"kept": kept, "filled": filled, "rollout_seconds": round(rollout_s, 2), "rollouts_reused": reused}
    job.status(f"{name}: mixed SFT on {len(order)} records")
    res = run_sft(infos[start_name].location, order, folder, trl=trl, seed=job.seed, fingerprint=fp,
                  meta={"name": name, "method": "sdft", "data": data})
    return [Output(spec, {**settings, **data}, time.perf_counter() - t0,
                   log=log_table(res.log_history), summary=data)]
