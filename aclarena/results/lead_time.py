"""The ``monitor-lead-time`` result type: how far ahead of a significant drop each drift warning fired, its
payload, and how it is stored.

A result sits at ``monitor/lead-time/<stage>`` (``<stage>-s<r>`` for replicate r >= 1; result type
``monitor-lead-time``, version 0.1.0); its elements are specified in docs/store-format.md. ``monitor --lead-time``
and ``study`` (:func:`aclarena.train.lead_time.measure_lead_time`) make the payload (:class:`LeadTimeData`) and
write it with :func:`write_lead_time`; a rerun with the same settings reads it back with :func:`read_lead_time`;
the dashboard's Monitor page and ``export``'s ``monitor/lead-time`` figures read every stage with
:func:`lead_time_results`. Plain numpy and JSON here: no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.store.results import ResultsStore, StoreReader

#: results.h5 group of the lead-time results (``monitor/lead-time/<stage>``)
ROOT = "monitor/lead-time"
RESULT_TYPE = "monitor-lead-time"
RESULT_VERSION = "0.1.0"
#: the table's columns: one row per (earlier domain, predictor); the last three are steps, -1 for none
TABLE_COLUMNS = ("domain", "predictor", "metric", "rule", "warn_step", "drop_step", "lead")
STEP_COLUMNS = ("warn_step", "drop_step", "lead")


def lead_time_key(stage: str, suffix: str = "") -> str:
    """The key of ``stage``'s result; ``suffix``: the replicate's (``-s<r>``, ``""`` for replicate 0)."""
    return f"{ROOT}/{stage}{suffix}"


@dataclass(frozen=True)
class LeadTimeData:
    """One stage's lead-time measurement.

    ``stage``: the retrained stage (without the replicate's suffix); ``fingerprint``: of ``settings`` (a rerun with
    the same one reads it back); ``result``: the measurement as ``monitor --lead-time`` returns it (``table`` with
    ``null`` for none, ``ground_truth``, ``series``, ``phases``, ``steps``, ``settings``, ``time_s``, ``cost``...);
    ``table``: :data:`TABLE_COLUMNS` as lists, one entry per row of ``result["table"]`` (-1 for none);
    ``settings``: what decides the result (None where it was not stored).
    """

    stage: str
    fingerprint: str
    result: dict[str, Any]
    table: dict[str, list[Any]]
    settings: dict[str, Any] | None = None
    key: str = ""


def table_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The stored ``table`` of the rows of a measurement's ``table`` (``None`` steps as -1, the rest as text)."""
    return {c: [(-1 if r[c] is None else r[c]) if c in STEP_COLUMNS else str(r[c]) for r in rows] for c in TABLE_COLUMNS}


def lead_time_results(reader: StoreReader | None) -> dict[str, dict[str, Any]]:
    """The measurements (each :attr:`LeadTimeData.result`) of every stored stage of an open store, by the key's last
    part ({} when none); groups of another type are skipped."""
    out: dict[str, dict[str, Any]] = {}
    if reader is None or not reader.has(ROOT):
        return out
    for name in reader.keys(ROOT):
        key = f"{ROOT}/{name}"
        if reader.attrs(key).get("result-type") != RESULT_TYPE:
            continue
        out[name] = read_lead_time(reader, key).result
    return out


def read_lead_time(reader: StoreReader, key: str) -> LeadTimeData:
    """The stored measurement at ``key``, upgraded to the current version."""
    data: LeadTimeData = registry.read(reader, key, RESULT_TYPE)
    return data


def write_lead_time(store: ResultsStore | str | os.PathLike[str], key: str, payload: LeadTimeData, *,
                    manifest_text: str | None = None) -> str:
    """Write ``payload`` at ``key`` (:func:`lead_time_key`; replacing what is there), completely or not at all;
    returns the key."""
    registry.write(store, RESULT_TYPE, key, payload, overwrite=True, manifest_text=manifest_text)
    return key


def encode(p: LeadTimeData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json, Table

    data: dict[str, Any] = {"table": Table({c: list(p.table[c]) for c in TABLE_COLUMNS}), "result": Json(p.result)}
    if p.settings is not None:
        data["settings"] = Json(p.settings)
    return data, {"fingerprint": p.fingerprint, "stage": p.stage}


def decode(s: Stored) -> LeadTimeData:
    """A current-version stored result as its payload; a wrong shape raises (``reader.damaged`` makes it one line)."""
    a, d = s.attrs, s.data
    tab = d["table"]
    missing = [c for c in TABLE_COLUMNS if c not in getattr(tab, "columns", {})]
    _expect(not missing, f"table has no column {', '.join(missing)}")
    table = {c: np.asarray(tab.columns[c]).tolist() for c in TABLE_COLUMNS}
    for c in STEP_COLUMNS:
        _expect(all(isinstance(x, int) and not isinstance(x, bool) for x in table[c]), f"table/{c} is not integers")
    for c in TABLE_COLUMNS[:4]:
        _expect(all(isinstance(x, str) for x in table[c]), f"table/{c} is not text")
    result = d["result"]
    _expect(isinstance(result, dict) and isinstance(result.get("table"), list), "result is not a JSON object with a table")
    settings = d.get("settings")
    _expect(settings is None or isinstance(settings, dict), "settings is not a JSON object")
    return LeadTimeData(stage=str(a["stage"]), fingerprint=str(a["fingerprint"]), result=result, table=table,
                        settings=settings, key=s.key)


LEAD_TIME = registry.register(ResultType(name=RESULT_TYPE, version=RESULT_VERSION, payload=LeadTimeData, encode=encode,
                                         decode=decode, upgrades={}))


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # one line naming the key, by ``reader.damaged``
