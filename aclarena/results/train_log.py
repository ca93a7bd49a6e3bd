"""The ``train-log`` result type: the trainer's log of one finished training phase, its payload, and how it is stored.

A result sits at ``train/<checkpoint>`` (result type ``train-log``, version 0.1.0); its elements are specified in
docs/store-format.md. ``aclarena-diag train`` (:mod:`aclarena.train.curriculum`) makes the payload
(:class:`TrainLog`) when the phase that made ``<checkpoint>`` is finished and writes every new one with
:func:`write_train_logs`; :func:`read_train_logs` reads them all back. Plain numpy and JSON here: no torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.store.results import ResultsStore, StoreReader

ROOT = "train"
RESULT_TYPE = "train-log"
RESULT_VERSION = "0.1.0"


def train_log_key(checkpoint: str) -> str:
    return f"{ROOT}/{checkpoint}"


@dataclass(frozen=True)
class TrainLog:
    """The trainer's log of the phase that made ``checkpoint``.

    ``kind``: ``base``, ``stage`` or ``oracle``; ``domain``: ``""`` for the base; ``phase``: ``sft``, ``rl`` or
    ``pretrain`` (the mini base); ``parent``: ``""`` for the base; ``seed``: the phase's training seed; ``steps``;
    ``time_s``: seconds of the training call that finished the phase; ``resumed_from_step``: -1 when it did not
    resume; ``fingerprint``: of the job; ``log``: one list per column (``step`` first, then one float column per
    number the trainer logged, NaN where a row lacks it; :func:`aclarena.train.progress.log_table`);
    ``settings``: ``spec``, ``seed``, ``fingerprint``; ``data``: the rejection-sampling report (``kept``,
    ``fallback_tasks``, ...) or None.
    """

    checkpoint: str
    kind: str
    domain: str
    phase: str
    parent: str
    seed: int
    steps: int
    time_s: float
    resumed_from_step: int
    fingerprint: str
    log: dict[str, list[Any]]
    settings: dict[str, Any]
    data: dict[str, Any] | None = None
    key: str = ""


def stored_checkpoints(store: ResultsStore) -> set[str]:
    """The checkpoints with a group under :data:`ROOT` (of any type) in ``store``; none when there is no file."""
    return set(store.keys(ROOT)) if store.exists() and store.has(ROOT) else set()


def write_train_logs(store: ResultsStore | str | os.PathLike[str], payloads: Sequence[TrainLog], *,
                     manifest_text: str | None = None) -> list[str]:
    """Write each of ``payloads`` under :func:`train_log_key` (replacing what is there), all in one write, completely
    or not at all; returns the keys (nothing is written when there are none)."""
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    items = [TRAIN_LOG.item(train_log_key(p.checkpoint), p) for p in payloads]
    if items:
        store.write_many(items, overwrite=True, manifest_text=manifest_text)
    return [i[0] for i in items]


def read_train_logs(reader: StoreReader | None) -> dict[str, TrainLog]:
    """``{checkpoint: TrainLog}`` of every phase stored by ``train`` in an open store (groups of other types under
    :data:`ROOT` are skipped); each element is checked for the shape docs/store-format.md gives it."""
    out: dict[str, TrainLog] = registry.read_children(reader, ROOT, RESULT_TYPE)
    return out


def read_train_log(reader: StoreReader, key: str) -> TrainLog:
    """The stored training log at ``key``, upgraded to the current version."""
    log: TrainLog = registry.read(reader, key, RESULT_TYPE)
    return log


def encode(p: TrainLog) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json, Table

    attrs: dict[str, Any] = {
        "checkpoint": p.checkpoint, "kind": p.kind, "domain": p.domain, "phase": p.phase, "parent": p.parent,
        "seed": p.seed, "steps": p.steps, "time_s": p.time_s, "resumed_from_step": p.resumed_from_step,
        "fingerprint": p.fingerprint}
    data: dict[str, Any] = {"log": Table(dict(p.log)), "settings": Json(dict(p.settings))}
    if p.data is not None:  # rejection sampling: samples kept and where it fell back to experts
        data["data"] = Json(dict(p.data))
        attrs |= {"data_kept": int(p.data.get("kept", 0)), "data_fallback_tasks": int(p.data.get("fallback_tasks", 0))}
    return data, attrs


def decode(s: Stored) -> TrainLog:
    """A current-version stored result as its payload; a wrong shape raises (``reader.damaged`` makes it one line)."""
    a, d = s.attrs, s.data
    table = d["log"]
    _expect(hasattr(table, "columns") and "step" in table.columns, "log is not a table with a step column")
    log = {str(c): np.asarray(v).tolist() for c, v in table.columns.items()}
    _expect(all(isinstance(x, int) and not isinstance(x, bool) for x in log["step"]), "log/step is not integers")
    for c, v in log.items():
        _expect(all(isinstance(x, int | float) and not isinstance(x, bool) for x in v), f"log/{c} is not numbers")
    settings = d["settings"]
    _expect(isinstance(settings, dict), "settings is not a JSON object")
    report = d.get("data")
    _expect(report is None or isinstance(report, dict), "data is not a JSON object")
    return TrainLog(checkpoint=str(a["checkpoint"]), kind=str(a["kind"]), domain=str(a["domain"]),
                    phase=str(a["phase"]), parent=str(a["parent"]), seed=int(a["seed"]), steps=int(a["steps"]),
                    time_s=float(a["time_s"]), resumed_from_step=int(a["resumed_from_step"]),
                    fingerprint=str(a["fingerprint"]), log=log, settings=settings, data=report, key=s.key)


TRAIN_LOG = registry.register(ResultType(name=RESULT_TYPE, version=RESULT_VERSION, payload=TrainLog, encode=encode,
                                         decode=decode, upgrades={}))


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # one line naming the key, by ``reader.damaged``
