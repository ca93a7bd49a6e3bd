"""The ``consolidation`` result type: the record of each consolidated checkpoint, repair and MLE system.

One group per record at ``consolidate/<name>`` (result type ``consolidation``, version 0.1.0; the
elements are specified in docs/store-format.md), of three kinds, each its own payload:
:class:`CheckpointRecord` (a checkpoint ``aclarena-diag consolidate`` made: how, its settings, the
trainer's log), :class:`RepairRecord` (a checkpoint ``aclarena-diag repair`` made) and
:class:`MleRecord` (``consolidate/mle[-s<r>]``: which checkpoint answers each suite's deployed
context, per router). :mod:`aclarena.analysis.consolidate`, :mod:`aclarena.analysis.repair` and
:mod:`aclarena.consolidate.mle` write them with :func:`write_consolidation`; :func:`read_consolidation`
reads one back (a decoded record is the kind it was written as). Plain numpy and JSON here: no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.store.results import ResultsStore, StoreReader

ROOT = "consolidate"
RESULT_TYPE = "consolidation"
RESULT_VERSION = "0.1.0"
#: the method name of a repair's record starts with this (``repair-svd-restore``)
REPAIR_PREFIX = "repair-"


def consolidation_key(name: str) -> str:
    return f"{ROOT}/{name}"


@dataclass(frozen=True)
class ConsolidationRecord:
    """What every record has: the checkpoint (or MLE system) it records and the method that made it."""

    name: str
    method: str


@dataclass(frozen=True)
class CheckpointRecord(ConsolidationRecord):
    """A consolidated checkpoint: replicate and seed, ``seconds`` to make it, ``reused`` (a rerun found it
    finished), ``settings`` (for merges the merge and λ/density/p/seed, ``sources``, ``base``, ``k``; for
    training methods what they trained on); ``log``: the trainer's log history as columns (``step``, then one
    float column per logged number), ``summary``: what the method adds (SDFT's kept trajectories, MMOPD's
    prompts); both None for merges and reused outputs."""

    replicate: int
    seed: int
    seconds: float
    reused: bool
    settings: dict[str, Any]
    log: dict[str, Any] | None = None
    summary: Any = None


@dataclass(frozen=True)
class RepairRecord(ConsolidationRecord):
    """A repaired checkpoint (``method`` = ``repair-<method>``): ``seconds``, ``reused`` and ``settings`` (its
    lineage ``from``/``to``, the oracle, layers, tensors repaired, energy removed, directions kept, notes)."""

    seconds: float
    reused: bool
    settings: dict[str, Any]


@dataclass(frozen=True)
class MleRecord(ConsolidationRecord):
    """The MLE system of one replicate (``method`` = ``mle``): ``routes`` ``{router: {suite: {"expert": domain or
    None, "checkpoint": name or None, "reason": text}}}`` (the backbone answers when no expert fits; None when
    the ``fallback`` is ``refuse``), ``experts`` ``{domain: expert checkpoint}``, the ``backbone``."""

    replicate: int
    seed: int
    fallback: str
    routes: dict[str, dict[str, dict[str, Any]]]
    experts: dict[str, str]
    backbone: str


def read_consolidation(reader: StoreReader, name: str) -> ConsolidationRecord:
    """The record of ``name`` (a :class:`CheckpointRecord`, :class:`RepairRecord` or :class:`MleRecord`), upgraded
    to the current version."""
    data: ConsolidationRecord = registry.read(reader, consolidation_key(name), RESULT_TYPE)
    return data


def list_consolidations(reader: StoreReader | None) -> list[ConsolidationRecord]:
    """Every stored record, in name order; [] when there is none."""
    if reader is None or not reader.has(ROOT):
        return []
    return [read_consolidation(reader, name) for name in sorted(reader.keys(ROOT))
            if reader.attrs(consolidation_key(name)).get("result-type") == RESULT_TYPE]


def write_consolidation(store: ResultsStore | str | os.PathLike[str], record: ConsolidationRecord, *,
                        manifest_text: str | None = None) -> str:
    """Write ``record`` under :func:`consolidation_key` (replacing the one there), completely or not at all;
    returns the key."""
    key = consolidation_key(record.name)
    registry.write(store, RESULT_TYPE, key, record, overwrite=True, manifest_text=manifest_text)
    return key


def encode(p: ConsolidationRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json, Table

    if isinstance(p, MleRecord):
        return ({"routes": Json(p.routes), "experts": Json(p.experts), "backbone": Json(p.backbone)},
                {"method": p.method, "replicate": p.replicate, "fallback": p.fallback, "seed": p.seed})
    if isinstance(p, RepairRecord):
        return ({"settings": Json(dict(p.settings))},
                {"method": p.method, "seconds": p.seconds, "reused": p.reused, "settings": dict(p.settings)})
    if isinstance(p, CheckpointRecord):
        data: dict[str, Any] = {"settings": Json(dict(p.settings))}
        if p.log is not None:
            data["log"] = Table(dict(p.log))
        if p.summary is not None:
            data["summary"] = Json(p.summary)
        return data, {"method": p.method, "replicate": p.replicate, "seed": p.seed, "seconds": p.seconds,
                      "reused": p.reused, "settings": dict(p.settings)}
    raise TypeError(f"not a consolidation record: {type(p).__name__}")


def decode(s: Stored) -> ConsolidationRecord:
    """A current-version stored record as its payload, of the kind it was written as; a wrong shape raises
    (``reader.damaged`` makes it one line)."""
    a, d = s.attrs, s.data
    name, method = s.key.rsplit("/", 1)[-1], str(a["method"])
    if "routes" in d:
        routes = d["routes"]
        _expect(isinstance(routes, dict) and all(
            isinstance(suites, dict) and all(
                isinstance(r, dict) and "checkpoint" in r
                and all(r.get(k) is None or isinstance(r[k], str) for k in ("checkpoint", "expert"))
                for r in suites.values())
            for suites in routes.values()), "routes is not {router: {suite: {expert, checkpoint}}}")
        _expect(isinstance(d["experts"], dict) and isinstance(d["backbone"], str),
                "experts is not an object or backbone not a name")
        return MleRecord(name=name, method=method, replicate=_count(a["replicate"], "replicate"),
                         seed=_count(a["seed"], "seed"), fallback=str(a["fallback"]), routes=routes,
                         experts=d["experts"], backbone=d["backbone"])
    settings = d["settings"]
    _expect(isinstance(settings, dict), "settings is not a JSON object")
    if method.startswith(REPAIR_PREFIX):
        return RepairRecord(name=name, method=method, seconds=float(a["seconds"]), reused=bool(a["reused"]),
                            settings=settings)
    log = None
    if "log" in d:
        table = d["log"]
        _expect(hasattr(table, "columns"), "log is not a table")
        log = {k: np.asarray(v) for k, v in table.columns.items()}
    return CheckpointRecord(name=name, method=method, replicate=_count(a["replicate"], "replicate"),
                            seed=int(a["seed"]), seconds=float(a["seconds"]), reused=bool(a["reused"]),
                            settings=settings, log=log, summary=d.get("summary"))


CONSOLIDATION = registry.register(ResultType(name=RESULT_TYPE, version=RESULT_VERSION, payload=ConsolidationRecord,
                                             encode=encode, decode=decode, upgrades={}))


def _count(value: Any, what: str) -> int:
    _expect(isinstance(value, int | np.integer) and not isinstance(value, bool) and bool(value >= 0),
            f"{what} is {str(value)[:20]!r}, not a non-negative integer")
    return int(value)


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # turned into one line naming the key by ``reader.damaged``
