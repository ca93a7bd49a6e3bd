"""The displacement result types: ``aclarena-diag displacement``'s results, their payloads, and how they are stored.

Two groups (version 0.1.0 each; the elements are specified in docs/store-format.md): ``displacement/stats``
(``displacement-stats``: the per-tensor sums of one streamed pass over every update ``θ_child − θ_parent``,
:class:`DisplacementStatsData`) and ``displacement/summary`` (``displacement-summary``: two views, ``all`` and
``no-embeddings``, each a :class:`DisplacementView`, in :class:`DisplacementSummaryData`). Each carries
``fingerprint`` (a hash of its settings and of the checkpoints' files) and ``settings``.
:mod:`aclarena.analysis.displacement` makes the payloads and writes them with :func:`write_displacement_stats`
and :func:`write_displacement_summary`; it reads the stats back with :func:`read_displacement_stats`, the
Displacement page and ``export``'s ``displacement/*`` figures a summary view with :func:`read_displacement_view`.
Plain numpy and JSON here: no torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.store.results import ResultsStore, StoreReader

STATS_KEY = "displacement/stats"
SUMMARY_KEY = "displacement/summary"
STATS_TYPE = "displacement-stats"
SUMMARY_TYPE = "displacement-summary"
RESULT_VERSION = "0.1.0"
#: the two views of a summary: every floating weight, and without the input embeddings and output head
VIEWS = ("all", "no-embeddings")
# the elements of a summary view written as JSON (the others are arrays, and ``overall_ratio`` a number)
_JSON_FIELDS = ("children", "parents", "phases", "kinds", "domains", "group_labels", "tensor_labels", "ratios",
                "ratio_excluded")


@dataclass(frozen=True)
class DisplacementStatsData:
    """The displacement pass: ``T`` tensor names, ``P`` updates (``children``, ``parents``), ``J``
    ``tolerances``; ``numel`` int64 ``(T,)``; ``sq_delta``, ``sq_parent``, ``max_abs`` ``(T, P)``; ``changed``,
    ``changed_bf16`` int64 ``(T, P, J)`` (entries with ``|Δθ| > tol``, exactly and after rounding to bfloat16)."""

    tensors: list[str]
    children: list[str]
    parents: list[str]
    tolerances: np.ndarray
    numel: np.ndarray
    sq_delta: np.ndarray
    sq_parent: np.ndarray
    changed: np.ndarray
    changed_bf16: np.ndarray
    max_abs: np.ndarray
    settings: dict[str, Any]
    fingerprint: str
    key: str = STATS_KEY


@dataclass(frozen=True)
class DisplacementView:
    """One view of the displacement summary (docs/store-format.md names every field and its shape): per update
    (``children``, their ``parents``, ``phases``, ``kinds``, ``domains``) the norm and relative norm of
    ``Δθ`` (global, per layer block, per tensor) and the share of entries changed per tolerance; the SFT/RL
    ``ratios`` per stage and ``overall_ratio`` (NaN when no stage pools); ``ratio_excluded``: the stages left
    out of it (None in summaries written before it was stored)."""

    children: list[str]
    parents: list[str]
    phases: list[str | None]
    kinds: list[str]
    domains: list[str | None]
    tolerances: np.ndarray
    norm: np.ndarray
    rel: np.ndarray
    changed_frac: np.ndarray
    changed_frac_bf16: np.ndarray
    group_labels: list[str]
    norm_group: np.ndarray
    rel_group: np.ndarray
    changed_frac_group: np.ndarray
    tensor_labels: list[str]
    norm_tensor: np.ndarray
    rel_tensor: np.ndarray
    ratios: list[dict[str, Any]]
    overall_ratio: float
    ratio_excluded: list[dict[str, Any]] | None = None

    def as_mapping(self) -> dict[str, Any]:
        """The fields by name (no copy): what the pure notes of :mod:`aclarena.diagnostics.run_notes` read."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class DisplacementSummaryData:
    """The displacement summary: its views by name (:data:`VIEWS`; a reader of one view holds only that one)."""

    views: dict[str, DisplacementView]
    settings: dict[str, Any]
    fingerprint: str
    key: str = SUMMARY_KEY


def read_displacement_stats(reader: StoreReader) -> DisplacementStatsData:
    """The stored displacement pass, upgraded to the current version."""
    data: DisplacementStatsData = registry.read(reader, STATS_KEY, STATS_TYPE)
    return data


def read_displacement_summary(reader: StoreReader | None) -> DisplacementSummaryData | None:
    """The stored summary with both views (None when the run has none yet)."""
    data: DisplacementSummaryData | None = registry.read_if_stored(reader, SUMMARY_KEY, SUMMARY_TYPE)
    return data


def read_displacement_view(reader: StoreReader | None, view: str = "all") -> DisplacementView | None:
    """One view of the stored summary, read alone (None when the run has none yet)."""
    got: DisplacementView | None = registry.read_view(reader, SUMMARY_KEY, SUMMARY_TYPE, view, VIEWS)
    return got


def write_displacement_stats(store: ResultsStore | str | os.PathLike[str], payload: DisplacementStatsData, *,
                             manifest_text: str | None = None) -> str:
    """Write ``payload`` at :data:`STATS_KEY` (replacing the pass there), completely or not at all."""
    registry.write(store, STATS_TYPE, STATS_KEY, payload, overwrite=True, manifest_text=manifest_text)
    return STATS_KEY


def write_displacement_summary(store: ResultsStore | str | os.PathLike[str], payload: DisplacementSummaryData, *,
                               manifest_text: str | None = None) -> str:
    """Write ``payload`` at :data:`SUMMARY_KEY` (replacing the summary there), completely or not at all."""
    registry.write(store, SUMMARY_TYPE, SUMMARY_KEY, payload, overwrite=True, manifest_text=manifest_text)
    return SUMMARY_KEY


def encode_stats(p: DisplacementStatsData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json

    data = {"tensors": Json(list(p.tensors)), "children": Json(list(p.children)), "parents": Json(list(p.parents)),
            "tolerances": p.tolerances, "numel": p.numel, "sq_delta": p.sq_delta, "sq_parent": p.sq_parent,
            "changed": p.changed, "changed_bf16": p.changed_bf16, "max_abs": p.max_abs, "settings": Json(p.settings)}
    return data, {"fingerprint": p.fingerprint, "settings": p.settings}


def decode_stats(s: Stored) -> DisplacementStatsData:
    """A current-version stored pass as its payload; a wrong shape raises (``reader.damaged`` makes it one line)."""
    d = s.data
    tensors, children, parents = d["tensors"], d["children"], d["parents"]
    _expect(all(isinstance(x, list) for x in (tensors, children, parents)), "tensors, children or parents is not a "
                                                                           "list")
    _expect(len(children) == len(parents), "children and parents are not one per update")
    t, p = len(tensors), len(children)
    arrays = {k: np.asarray(d[k]) for k in ("tolerances", "numel", "sq_delta", "sq_parent", "changed", "changed_bf16",
                                            "max_abs")}
    j = arrays["tolerances"].shape[0] if arrays["tolerances"].ndim == 1 else -1
    shapes = {"tolerances": (j,), "numel": (t,), "sq_delta": (t, p), "sq_parent": (t, p), "changed": (t, p, j),
              "changed_bf16": (t, p, j), "max_abs": (t, p)}
    for k, shape in shapes.items():
        _expect(arrays[k].shape == shape, f"{k} is not of shape {shape}")
    settings = d["settings"]
    _expect(isinstance(settings, dict), "settings is not a JSON object")
    return DisplacementStatsData(tensors=tensors, children=children, parents=parents, **arrays, settings=settings,
                                 fingerprint=str(s.attrs["fingerprint"]), key=s.key)


def encode_summary(p: DisplacementSummaryData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    return ({name: _view_elements(v) for name, v in p.views.items()},
            {"fingerprint": p.fingerprint, "settings": p.settings})


def _view_elements(v: DisplacementView) -> dict[str, Any]:
    from aclarena.store.encoding import Json

    out: dict[str, Any] = {}
    for f in fields(v):
        value = getattr(v, f.name)
        if f.name == "ratio_excluded" and value is None:
            continue  # a summary written before the field was stored, read and written back
        if f.name in _JSON_FIELDS:
            out[f.name] = Json(list(value))
        elif f.name == "tolerances":
            out[f.name] = np.asarray(value, dtype=np.float64)
        elif f.name == "overall_ratio":
            out[f.name] = float(value)
        else:
            out[f.name] = value
    return out


def decode_summary(s: Stored) -> DisplacementSummaryData:
    """A current-version stored summary (all its views, or those read) as its payload; a wrong shape raises."""
    views = {}
    for name, g in s.data.items():
        _expect(name in VIEWS and isinstance(g, dict), f"{str(name)[:20]!r} is not a view ({', '.join(VIEWS)})")
        views[name] = _decode_view(g, name)
    raw = s.attrs["settings"]
    settings = json.loads(raw) if isinstance(raw, str) else raw
    _expect(isinstance(settings, dict), "the settings attribute is not a JSON object")
    return DisplacementSummaryData(views=views, settings=settings, fingerprint=str(s.attrs["fingerprint"]), key=s.key)


def _decode_view(g: dict[str, Any], name: str) -> DisplacementView:
    values: dict[str, Any] = {}
    for f in fields(DisplacementView):
        if f.name == "ratio_excluded" and f.name not in g:
            continue  # MAY be absent (docs/store-format.md)
        _expect(f.name in g, f"{name} has no {f.name}")
        value = g[f.name]
        if f.name in _JSON_FIELDS:
            _expect(isinstance(value, list), f"{name}/{f.name} is not a list")
        elif f.name == "overall_ratio":
            _expect(isinstance(value, int | float) and not isinstance(value, bool), f"{name}/overall_ratio is not a "
                                                                                     "number")
            value = float(value)
        else:
            value = np.asarray(value)
        values[f.name] = value
    p, j = len(values["children"]), len(values["tolerances"])
    gr, t = len(values["group_labels"]), len(values["tensor_labels"])
    shapes = {"tolerances": (j,), "norm": (p,), "rel": (p,), "changed_frac": (p, j), "changed_frac_bf16": (p, j),
              "norm_group": (gr, p), "rel_group": (gr, p), "changed_frac_group": (gr, p, j), "norm_tensor": (t, p),
              "rel_tensor": (t, p)}
    for k, shape in shapes.items():
        _expect(values[k].shape == shape, f"{name}/{k} is not of shape {shape}")
    _expect(all(len(values[k]) == p for k in ("parents", "phases", "kinds", "domains")),
            f"{name}: parents, phases, kinds, domains are not one per update")
    _expect(all(isinstance(r, dict) for r in values["ratios"]), f"{name}/ratios is not a list of objects")
    return DisplacementView(**values)


STATS = registry.register(ResultType(name=STATS_TYPE, version=RESULT_VERSION, payload=DisplacementStatsData,
                                     encode=encode_stats, decode=decode_stats, upgrades={}))
SUMMARY = registry.register(ResultType(name=SUMMARY_TYPE, version=RESULT_VERSION, payload=DisplacementSummaryData,
                                       encode=encode_summary, decode=decode_summary, upgrades={}))


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # turned into one line naming the key by ``reader.damaged``
