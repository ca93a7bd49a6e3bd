"""What a consolidation starts from: each replicate of the curriculum, read from the manifest.

A run trained with ``--seeds N`` holds N chains ``base -> seq-... -> seq-<last>`` (names of
replicate r >= 1 end in ``-s<r>``) and N sets of oracles; a consolidation of replicate r uses
that replicate's stage checkpoints, end point and oracles, and its outputs carry the same
suffix, so ``compare`` reports mean ± std over replicates as the study does (three runs each).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aclarena.errors import AclarenaError
from aclarena.results.capability import stage_chains
from aclarena.store.manifest import Manifest
from aclarena.train.naming import replicate_suffix


@dataclass(frozen=True)
class Lineage:
    """One replicate of the curriculum.

    Attributes:
        replicate: 0, 1, ... in the order of the chains.
        seed: the replicate's training seed (from the manifest), if recorded.
        base: the base checkpoint.
        stages: the checkpoint ending each stage, in curriculum order (``{domain: name}``).
        phases: every stage checkpoint of the chain, base excluded, in order.
        end: the sequential end point (the last stage's last phase).
        oracles: the last phase of each domain's single-task oracle (``{domain: name}``).
        repeat: the run has fewer chains than replicates asked for, and this one reuses the
            first chain (only methods with a seed of their own differ between such replicates).
    """

    replicate: int
    seed: int | None
    base: str
    stages: dict[str, str]
    phases: list[str]
    end: str
    oracles: dict[str, str] = field(default_factory=dict)
    repeat: bool = False

    @property
    def suffix(self) -> str:
        return replicate_suffix(self.replicate)

    @property
    def domains(self) -> list[str]:
        return list(self.stages)


def lineages(manifest: Manifest) -> list[Lineage]:
    """Every replicate of the curriculum in the manifest (chains of ``kind = "stage"``)."""
    chains = [c for c in stage_chains(manifest) if len(c) > 1]
    if not chains:
        raise AclarenaError(
            "the manifest has no stage checkpoints (kind = \"stage\" with a parent chain from the base); "
            "train a curriculum first (`aclarena-diag train`) or add the stages to the manifest"
        )
    out = []
    for r, chain in enumerate(chains):
        stages: dict[str, str] = {}
        for spec in chain[1:]:
            if spec.domain is None:
                raise AclarenaError(f"stage {spec.name!r} has no domain; add domain = \"...\" to it in the manifest")
            stages[spec.domain] = spec.name  # a later phase of the same stage ends it
        seed = chain[-1].seed
        out.append(Lineage(replicate=r, seed=seed, base=chain[0].name, stages=stages,
                           phases=[s.name for s in chain[1:]], end=chain[-1].name,
                           oracles=_oracles(manifest, seed, len(chains))))
    return out


def _oracles(manifest: Manifest, seed: int | None, n_chains: int) -> dict[str, str]:
    oracles = [s for s in manifest if s.kind == "oracle" and s.domain is not None]
    if n_chains > 1 and seed is not None:
        oracles = [s for s in oracles if s.seed == seed]
    out: dict[str, str] = {}
    for spec in oracles:
        # the last phase: an oracle no other oracle of its domain descends from
        later = [o for o in oracles if o.domain == spec.domain and o.name != spec.name
                 and spec.name in manifest.ancestors(o.name)]
        if not later:
            out.setdefault(spec.domain, spec.name)  # type: ignore[arg-type]
    return out


def pick(manifest: Manifest, seeds: int) -> list[Lineage]:
    """The first ``seeds`` replicates; a run with fewer chains repeats its first (training methods vary the seed)."""
    if seeds < 1:
        raise AclarenaError(f"--seeds must be >= 1, got {seeds}")
    found = lineages(manifest)
    if len(found) >= seeds:
        return found[:seeds]
    first = found[0]
    return found + [Lineage(replicate=r, seed=(first.seed or 0) + r, base=first.base, stages=first.stages,
                            phases=first.phases, end=first.end, oracles=first.oracles, repeat=True)
                    for r in range(len(found), seeds)]
