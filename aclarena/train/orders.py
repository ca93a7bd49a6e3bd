"""Training the stages of an order study: the prefix tree of :mod:`aclarena.diagnostics.orders`, per seed.

Each node (a prefix such as math -> search) is one stage of the parent curriculum's recipe for its last
domain, trained from its parent prefix's end (``base`` for the first stage), once for every order that
starts with it. Phase seeds are those of :func:`aclarena.train.plan.phase_seed` (the run's seed, the
domain and the phase kind, not the position), and fingerprints chain through the parents as in
:func:`aclarena.train.plan.plan`, so a finished node is reused by a rerun or by a second design
trained into the same folder (``--orders pairs`` then ``--orders latin``). Names:
:func:`aclarena.train.naming.order_node_name` (``ord-math-search-sft``, ``ord-math-search``, ``-s<r>`` for
replicate ``r`` >= 1).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from aclarena.diagnostics.orders import OrderPlan
from aclarena.train.config import CurriculumConfig
from aclarena.train.curriculum import CHECKPOINTS, CurriculumRun, PhaseRecord, train_jobs
from aclarena.train.naming import order_node_name
from aclarena.train.plan import Job, _fp, phase_seed, plan


def order_jobs(cfg: CurriculumConfig, order_plan: OrderPlan) -> list[Job]:
    """The base, then every node's phases per replicate (parents first)."""
    base = plan(cfg, 1)[0]
    jobs = [base]
    fps = {"base": base.fingerprint}
    for r in range(order_plan.seeds):
        run_seed = cfg.seed + r
        for prefix in order_plan.nodes:
            stage = cfg.stage(prefix[-1])
            parent = order_node_name(prefix[:-1], r)
            kinds = [p.kind for p in stage.phases]
            for i, spec in enumerate(stage.phases):
                name = order_node_name(prefix, r, None if i == len(kinds) - 1 else spec.kind)
                seed = phase_seed(run_seed, stage.domain, spec.kind)
                fp = _fp({"spec": spec.identity(), "seed": seed, "parent": fps[parent]})
                jobs.append(Job(name=name, kind="stage", domain=stage.domain, phase=spec.kind, parent=parent,
                                spec=spec, seed=seed, replicate=r, run_seed=run_seed, fingerprint=fp))
                fps[name] = fp
                parent = name
    return jobs


def to_train(out: str | os.PathLike[str], jobs: list[Job]) -> list[Job]:
    """The jobs not yet finished in ``out`` (a finished folder with the job's fingerprint is reused)."""
    from aclarena.train.phase_record import finished

    todo = []
    for j in jobs:
        folder = Path(out) / CHECKPOINTS / j.name
        try:
            done = finished(str(folder), j.fingerprint) if folder.exists() else None
        except Exception:  # noqa: BLE001 (an unreadable folder is trained again, as run_curriculum would)
            done = None
        if done is None:
            todo.append(j)
    return todo


def train_orders(cfg: CurriculumConfig, out: str | os.PathLike[str], order_plan: OrderPlan, *,
                 show_progress: bool = False, config_text: str | None = None,
                 on_phase: Callable[[PhaseRecord], None] | None = None) -> CurriculumRun:
    """Train every node of ``order_plan`` into ``out`` (finished phases are skipped), registering each in the
    manifest as a ``stage`` checkpoint with its parent, domain and phase (the curriculum's own loop,
    :func:`aclarena.train.curriculum.train_jobs`: progress in training steps, with the run's rate and ETA)."""
    return train_jobs(cfg, out, order_jobs(cfg, order_plan), title="orders", show_progress=show_progress,
                      config_text=config_text, on_phase=on_phase)
