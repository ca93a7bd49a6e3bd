"""Routing results in results.h5 (``routing/<router>``), read without torch or scikit-learn.

Written by ``consolidate --method mle`` (:mod:`aclarena.consolidate.router_eval`); read by
the dashboard's Router page and by ``export``. docs/store-format.md lists the elements.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RESULT_TYPE = "routing"
RESULT_VERSION = "0.1.0"
ROOT = "routing"
# display order of the built-in routers; others follow by name
ORDER = ("rule", "learned", "bandit")


def read_reports(reader: Any) -> dict[str, dict[str, Any]]:
    """``{router: {"accuracy": {...columns}, "labels", "confusion", "mixed", "attrs"}}`` from an open store."""
    out: dict[str, dict[str, Any]] = {}
    if reader is None or not reader.has(ROOT):
        return out
    names = sorted(reader.keys(ROOT), key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    for name in names:
        key = f"{ROOT}/{name}"
        attrs = reader.attrs(key)
        if attrs.get("result-type") != RESULT_TYPE:
            continue
        acc = reader.read(f"{key}/accuracy")
        out[name] = {
            "accuracy": {c: np.asarray(acc.columns[c]).tolist() for c in acc.columns},
            "labels": reader.read(f"{key}/labels"),
            "confusion": np.asarray(reader.read(f"{key}/confusion")),
            "mixed": reader.read(f"{key}/mixed"),
            "attrs": attrs,
        }
        if reader.has(f"{key}/regret"):
            out[name]["regret"] = np.asarray(reader.read(f"{key}/regret"))
    return out
