"""The plan of a curriculum: every phase to train (:class:`Job`), in order, with its name, parent, seed and
fingerprint; nothing is trained here (:mod:`aclarena.train.curriculum` runs the plan).

Seeds: replicate ``r`` of ``--seeds N`` uses seed ``config.seed + r``; each phase derives its
training and data seed from it, the domain and the phase kind (:func:`phase_seed`), so a domain's
oracle trained from the base with its stage's recipe uses the same data and seed as the stage.
When that stage also starts from the base (the first stage), oracle and stage are the same
computation: the oracle gets the stage's fingerprint and ``same_as`` names the stage.

A fingerprint is the identity of everything that decides a phase's result (its settings, seed and
parent's fingerprint); a finished phase is found again by it, so its rule never changes
(tests/unit/test_plan_fingerprints.py pins it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from aclarena.errors import AclarenaError
from aclarena.train.config import DOMAINS, PHASE_KINDS, CurriculumConfig, PhaseSpec
from aclarena.train.naming import phase_names, replicate_suffix


@dataclass(frozen=True)
class Job:
    """One phase to train (or the base to build / point at).

    Attributes:
        name: the checkpoint name (``seq-math-sft``, ``oracle-ecom``...).
        kind: ``base``, ``stage`` or ``oracle`` (the manifest's kind).
        domain, phase: what it trains (``None`` for the base).
        parent: the checkpoint it starts from (a name of this plan).
        spec: the phase's settings (``None`` for the base).
        seed: the phase's training and data seed.
        replicate: which curriculum of ``--seeds N`` (0 for the first).
        run_seed: the curriculum's seed (recorded in the manifest).
        fingerprint: identity of everything that decides the result (settings, seeds, parents).
        same_as: a job with the same fingerprint whose folder this one reuses.
    """

    name: str
    kind: str
    domain: str | None
    phase: str | None
    parent: str | None
    spec: PhaseSpec | None
    seed: int
    replicate: int
    run_seed: int
    fingerprint: str
    same_as: str | None = None

    @property
    def trains(self) -> bool:
        return self.same_as is None


def phase_seed(seed: int, domain: str, kind: str) -> int:
    """The seed of a phase: the run's seed, the domain and the phase kind (not the stage's position)."""
    return seed * 1000 + (DOMAINS.index(domain) + 1) * 10 + PHASE_KINDS.index(kind)


def _fp(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def plan(cfg: CurriculumConfig, seeds: int = 1) -> list[Job]:
    """Every phase of ``seeds`` replicates of the curriculum, in training order (base first)."""
    if seeds < 1:
        raise AclarenaError(f"--seeds must be >= 1, got {seeds}")
    if cfg.base.is_mini and not cfg.base.builds:  # the shipped base: its files are its identity
        from aclarena.models.shipped import recorded

        base_fp = _fp({"shipped": recorded()["fingerprint"]})
    else:
        base_fp = _fp({"base": cfg.base.identity(), "seed": cfg.seed})
    jobs = [Job(name="base", kind="base", domain=None, phase=None, parent=None, spec=None, seed=cfg.seed,
                replicate=0, run_seed=cfg.seed, fingerprint=base_fp)]
    fps = {"base": base_fp}
    for r in range(seeds):
        run_seed = cfg.seed + r
        suffix = replicate_suffix(r)
        by_fp: dict[str, str] = {}
        previous = "base"
        for stage in cfg.stages:
            names = phase_names("seq", stage, r)
            parent = previous if stage.parent is None else (
                "base" if stage.parent == "base" else stage.parent + suffix)
            for name, spec in zip(names, stage.phases, strict=True):
                seed = phase_seed(run_seed, stage.domain, spec.kind)
                fp = _fp({"spec": spec.identity(), "seed": seed, "parent": fps[parent]})
                jobs.append(Job(name=name, kind="stage", domain=stage.domain, phase=spec.kind, parent=parent,
                                spec=spec, seed=seed, replicate=r, run_seed=run_seed, fingerprint=fp))
                fps[name] = fp
                by_fp.setdefault(fp, name)
                parent = name
            previous = names[-1]
        for domain in cfg.oracles:
            stage = cfg.stage(domain)
            parent = "base"
            for name, spec in zip(phase_names("oracle", stage, r), stage.phases, strict=True):
                seed = phase_seed(run_seed, domain, spec.kind)
                fp = _fp({"spec": spec.identity(), "seed": seed, "parent": fps[parent]})
                jobs.append(Job(name=name, kind="oracle", domain=domain, phase=spec.kind, parent=parent, spec=spec,
                                seed=seed, replicate=r, run_seed=run_seed, fingerprint=fp, same_as=by_fp.get(fp)))
                fps[name] = fp
                parent = name
    return jobs
