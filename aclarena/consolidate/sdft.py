"""SDFT as the ACLArena study defines it: oracle rollouts, a reward filter, one domain-balanced mixed SFT.

For each domain, the domain's single-task oracle samples ``k`` trajectories on ``n`` training
tasks; the trajectories with reward 1 are kept (:func:`aclarena.envs.experts.rejection_sample`);
then one SFT phase trains on all domains at once, every batch holding an equal share of each
domain (:func:`balanced_order`, read in order by the trainer), from the base by default
(``--start end``: from the sequential end point).

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
from typing import Any

from aclarena.errors import AclarenaError


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


def filtered_rollouts(model: Any, tokenizer: Any, domain: str, n: int, k: int, seed: int) -> list[dict[str, Any]]:
    """Reward-1 trajectories of ``model`` on ``n`` train tasks of ``domain`` (``k`` samples each), as SFT records."""
    from aclarena.envs import get_env
    from aclarena.envs.experts import hf_ready, rejection_sample

    tasks = get_env(domain).generate(n, seed=seed, split="train", variant="id")
    tokenizer.padding_side = "left"
    model.eval()
    return hf_ready(rejection_sample(model, tokenizer, tasks, k=k, seed=seed))


def top_up(records: list[dict[str, Any]], domain: str, minimum: int, seed: int) -> tuple[list[dict[str, Any]], int]:
    """``records`` with scripted expert trajectories added up to ``minimum``; returns them and how many were added."""
    from aclarena.envs.experts import expert_dataset, hf_ready

    missing = max(0, minimum - len(records))
    if not missing:
        return records, 0
    extra = hf_ready(expert_dataset(domain, missing, seed=seed + 7919, split="train"))
    return records + extra, missing
