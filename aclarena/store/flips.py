"""Where ``aclarena-diag flips`` results live in results.h5, and reading them back as plain data.

A result sits at ``flips/<E>/<L>/<suite key>`` (result type ``flips``, version 0.1.0); its
elements are specified in docs/store-format.md. Written by :mod:`aclarena.analysis.flips`
(completely or not at all); read by it, the dashboard's Flips page and ``export``. Plain
numpy and JSON here: no torch.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from aclarena.store.results import StoreReader

ROOT = "flips"
RESULT_TYPE = "flips"
RESULT_VERSION = "0.1.0"
CURVES = ("forward", "reverse")


def flips_key(early: str, late: str, suite: str) -> str:
    from aclarena.store.capability import suite_key

    return f"{ROOT}/{early}/{late}/{suite_key(suite)}"


def list_flips(reader: StoreReader | None) -> list[dict[str, str]]:
    """``{"key", "early", "late", "suite"}`` of every stored flips result, in key order."""
    if reader is None or not reader.has(ROOT):
        return []
    out = []
    for key in reader.results(ROOT):
        a = reader.attrs(key)
        if a.get("result-type") == RESULT_TYPE:
            out.append({"key": key, "early": str(a.get("early")), "late": str(a.get("late")),
                        "suite": str(a.get("suite"))})
    return out


def read_flips_data(reader: StoreReader, key: str) -> dict[str, Any]:
    """A stored result as plain data: ``attrs``, ``items`` (rows; top-k as ``[text, prob]`` lists),
    ``summary`` (chance shares, cost, curves), ``forward``/``reverse`` (arrays or None) and
    ``trajectories`` (item -> {"e": token texts, "l": token texts})."""
    a = reader.attrs(key)
    settings = a.get("settings", "{}")
    attrs = dict(a) | {"settings": json.loads(settings) if isinstance(settings, str) else dict(settings)}
    items = []
    for row in reader.read(f"{key}/items").rows():
        row = dict(row)
        for k in ("e_topk", "l_topk"):
            row[k] = json.loads(row[k]) if row[k] else []
        for k in ("reproduced", "in_top"):
            row[k] = bool(row[k])
        items.append(row)
    curves: dict[str, Any] = {}
    for name in CURVES:
        g = f"{key}/{name}"
        if reader.has(g):
            curves[name] = {"budgets": [float(x) for x in reader.read(f"{g}/budgets")],
                            "items": [str(x) for x in reader.read(f"{g}/items")],
                            **{k: np.asarray(reader.read(f"{g}/{k}")) for k in ("kl", "random", "swaps_kl",
                                                                               "swaps_random")}}
        else:
            curves[name] = None
    trajectories: dict[str, dict[str, list[str]]] = {}
    if reader.has(f"{key}/trajectory_items"):
        ids = [str(x) for x in reader.read(f"{key}/trajectory_items")]
        for side in ("e", "l"):
            offsets = np.asarray(reader.read(f"{key}/{side}_offsets"), dtype=np.int64)
            flat = list(reader.read(f"{key}/{side}_pieces")) if offsets[-1] > 0 else []
            for i, item in enumerate(ids):
                trajectories.setdefault(item, {})[side] = [str(x) for x in flat[int(offsets[i]):int(offsets[i + 1])]]
    return {"key": key, "attrs": attrs, "items": items, "summary": reader.read(f"{key}/summary"), **curves,
            "trajectories": trajectories}
