"""Routing results in results.h5 (``routing/<router>``), read without torch or scikit-learn.

Written by ``consolidate --method mle`` (:mod:`aclarena.consolidate.router_eval`); read by
the dashboard's Router page and by ``export``. docs/store-format.md lists the elements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from aclarena.store.results import StoreReader

RESULT_TYPE = "routing"
RESULT_VERSION = "0.1.0"
ROOT = "routing"
# display order of the built-in routers; others follow by name
ORDER = ("rule", "learned", "bandit")


def read_reports(reader: StoreReader | None) -> dict[str, dict[str, Any]]:
    """``{router: {"accuracy": {...columns}, "labels", "confusion", "mixed", "attrs"}}`` from an open store.

    Each element is checked for the shape docs/store-format.md gives it (what the Router page and
    ``export`` draw from); anything else is one line naming the key ("is damaged").
    """
    out: dict[str, dict[str, Any]] = {}
    if reader is None or not reader.has(ROOT):
        return out
    names = sorted(reader.keys(ROOT), key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    for name in names:
        key = f"{ROOT}/{name}"
        attrs = reader.attrs(key)
        if attrs.get("result-type") != RESULT_TYPE:
            continue
        with reader.damaged(key):
            out[name] = _read_report(reader, key, attrs)
    return out


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # one line naming the key, by ``reader.damaged``


def _read_report(reader: StoreReader, key: str, attrs: dict[str, Any]) -> dict[str, Any]:
    acc = reader.read(f"{key}/accuracy")
    missing = [c for c in ACCURACY_COLUMNS if c not in getattr(acc, "columns", {})]
    _expect(not missing, f"accuracy has no column {', '.join(missing)}")
    accuracy = {c: np.asarray(acc.columns[c]).tolist() for c in acc.columns}
    _expect(all(isinstance(x, str) for x in accuracy["type"]), "accuracy/type is not text")
    for c in ACCURACY_COLUMNS[1:]:
        _expect(all(isinstance(x, int | float) and not isinstance(x, bool) for x in accuracy[c]),
                f"accuracy/{c} is not numbers")
    labels = reader.read(f"{key}/labels")
    _expect(isinstance(labels, list) and all(isinstance(x, str) for x in labels), "labels is not a list of names")
    confusion = np.asarray(reader.read(f"{key}/confusion"))
    _expect(confusion.shape == (len(labels), len(labels)) and confusion.dtype.kind in "iu",
            f"confusion is not an integer matrix of {len(labels)} x {len(labels)} (the labels)")
    mixed = reader.read(f"{key}/mixed")
    _expect(isinstance(mixed, dict), "mixed is not a JSON object")
    report = {"accuracy": accuracy, "labels": labels, "confusion": confusion, "mixed": mixed, "attrs": attrs}
    if reader.has(f"{key}/regret"):
        regret = np.asarray(reader.read(f"{key}/regret"))
        _expect(regret.ndim == 1 and regret.dtype.kind in "iuf", "regret is not a series of numbers")
        report["regret"] = regret
    return report


# the accuracy table's columns (docs/store-format.md)
ACCURACY_COLUMNS = ("type", "n", "accuracy", "abstain_rate", "chance", "p_chance")
