"""The ``flips`` result type: ``aclarena-diag flips``'s result, its payload, and how it is stored.

A result sits at ``flips/<E>/<L>/<suite key>`` (result type ``flips``, version 0.1.0); its
elements are specified in docs/store-format.md. :mod:`aclarena.analysis.flips` makes the
payload (:class:`FlipsData`) and writes it with :func:`write_flips` (completely or not at all);
it, the dashboard's Flips page and ``export`` read it with :func:`read_flips_data`. Plain numpy
and JSON here: no torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.results import registry
from aclarena.results.capability import suite_key
from aclarena.results.registry import ResultType, Stored
from aclarena.store.results import ResultsStore, StoreReader

ROOT = "flips"
RESULT_TYPE = "flips"
RESULT_VERSION = "0.1.0"
CURVES = ("forward", "reverse")
# the items table's columns (docs/store-format.md), every one read by the Flips page, figures and export
ITEM_COLUMNS = ("item_id", "direction", "reproduced", "e_reward", "l_reward", "n_positions", "diverge", "below",
                "e_token", "l_token", "e_entropy", "entropy_pct", "kl", "in_top", "chance", "e_topk", "l_topk")


def flips_key(early: str, late: str, suite: str) -> str:
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


@dataclass(frozen=True)
class FlipsData:
    """One stored flips result, as the Flips page, the figures and ``export`` read it.

    ``items``: one row per flipped item (the columns of :data:`ITEM_COLUMNS`; top-k as
    ``[text, prob]`` lists); ``summary``: chance shares, cost, curves; ``forward``/``reverse``:
    the swap curves (budgets (B,), items (N,), (N, B) integer arrays ``kl``, ``random``,
    ``swaps_kl``, ``swaps_random``) or None; ``trajectories``: item -> {"e": pieces, "l": pieces}.
    """

    early: str
    late: str
    suite: str
    relation: str
    n_items: int
    n_forgot: int
    n_gained: int
    n_forgot_analysed: int
    n_gained_analysed: int
    settings: dict[str, Any]
    items: list[dict[str, Any]]
    summary: dict[str, Any]
    forward: dict[str, Any] | None = None
    reverse: dict[str, Any] | None = None
    trajectories: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    key: str = ""

    def counts(self) -> dict[str, Any]:
        """What :func:`counts_line` prints."""
        return {"early": self.early, "late": self.late, "suite": self.suite, "n_items": self.n_items,
                "n_forgot": self.n_forgot, "n_gained": self.n_gained, "n_forgot_analysed": self.n_forgot_analysed,
                "n_gained_analysed": self.n_gained_analysed, "settings": self.settings}

    def curve(self, name: str) -> dict[str, Any] | None:
        """The ``forward`` or ``reverse`` swap curve, or None."""
        return {"forward": self.forward, "reverse": self.reverse}[name]


def read_flips_data(reader: StoreReader, key: str) -> FlipsData:
    """The stored result at ``key``, upgraded to the current version.

    Every element is checked for the shape the writer gives it (docs/store-format.md); anything
    else is one line naming the key (:class:`~aclarena.errors.StoreError`), never a partial read.
    """
    data: FlipsData = registry.read(reader, key, RESULT_TYPE)
    return data


def write_flips(store: ResultsStore | str | os.PathLike[str], payload: FlipsData, *, overwrite: bool = True,
                manifest_text: str | None = None) -> str:
    """Write ``payload`` under :func:`flips_key`, completely or not at all; returns the key."""
    key = flips_key(payload.early, payload.late, payload.suite)
    registry.write(store, RESULT_TYPE, key, payload, overwrite=overwrite, manifest_text=manifest_text)
    return key


def encode(p: FlipsData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json, Table

    rows = []
    for row in p.items:
        r = dict(row)
        r["e_topk"] = json.dumps([list(x) for x in r["e_topk"]], ensure_ascii=False)
        r["l_topk"] = json.dumps([list(x) for x in r["l_topk"]], ensure_ascii=False)
        for k in ("e_token", "l_token", "e_topk", "l_topk"):
            r[k] = _printable(r[k])
        rows.append(r)
    data: dict[str, Any] = {"items": Table({c: [r[c] for r in rows] for c in ITEM_COLUMNS}),
                            "summary": Json(p.summary)}
    for name in CURVES:
        c = p.curve(name)
        if c is not None:
            data[name] = {"budgets": np.asarray(c["budgets"], dtype=np.float64), "items": list(c["items"]) or
                          np.zeros(0, np.int64), "kl": c["kl"], "random": c["random"], "swaps_kl": c["swaps_kl"],
                          "swaps_random": c["swaps_random"]}
    if p.trajectories:
        ids = list(p.trajectories)
        data["trajectory_items"] = ids
        for side in ("e", "l"):
            pieces = [_printable(x) for i in ids for x in p.trajectories[i].get(side, [])]
            counts = [len(p.trajectories[i].get(side, [])) for i in ids]
            data[f"{side}_pieces"] = pieces if pieces else np.zeros(0, np.int64)
            data[f"{side}_offsets"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    attrs = {"early": p.early, "late": p.late, "suite": p.suite, "relation": p.relation,
             "n_items": p.n_items, "n_forgot": p.n_forgot, "n_gained": p.n_gained,
             "n_forgot_analysed": p.n_forgot_analysed, "n_gained_analysed": p.n_gained_analysed,
             "settings": json.dumps(p.settings, sort_keys=True)}
    return data, attrs


def decode(s: Stored) -> FlipsData:
    """A current-version stored result as its payload; a wrong shape raises (``reader.damaged`` makes it one line)."""
    a, d = s.attrs, s.data
    settings = a.get("settings", "{}")
    settings = json.loads(settings) if isinstance(settings, str) else settings
    _expect(isinstance(settings, dict), "the settings attribute is not a JSON object")
    _expect(settings.get("top") is None or (_is_number(settings["top"]) and 0 < settings["top"] < 1),
            "settings.top is not a share in (0, 1)")
    items = []
    table = d["items"]
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
    summary = d["summary"]
    _check_summary(summary)
    curves: dict[str, Any] = {name: _read_curve(d[name], name) if name in d else None for name in CURVES}
    for name, arms in summary.get("curves", {}).items():  # each summarised curve is stored, budget for budget
        _expect(name in CURVES and curves[name] is not None, f"summary.curves has {str(name)[:20]!r}, which is not "
                                                             "stored")
        _expect(all(len(arm["share"]) == len(curves[name]["budgets"]) for arm in arms.values()),
                f"summary.curves.{name} does not have one value per budget")
    trajectories: dict[str, dict[str, list[str]]] = {}
    if "trajectory_items" in d:
        ids = [str(x) for x in d["trajectory_items"]]
        for side in ("e", "l"):
            offsets = np.asarray(d[f"{side}_offsets"])
            flat = list(d[f"{side}_pieces"])
            _check_offsets(offsets, len(ids), len(flat), f"{side}_offsets")
            for i, item in enumerate(ids):
                trajectories.setdefault(item, {})[side] = [str(x) for x in flat[int(offsets[i]):int(offsets[i + 1])]]
    nf, ng = int(a["n_forgot"]), int(a["n_gained"])
    return FlipsData(early=str(a["early"]), late=str(a["late"]), suite=str(a["suite"]), relation=str(a["relation"]),
                     n_items=int(a["n_items"]), n_forgot=nf, n_gained=ng,
                     n_forgot_analysed=int(a.get("n_forgot_analysed", nf)),
                     n_gained_analysed=int(a.get("n_gained_analysed", ng)), settings=settings, items=items,
                     summary=summary, forward=curves["forward"], reverse=curves["reverse"], trajectories=trajectories,
                     key=s.key)


FLIPS = registry.register(ResultType(name=RESULT_TYPE, version=RESULT_VERSION, payload=FlipsData, encode=encode,
                                     decode=decode, upgrades={}))


def _printable(text: str) -> str:
    return text.replace("\x00", "\u2400")  # HDF5 strings cannot hold NUL: shown as the NUL symbol


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


def _read_curve(g: Any, name: str) -> dict[str, Any]:
    """One swap curve: budgets (B,), items (N,), and (N, B) arrays of outcomes and swap counts."""
    _expect(isinstance(g, dict), f"{name} is not a group")
    budgets = [float(x) for x in np.asarray(g["budgets"]).reshape(-1)]
    ids = [str(x) for x in np.asarray(g["items"]).reshape(-1)]
    out: dict[str, Any] = {"budgets": budgets, "items": ids}
    for k in ("kl", "random", "swaps_kl", "swaps_random"):
        arr = np.asarray(g[k])
        _expect(arr.shape == (len(ids), len(budgets)) and arr.dtype.kind in "iub",
                f"{name}/{k} is not an integer array of (items {len(ids)}, budgets {len(budgets)})")
        out[k] = arr
    return out


def _check_offsets(offsets: np.ndarray, n_rows: int, n_values: int, name: str) -> None:
    _expect(offsets.ndim == 1 and offsets.dtype.kind in "iu" and len(offsets) == n_rows + 1,
            f"{name} is not {n_rows + 1} integer offsets")
    _expect(int(offsets[0]) == 0 and bool(np.all(np.diff(offsets) >= 0)) and int(offsets[-1]) == n_values,
            f"{name} do not run from 0 up to the {n_values} stored pieces")
