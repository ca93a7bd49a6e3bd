"""The task-vector result types: ``aclarena-diag vectors``'s results, their payloads, and how they are stored.

Three groups (version 0.1.0 each; the elements are specified in docs/store-format.md): ``vectors/gram``
(``task-vector-gram``: the per-tensor inner products of one streamed pass, :class:`GramData`),
``vectors/summary`` (``task-vector-summary``: two views, ``all`` and ``no-embeddings``, each a
:class:`VectorSummaryView`, in :class:`VectorSummaryData`) and ``vectors/pairs`` (``task-vector-pairs``:
the cosines of asked-for pairs of differences, :class:`VectorPairsData`). Each carries ``fingerprint`` (a
hash of its settings and of the checkpoints' files) and ``settings``. :mod:`aclarena.analysis.vectors`
makes the payloads and writes them with :func:`write_gram`, :func:`write_vectors_summary` and
:func:`write_vector_pairs`; it reads the Gram back with :func:`read_gram`, the Vectors page and ``export``'s
``vectors/*`` figures a summary view with :func:`read_vectors_view`. Plain numpy and JSON here: no torch.
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

GRAM_KEY = "vectors/gram"
SUMMARY_KEY = "vectors/summary"
PAIRS_KEY = "vectors/pairs"
GRAM_TYPE = "task-vector-gram"
SUMMARY_TYPE = "task-vector-summary"
PAIRS_TYPE = "task-vector-pairs"
RESULT_VERSION = "0.1.0"
#: the two views of a summary: every floating weight, and without the input embeddings and output head
VIEWS = ("all", "no-embeddings")
# the elements of a summary view written as JSON (the others are arrays, and ``base`` a string)
_JSON_FIELDS = ("labels", "kinds", "plus", "minus", "group_labels", "tensor_labels", "oracles", "oracle_domains",
                "distance_checkpoints", "notes")


@dataclass(frozen=True)
class GramData:
    """The Gram pass: ``N`` basis names (the base, the full checkpoints, then the adapters), their ``kinds``
    (``anchor``, ``dense``, ``lora``) and the checkpoint each adapter is ``on`` (else None); ``T`` tensor names,
    ``numel`` int64 ``(T,)`` and ``gram`` float64 ``(T, N, N)``, the inner products of the basis vectors over
    each tensor."""

    basis: list[str]
    kinds: list[str]
    on: list[str | None]
    tensors: list[str]
    numel: np.ndarray
    gram: np.ndarray
    settings: dict[str, Any]
    fingerprint: str
    key: str = GRAM_KEY


@dataclass(frozen=True)
class VectorSummaryView:
    """One view of the task-vector summary (docs/store-format.md names every field and its shape): ``V`` task
    vectors ``θ_plus − θ_minus`` with their cosines and norms (global, per layer block, per tensor), the
    oracles, the distances of the chain's checkpoints to them, and the projections of stage updates on the
    oracle directions. Cosines of zero vectors are NaN."""

    labels: list[str]
    kinds: list[str]
    plus: list[str]
    minus: list[str]
    base: str
    cos: np.ndarray
    norm: np.ndarray
    group_labels: list[str]
    cos_group: np.ndarray
    norm_group: np.ndarray
    layer_mean_cos: np.ndarray
    tensor_labels: list[str]
    cos_tensor: np.ndarray
    norm_tensor: np.ndarray
    oracles: list[str]
    oracle_domains: list[str]
    oracle_norm: np.ndarray
    distance_checkpoints: list[str]
    on_chain: np.ndarray
    distance: np.ndarray
    distance_group: np.ndarray
    projection_vectors: np.ndarray
    projection_cos: np.ndarray
    projection_length: np.ndarray
    projection_coef: np.ndarray
    projection_cos_group: np.ndarray
    notes: list[str]

    def as_mapping(self) -> dict[str, Any]:
        """The fields by name (no copy): what the pure notes of :mod:`aclarena.diagnostics.run_notes` read."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class VectorSummaryData:
    """The task-vector summary: its views by name (:data:`VIEWS`; a reader of one view holds only that one)."""

    views: dict[str, VectorSummaryView]
    settings: dict[str, Any]
    fingerprint: str
    key: str = SUMMARY_KEY


@dataclass(frozen=True)
class PairView:
    """The cosines of ``P`` pairs in one view: ``cos`` ``(P,)`` over all its weights, and ``cos_group`` ``(G, P)``
    per layer block (``group_labels``)."""

    cos: np.ndarray
    group_labels: list[str]
    cos_group: np.ndarray


@dataclass(frozen=True)
class VectorPairsData:
    """Asked-for pair cosines ``cos(θ_a − θ_b, θ_c − θ_d)``: ``pairs`` (the columns ``pair``, ``a``, ``b``, ``c``,
    ``d`` as lists, one entry per pair) and per view (:data:`VIEWS`) a :class:`PairView`."""

    pairs: dict[str, list[str]]
    views: dict[str, PairView]
    settings: dict[str, Any]
    fingerprint: str
    key: str = PAIRS_KEY


PAIR_COLUMNS = ("pair", "a", "b", "c", "d")


def read_gram(reader: StoreReader) -> GramData:
    """The stored Gram pass, upgraded to the current version."""
    data: GramData = registry.read(reader, GRAM_KEY, GRAM_TYPE)
    return data


def read_vectors_summary(reader: StoreReader | None) -> VectorSummaryData | None:
    """The stored summary with both views (None when the run has none yet)."""
    data: VectorSummaryData | None = registry.read_if_stored(reader, SUMMARY_KEY, SUMMARY_TYPE)
    return data


def read_vectors_view(reader: StoreReader | None, view: str = "all") -> VectorSummaryView | None:
    """One view of the stored summary, read alone (None when the run has none yet)."""
    got: VectorSummaryView | None = registry.read_view(reader, SUMMARY_KEY, SUMMARY_TYPE, view, VIEWS)
    return got


def read_vector_pairs(reader: StoreReader | None) -> VectorPairsData | None:
    """The stored pair cosines (None when the run has none)."""
    data: VectorPairsData | None = registry.read_if_stored(reader, PAIRS_KEY, PAIRS_TYPE)
    return data


def write_gram(store: ResultsStore | str | os.PathLike[str], payload: GramData, *,
               manifest_text: str | None = None) -> str:
    """Write ``payload`` at :data:`GRAM_KEY` (replacing the pass there), completely or not at all."""
    registry.write(store, GRAM_TYPE, GRAM_KEY, payload, overwrite=True, manifest_text=manifest_text)
    return GRAM_KEY


def write_vectors_summary(store: ResultsStore | str | os.PathLike[str], payload: VectorSummaryData, *,
                          manifest_text: str | None = None) -> str:
    """Write ``payload`` at :data:`SUMMARY_KEY` (replacing the summary there), completely or not at all."""
    registry.write(store, SUMMARY_TYPE, SUMMARY_KEY, payload, overwrite=True, manifest_text=manifest_text)
    return SUMMARY_KEY


def write_vector_pairs(store: ResultsStore | str | os.PathLike[str], payload: VectorPairsData, *,
                       manifest_text: str | None = None) -> str:
    """Write ``payload`` at :data:`PAIRS_KEY` (replacing the pairs there), completely or not at all."""
    registry.write(store, PAIRS_TYPE, PAIRS_KEY, payload, overwrite=True, manifest_text=manifest_text)
    return PAIRS_KEY


def _attrs(p: GramData | VectorSummaryData | VectorPairsData) -> dict[str, Any]:
    return {"fingerprint": p.fingerprint, "settings": p.settings}


def _json_attr(attrs: dict[str, Any], name: str) -> dict[str, Any]:
    """The JSON object of the attribute ``name``."""
    raw = attrs[name]
    value = json.loads(raw) if isinstance(raw, str) else raw
    _expect(isinstance(value, dict), f"the {name} attribute is not a JSON object")
    return value


def encode_gram(p: GramData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json

    return {"basis": Json(list(p.basis)), "kinds": Json(list(p.kinds)), "on": Json(list(p.on)),
            "tensors": Json(list(p.tensors)), "numel": p.numel, "gram": p.gram, "settings": Json(p.settings)}, _attrs(p)


def decode_gram(s: Stored) -> GramData:
    """A current-version stored Gram as its payload; a wrong shape raises (``reader.damaged`` makes it one line)."""
    d = s.data
    basis, kinds, on, tensors = (d[k] for k in ("basis", "kinds", "on", "tensors"))
    _expect(all(isinstance(x, list) for x in (basis, kinds, on, tensors)), "basis, kinds, on or tensors is not a list")
    _expect(len(kinds) == len(on) == len(basis), "kinds and on do not have one entry per basis vector")
    numel, gram = np.asarray(d["numel"]), np.asarray(d["gram"])
    _expect(numel.shape == (len(tensors),) and numel.dtype.kind in "iu", "numel is not one integer per tensor")
    _expect(gram.shape == (len(tensors), len(basis), len(basis)) and gram.dtype.kind == "f",
            f"gram is not a float array of (tensors {len(tensors)}, basis {len(basis)}, basis {len(basis)})")
    settings = d["settings"]
    _expect(isinstance(settings, dict), "settings is not a JSON object")
    return GramData(basis=basis, kinds=kinds, on=on, tensors=tensors, numel=numel, gram=gram, settings=settings,
                    fingerprint=str(s.attrs["fingerprint"]), key=s.key)


def encode_summary(p: VectorSummaryData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    return {name: _view_elements(v) for name, v in p.views.items()}, _attrs(p)


def _view_elements(v: VectorSummaryView) -> dict[str, Any]:
    from aclarena.store.encoding import Json

    out: dict[str, Any] = {}
    for f in fields(v):
        value = getattr(v, f.name)
        if f.name in _JSON_FIELDS:
            out[f.name] = Json(list(value))
        elif f.name == "on_chain":
            out[f.name] = np.asarray(value, dtype=bool)
        elif f.name == "projection_vectors":
            out[f.name] = np.asarray(value, dtype=np.int64)
        else:
            out[f.name] = value
    return out


def decode_summary(s: Stored) -> VectorSummaryData:
    """A current-version stored summary (all its views, or those read) as its payload; a wrong shape raises."""
    views = {}
    for name, g in s.data.items():
        _expect(name in VIEWS and isinstance(g, dict), f"{str(name)[:20]!r} is not a view ({', '.join(VIEWS)})")
        views[name] = _decode_view(g, name)
    return VectorSummaryData(views=views, settings=_json_attr(s.attrs, "settings"),
                             fingerprint=str(s.attrs["fingerprint"]), key=s.key)


def _decode_view(g: dict[str, Any], name: str) -> VectorSummaryView:
    values: dict[str, Any] = {}
    for f in fields(VectorSummaryView):
        _expect(f.name in g, f"{name} has no {f.name}")
        value = g[f.name]
        if f.name in _JSON_FIELDS:
            _expect(isinstance(value, list), f"{name}/{f.name} is not a list")
        elif f.name == "base":
            _expect(isinstance(value, str), f"{name}/base is not a name")
        else:
            value = np.asarray(value)
        values[f.name] = value
    v, o, c = len(values["labels"]), len(values["oracles"]), len(values["distance_checkpoints"])
    g_, t = len(values["group_labels"]), len(values["tensor_labels"])
    shapes = {"cos": (v, v), "norm": (v,), "cos_group": (g_, v, v), "norm_group": (g_, v), "layer_mean_cos": (v, v),
              "cos_tensor": (t, v, v), "norm_tensor": (t, v), "oracle_norm": (o,), "on_chain": (c,),
              "distance": (c, o), "distance_group": (g_, c, o)}
    for k, shape in shapes.items():
        _expect(values[k].shape == shape, f"{name}/{k} is not of shape {shape}")
    _expect(all(len(values[k]) == v for k in ("kinds", "plus", "minus")), f"{name}: kinds, plus, minus are not one "
                                                                          "per label")
    return VectorSummaryView(**values)


def encode_pairs(p: VectorPairsData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json, Table

    data: dict[str, Any] = {"pairs": Table({c: list(p.pairs[c]) for c in PAIR_COLUMNS})}
    for name, v in p.views.items():
        data[name] = {"cos": v.cos, "group_labels": Json(list(v.group_labels)), "cos_group": v.cos_group}
    return data, _attrs(p)


def decode_pairs(s: Stored) -> VectorPairsData:
    """A current-version stored pairs result as its payload; a wrong shape raises."""
    table = s.data["pairs"]
    missing = [c for c in PAIR_COLUMNS if c not in getattr(table, "columns", {})]
    _expect(not missing, f"pairs has no column {', '.join(missing)}")
    pairs = {c: [str(x) for x in table.columns[c]] for c in PAIR_COLUMNS}
    views = {}
    for name in VIEWS:
        if name not in s.data:
            continue
        g = s.data[name]
        cos, gl, cg = np.asarray(g["cos"]), g["group_labels"], np.asarray(g["cos_group"])
        _expect(isinstance(gl, list) and cos.shape == (len(pairs["pair"]),)
                and cg.shape == (len(gl), len(pairs["pair"])), f"{name} is not one cosine per pair and layer block")
        views[name] = PairView(cos=cos, group_labels=gl, cos_group=cg)
    return VectorPairsData(pairs=pairs, views=views, settings=_json_attr(s.attrs, "settings"),
                           fingerprint=str(s.attrs["fingerprint"]), key=s.key)


GRAM = registry.register(ResultType(name=GRAM_TYPE, version=RESULT_VERSION, payload=GramData, encode=encode_gram,
                                    decode=decode_gram, upgrades={}))
SUMMARY = registry.register(ResultType(name=SUMMARY_TYPE, version=RESULT_VERSION, payload=VectorSummaryData,
                                       encode=encode_summary, decode=decode_summary, upgrades={}))
PAIRS = registry.register(ResultType(name=PAIRS_TYPE, version=RESULT_VERSION, payload=VectorPairsData,
                                     encode=encode_pairs, decode=decode_pairs, upgrades={}))


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # turned into one line naming the key by ``reader.damaged``
