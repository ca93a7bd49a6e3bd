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
# the items table's columns (docs/store-format.md), every one read by the Flips page, figures and export
ITEM_COLUMNS = ("item_id", "direction", "reproduced", "e_reward", "l_reward", "n_positions", "diverge", "below",
                "e_token", "l_token", "e_entropy", "entropy_pct", "kl", "in_top", "chance", "e_topk", "l_topk")


def flips_key(early: str, late: str, suite: str) -> str:
    from aclarena.store.capability import suite_key

    return f"{ROOT}/{early}/{late}/{suite_key(suite)}"


def counts_line(attrs: dict[str, Any], arrow: str = "->") -> str:
    """One line of a result's counts, the CLI's and the Flips page's: the totals the capability matrix
    shows, and, when ``--max-items`` capped the analysis, how many of each were analysed."""
    nf, ng = int(attrs["n_forgot"]), int(attrs["n_gained"])
    af, ag = int(attrs.get("n_forgot_analysed", nf)), int(attrs.get("n_gained_analysed", ng))
    line = (f"{attrs['early']} {arrow} {attrs['late']} on {attrs['suite']}: {nf} forgotten (1 {arrow} 0), {ng} gained "
            f"(0 {arrow} 1) of {attrs['n_items']} items")
    if (af, ag) != (nf, ng):
        cap = (attrs.get("settings") or {}).get("max_items")
        line += (f"; {af} forgotten and {ag} gained analysed"
                 + (f" (--max-items {cap} per direction)" if cap is not None else ""))
    return line


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
    ``trajectories`` (item -> {"e": token texts, "l": token texts}).

    Every element is checked for the shape the writer gives it (docs/store-format.md); anything
    else is one line naming the key (:class:`~aclarena.errors.StoreError`), never a partial read.
    """
    with reader.damaged(key):
        a = reader.attrs(key)
        settings = a.get("settings", "{}")
        settings = json.loads(settings) if isinstance(settings, str) else settings
        _expect(isinstance(settings, dict), "the settings attribute is not a JSON object")
        _expect(settings.get("top") is None or (_is_number(settings["top"]) and 0 < settings["top"] < 1),
                "settings.top is not a share in (0, 1)")
        attrs = dict(a) | {"settings": settings}
        items = []
        table = reader.read(f"{key}/items")
        missing = [c for c in ITEM_COLUMNS if c not in table.columns]
        _expect(not missing, f"items has no column {', '.join(missing)}")
        for row in table.rows():
            row = dict(row)
            _expect(row["direction"] in ("forgot", "gained"), f"items/direction holds {str(row['direction'])[:20]!r}")
            for k in ("e_topk", "l_topk"):
                row[k] = json.loads(row[k]) if row[k] else []
                _expect(isinstance(row[k], list) and all(
                    isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and _is_number(e[1])
                    for e in row[k]), f"items/{k} is not a list of [token, probability]")
            for k in ("reproduced", "in_top"):
                row[k] = bool(row[k])
            items.append(row)
        summary = reader.read(f"{key}/summary")
        _check_summary(summary)
        curves: dict[str, Any] = {name: _read_curve(reader, f"{key}/{name}") for name in CURVES}
        for name, arms in summary.get("curves", {}).items():  # each summarised curve is stored, budget for budget
            _expect(name in CURVES and curves[name] is not None, f"summary.curves has {str(name)[:20]!r}, which is not "
                                                                 "stored")
            _expect(all(len(arm["share"]) == len(curves[name]["budgets"]) for arm in arms.values()),
                    f"summary.curves.{name} does not have one value per budget")
        trajectories: dict[str, dict[str, list[str]]] = {}
        if reader.has(f"{key}/trajectory_items"):
            ids = [str(x) for x in reader.read(f"{key}/trajectory_items")]
            for side in ("e", "l"):
                offsets = np.asarray(reader.read(f"{key}/{side}_offsets"))
                flat = list(reader.read(f"{key}/{side}_pieces"))
                _check_offsets(offsets, len(ids), len(flat), f"{side}_offsets")
                for i, item in enumerate(ids):
                    trajectories.setdefault(item, {})[side] = [str(x) for x in flat[int(offsets[i]):int(offsets[i + 1])]]
    return {"key": key, "attrs": attrs, "items": items, "summary": summary, **curves, "trajectories": trajectories}


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # turned into one line naming the key by ``reader.damaged``


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _check_summary(summary: Any) -> None:
    """``summary``: objects where the figures and the page read objects, numbers where they read numbers."""
    _expect(isinstance(summary, dict), "summary is not a JSON object")
    chance, curves = summary.get("chance", {}), summary.get("curves", {})
    _expect(isinstance(chance, dict) and all(isinstance(c, dict) for c in chance.values()),
            "summary.chance is not an object of objects")
    for c in chance.values():
        _expect(c.get("n") is None or _is_number(c["n"]), "summary.chance holds an n that is not a number")
        if c.get("n"):  # the shares are drawn with their intervals
            _expect(all(_is_number(c.get(k)) for k in ("share", "share_low", "share_high", "chance", "chance_low",
                                                       "chance_high")),
                    "summary.chance holds a share that is not a number")
    _expect(isinstance(curves, dict), "summary.curves is not a JSON object")
    for arms in curves.values():
        _expect(isinstance(arms, dict), "summary.curves is not an object of arms")
        for arm in arms.values():
            _expect(isinstance(arm, dict) and all(
                isinstance(arm.get(k), list) and all(_is_number(x) for x in arm[k])
                for k in ("share", "low", "high", "n")) and len({len(arm[k]) for k in ("share", "low", "high", "n")}) == 1,
                "summary.curves holds an arm without equal lists of share, low, high, n")
    _expect(isinstance(summary.get("cost", {}), dict), "summary.cost is not a JSON object")


def _read_curve(reader: StoreReader, g: str) -> dict[str, Any] | None:
    """One swap curve: budgets (B,), items (N,), and (N, B) arrays of outcomes and swap counts."""
    if not reader.has(g):
        return None
    budgets = [float(x) for x in np.asarray(reader.read(f"{g}/budgets")).reshape(-1)]
    ids = [str(x) for x in np.asarray(reader.read(f"{g}/items")).reshape(-1)]
    out: dict[str, Any] = {"budgets": budgets, "items": ids}
    for k in ("kl", "random", "swaps_kl", "swaps_random"):
        arr = np.asarray(reader.read(f"{g}/{k}"))
        _expect(arr.shape == (len(ids), len(budgets)) and arr.dtype.kind in "iub",
                f"{g.rsplit('/', 1)[-1]}/{k} is not an integer array of (items {len(ids)}, budgets {len(budgets)})")
        out[k] = arr
    return out


def _check_offsets(offsets: np.ndarray, n_rows: int, n_values: int, name: str) -> None:
    _expect(offsets.ndim == 1 and offsets.dtype.kind in "iu" and len(offsets) == n_rows + 1,
            f"{name} is not {n_rows + 1} integer offsets")
    _expect(int(offsets[0]) == 0 and bool(np.all(np.diff(offsets) >= 0)) and int(offsets[-1]) == n_values,
            f"{name} do not run from 0 up to the {n_values} stored pieces")
