"""The ``routing`` result type: one MLE router scored on labelled contexts, its payload, and how it is stored.

A result sits at ``routing/<router>`` (result type ``routing``, version 0.1.0); its elements are specified
in docs/store-format.md. ``consolidate --method mle`` (:mod:`aclarena.consolidate.router_eval`) makes the
payload (:class:`RoutingData`) and writes it with :func:`write_routing`; the dashboard's Router page and
``export``'s ``router/*`` figures read every router with :func:`read_reports`. Plain numpy and JSON here:
no torch, no scikit-learn.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.store.results import ResultsStore, StoreReader

ROOT = "routing"
RESULT_TYPE = "routing"
RESULT_VERSION = "0.1.0"
# display order of the built-in routers; others follow by name
ORDER = ("rule", "learned", "bandit")
# the accuracy table's columns (docs/store-format.md)
ACCURACY_COLUMNS = ("type", "n", "accuracy", "abstain_rate", "chance", "p_chance")
# the decisions table's columns: one row per context
DECISION_COLUMNS = ("type", "source", "label", "routed", "correct")


def routing_key(router: str) -> str:
    return f"{ROOT}/{router}"


@dataclass(frozen=True)
class RoutingData:
    """One router scored on labelled contexts, as the Router page, the figures and ``export`` read it.

    ``accuracy``: the columns of :data:`ACCURACY_COLUMNS` as lists, one entry per context type;
    ``labels``: the experts, then ``none``; ``confusion``: an integer labels x labels matrix;
    ``mixed``: where contexts mixing two environments went (``first``, ``second``, ``none``,
    ``other``); ``decisions``: the columns of :data:`DECISION_COLUMNS` as lists, one entry per
    context; ``regret``: the bandit's cumulative pseudo-regret per training round (None for the
    others); ``overall``: accuracy over all contexts; ``seconds``: routing time; ``fingerprint``:
    of the contexts; ``settings``: experts, context counts, seed, fit time (the bandit's reward).
    """

    router: str
    fingerprint: str
    overall: float
    seconds: float
    settings: dict[str, Any]
    accuracy: dict[str, list[Any]]
    labels: list[str]
    confusion: np.ndarray
    mixed: dict[str, int]
    decisions: dict[str, list[Any]]
    regret: np.ndarray | None = None
    key: str = ""


def read_reports(reader: StoreReader | None) -> dict[str, RoutingData]:
    """``{router: RoutingData}`` of every stored router of an open store, the built-in ones first (:data:`ORDER`).

    Each element is checked for the shape docs/store-format.md gives it (what the Router page and
    ``export`` draw from); anything else is one line naming the key ("is damaged").
    """
    out: dict[str, RoutingData] = registry.read_children(
        reader, ROOT, RESULT_TYPE, order=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    return out


def read_routing(reader: StoreReader, key: str) -> RoutingData:
    """The stored router at ``key``, upgraded to the current version."""
    data: RoutingData = registry.read(reader, key, RESULT_TYPE)
    return data


def write_routing(store: ResultsStore | str | os.PathLike[str], payload: RoutingData, *,
                  manifest_text: str | None = None) -> str:
    """Write ``payload`` under :func:`routing_key` (replacing the router there), completely or not at all; returns
    the key."""
    key = routing_key(payload.router)
    registry.write(store, RESULT_TYPE, key, payload, overwrite=True, manifest_text=manifest_text)
    return key


def encode(p: RoutingData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json, Table

    acc, dec = p.accuracy, p.decisions
    data: dict[str, Any] = {
        "accuracy": Table({"type": list(acc["type"]), "n": np.asarray(acc["n"], dtype=np.int64),
                           **{c: np.asarray(acc[c], dtype=np.float64) for c in ACCURACY_COLUMNS[2:]}}),
        "labels": Json(list(p.labels)),
        "confusion": np.asarray(p.confusion),
        "mixed": Json(dict(p.mixed)),
        "decisions": Table({**{c: list(dec[c]) for c in DECISION_COLUMNS[:4]},
                            "correct": np.asarray(dec["correct"], dtype=bool)}),
        "settings": Json(dict(p.settings)),
    }
    if p.regret is not None:
        data["regret"] = np.asarray(p.regret)
    attrs = {"fingerprint": p.fingerprint, "router": p.router, "overall": p.overall, "seconds": p.seconds,
             "settings": dict(p.settings)}
    return data, attrs


def decode(s: Stored) -> RoutingData:
    """A current-version stored result as its payload; a wrong shape raises (``reader.damaged`` makes it one line)."""
    a, d = s.attrs, s.data
    acc = d["accuracy"]
    missing = [c for c in ACCURACY_COLUMNS if c not in getattr(acc, "columns", {})]
    _expect(not missing, f"accuracy has no column {', '.join(missing)}")
    accuracy = {c: np.asarray(acc.columns[c]).tolist() for c in acc.columns}
    _expect(all(isinstance(x, str) for x in accuracy["type"]), "accuracy/type is not text")
    for c in ACCURACY_COLUMNS[1:]:
        _expect(all(isinstance(x, int | float) and not isinstance(x, bool) for x in accuracy[c]),
                f"accuracy/{c} is not numbers")
    labels = d["labels"]
    _expect(isinstance(labels, list) and all(isinstance(x, str) for x in labels), "labels is not a list of names")
    confusion = np.asarray(d["confusion"])
    _expect(confusion.shape == (len(labels), len(labels)) and confusion.dtype.kind in "iu",
            f"confusion is not an integer matrix of {len(labels)} x {len(labels)} (the labels)")
    mixed = d["mixed"]
    _expect(isinstance(mixed, dict), "mixed is not a JSON object")
    dec = d["decisions"]
    missing = [c for c in DECISION_COLUMNS if c not in getattr(dec, "columns", {})]
    _expect(not missing, f"decisions has no column {', '.join(missing)}")
    decisions = {c: np.asarray(dec.columns[c]).tolist() for c in DECISION_COLUMNS}
    settings = d["settings"]
    _expect(isinstance(settings, dict), "settings is not a JSON object")
    regret = None
    if "regret" in d:
        regret = np.asarray(d["regret"])
        _expect(regret.ndim == 1 and regret.dtype.kind in "iuf", "regret is not a series of numbers")
    return RoutingData(router=str(a["router"]), fingerprint=str(a["fingerprint"]), overall=float(a["overall"]),
                       seconds=float(a["seconds"]), settings=settings, accuracy=accuracy, labels=labels,
                       confusion=confusion, mixed=mixed, decisions=decisions, regret=regret, key=s.key)


ROUTING = registry.register(ResultType(name=RESULT_TYPE, version=RESULT_VERSION, payload=RoutingData, encode=encode,
                                       decode=decode, upgrades={}))


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # one line naming the key, by ``reader.damaged``
