"""Checkpoint names of a curriculum run (docs/training.md, "Names").

* ``base``: stage 0 (the mini base, or the HF base named in the config).
* ``seq-<domain>``: the end of a stage of the sequential chain; when the stage has an SFT
  phase before its RL phase, the SFT end is ``seq-<domain>-sft`` and ``seq-<domain>`` is the
  RL end (the manifest's ``phase`` says which is which).
* ``oracle-<domain>`` (and ``oracle-<domain>-sft``): the single-task oracle, trained from
  the base with that domain's stage recipe.
* With ``--seeds N``, replicate ``r`` >= 1 of the curriculum appends ``-s<r>`` to every name
  but ``base``, which all replicates share (``seq-math-s1``, ``oracle-if-sft-s2``).
* The order study (``study --orders``): ``ord-<d1>-<d2>...`` ends the prefix ``d1 -> d2 -> ...`` of an order
  (``ord-math-search``, its SFT end ``ord-math-search-sft``, ``-s<r>`` per replicate).
* The demo's repair ``repair-<stage>``; ``monitor --lead-time --same-domain``'s phases ``cont-<phase>``.
* Consolidations (docs/consolidation.md): ``--name`` or the method's own stem with the replicate's
  suffix (``sdft-s1``); task arithmetic one per λ (``merge-ta-l0.5``); MLE one expert per domain
  (``mle-math``) on the SDFT output of its replicate (``sdft``, the backbone).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Protocol


class _Phase(Protocol):
    @property
    def kind(self) -> str: ...


class Stage(Protocol):
    """What names need of a stage (:class:`aclarena.train.config.StageSpec` is one): its domain and phases."""

    @property
    def domain(self) -> str: ...

    @property
    def phases(self) -> Sequence[_Phase]: ...


def replicate_suffix(replicate: int) -> str:
    return f"-s{replicate}" if replicate else ""


#: the prefixes of the sequential chain's and the oracles' checkpoints
SEQ, ORACLE = "seq", "oracle"


def checkpoint_name(prefix: str, domain: str, replicate: int = 0, phase: str | None = None) -> str:
    """``<prefix>-<domain>[-<phase>][-s<r>]``: a stage's end (``phase`` None) or the end of its ``phase``
    when that is not the stage's last (``seq-math-sft``)."""
    return f"{prefix}-{domain}{'' if phase is None else f'-{phase}'}{replicate_suffix(replicate)}"


def seq_name(domain: str, replicate: int = 0, phase: str | None = None) -> str:
    """The sequential chain's checkpoint of ``domain``: ``seq-math``, ``seq-math-sft``, ``seq-math-s1``."""
    return checkpoint_name(SEQ, domain, replicate, phase)


def oracle_name(domain: str, replicate: int = 0, phase: str | None = None) -> str:
    """The single-task oracle's checkpoint of ``domain``: ``oracle-if``, ``oracle-if-sft-s2``."""
    return checkpoint_name(ORACLE, domain, replicate, phase)


#: the MLE experts' backbone: the SDFT output of their replicate, under SDFT's own name
SDFT_BACKBONE = "sdft"


def consolidated_name(stem: str, suffix: str = "") -> str:
    """A consolidation's output: ``stem`` (``--name`` or the method's own) with the replicate's ``suffix``."""
    return f"{stem}{suffix}"


def lambda_name(prefix: str, lam: float) -> str:
    """Task arithmetic's output for one λ of its sweep: ``merge-ta-l0.5``."""
    return f"{prefix}-l{lam:g}"


def expert_name(stem: str, domain: str, suffix: str = "") -> str:
    """An MLE expert: ``mle-math``, ``mle-math-s1``."""
    return f"{stem}-{domain}{suffix}"


def repair_name(stage: str) -> str:
    """The demo's training-free repair of ``stage``: ``repair-seq-search``."""
    return f"repair-{stage}"


#: the order study's checkpoints: ``ord-<domain>-<domain>...`` (the prefix of the order they end)
ORDER = "ord"


def order_node_name(prefix: Sequence[str], replicate: int = 0, phase: str | None = None) -> str:
    """The order study's checkpoint at the end of ``prefix`` (``ord-math-search``), its ``phase`` when that
    is not the stage's last (``ord-math-search-sft``), replicate ``r`` >= 1 suffixed ``-s<r>``; the empty
    prefix is ``base`` (shared by every replicate)."""
    if not prefix:
        return "base"
    return checkpoint_name(ORDER, "-".join(prefix), replicate, phase)


def continued_name(phase: str) -> str:
    """``monitor --lead-time --same-domain``'s retrained phase ``phase``, continued from elsewhere: ``cont-<phase>``."""
    return f"cont-{phase}"


def phase_names(prefix: str, stage: Stage, replicate: int = 0) -> list[str]:
    """Names of a stage's phases, in order: ``[seq-d-sft, seq-d]`` or ``[seq-d]``."""
    kinds = [p.kind for p in stage.phases]
    return ([checkpoint_name(prefix, stage.domain, replicate, k) for k in kinds[:-1]]
            + [checkpoint_name(prefix, stage.domain, replicate)])


def seed0_name(name: str, replicate: int) -> str:
    """The name replicate 0 gives what replicate ``replicate`` named ``name`` (``merge-uniform-s1`` ->
    ``merge-uniform``): the label of a checkpoint over seeds; a name without the suffix is its own."""
    sfx = replicate_suffix(replicate)
    return name[: -len(sfx)] if sfx and name.endswith(sfx) else name


REPLICATE_RE = re.compile(r"^(?P<stem>.+)-s(?P<r>[1-9][0-9]*)$")


def replicate_groups(names: Iterable[str]) -> dict[str, list[str]]:
    """Checkpoints of ``--seeds N`` curricula grouped by their seed-0 name: ``{"seq-math":
    ["seq-math", "seq-math-s1", "seq-math-s2"]}``; only names with at least one replicate appear."""
    names = list(names)
    known = set(names)
    groups: dict[str, list[str]] = {}
    for n in names:
        m = REPLICATE_RE.match(n)
        if m and m["stem"] in known:
            groups.setdefault(m["stem"], [m["stem"]]).append(n)
    return groups
