"""Element encodings of results.h5, after anndata's h5ad.

Every group and dataset carries ``encoding-type`` and ``encoding-version`` attributes;
readers dispatch on that pair. The elements (docs/store-format.md):

=============== ======= ==================================================================
encoding-type   version Python value
=============== ======= ==================================================================
array           0.2.0   ``numpy.ndarray`` of numbers or booleans
string-array    0.2.0   ``list[str]`` (or a numpy array of str)
string          0.2.0   ``str``
numeric-scalar  0.2.0   ``int``, ``float``, ``bool`` or a numpy scalar
json            0.1.0   :class:`Json` (any JSON-serialisable value)
ragged-array    0.1.0   :class:`Ragged`: flat ``values`` plus ``offsets`` (CSR-like rows)
table           0.1.0   :class:`Table`: named 1-d columns of equal length
dict            0.1.0   ``dict[str, element]``
=============== ======= ==================================================================

This module never opens files; it encodes into and decodes from open h5py objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from aclarena.errors import StoreError

ENC_TYPE = "encoding-type"
ENC_VERSION = "encoding-version"


@dataclass(frozen=True)
class Ragged:
    """Rows of different lengths as one flat array and row offsets.

    Row ``i`` is ``values[offsets[i]:offsets[i + 1]]``; ``offsets`` has ``n_rows + 1``
    entries starting at 0. ``values`` may have trailing dimensions (e.g. top-k ids).
    """

    values: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets)
        if offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0:
            raise ValueError("`offsets` must be 1-d and start at 0")
        if np.any(np.diff(offsets) < 0):
            raise ValueError("`offsets` must be non-decreasing")
        if int(offsets[-1]) != len(self.values):
            raise ValueError(f"`offsets` ends at {int(offsets[-1])} but `values` has {len(self.values)} rows")

    @classmethod
    def from_rows(cls, rows: Sequence[np.ndarray], dtype: Any = None) -> Ragged:
        lengths = [len(r) for r in rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if rows:
            values = np.concatenate([np.asarray(r, dtype=dtype) for r in rows])
        else:
            values = np.zeros(0, dtype=dtype or np.float32)
        return cls(values=values, offsets=offsets)

    @property
    def n_rows(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int) -> np.ndarray:
        return self.values[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def rows(self) -> list[np.ndarray]:
        return [self.row(i) for i in range(self.n_rows)]


@dataclass(frozen=True)
class Table:
    """Named 1-d columns of equal length (numbers, booleans or strings)."""

    columns: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lengths = {k: len(v) for k, v in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"table columns differ in length: {lengths}")

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def rows(self) -> list[dict[str, Any]]:
        cols = {k: _as_list(v) for k, v in self.columns.items()}
        return [{k: cols[k][i] for k in cols} for i in range(len(self))]

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> Table:
        names = list(columns) if columns is not None else (list(rows[0]) if rows else [])
        return cls({n: [r[n] for r in rows] for n in names})


@dataclass(frozen=True)
class Json:
    """Any JSON-serialisable value, stored as one JSON string."""

    value: Any


def _as_list(v: Any) -> list[Any]:
    if isinstance(v, np.ndarray):
        return v.tolist()
    return list(v)


def _is_str_seq(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind in ("U", "O") and all(isinstance(x, str) for x in value.flat)
    return isinstance(value, list | tuple) and len(value) > 0 and all(isinstance(x, str) for x in value)


# HDF5 variable-length strings end at a NUL, so h5py refuses text that holds one (models do generate
# U+0000). Such a string or string-array is stored escaped ("\\" for a backslash, "\0" for NUL) and
# marked with this attribute; readers undo it (docs/store-format.md).
NUL_ESCAPED = "nul-escaped"
_UNESCAPE = re.compile(r"\\(\\|0)")


def escape_nul(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\x00", "\\0")


def unescape_nul(text: str) -> str:
    return _UNESCAPE.sub(lambda m: "\x00" if m.group(1) == "0" else "\\", text)


def _set_enc(obj: h5py.HLObject, enc_type: str, version: str) -> None:
    obj.attrs[ENC_TYPE] = enc_type
    obj.attrs[ENC_VERSION] = version


# --- writing -------------------------------------------------------------------------------


def write_elem(parent: h5py.Group, key: str, value: Any, *, compression: str | None = "gzip") -> None:
    """Encode ``value`` as ``parent[key]``."""
    if isinstance(value, Ragged):
        g = parent.create_group(key)
        _set_enc(g, "ragged-array", "0.1.0")
        _write_array(g, "values", np.asarray(value.values), compression)
        _write_array(g, "offsets", np.asarray(value.offsets, dtype=np.int64), None)
    elif isinstance(value, Table):
        g = parent.create_group(key)
        _set_enc(g, "table", "0.1.0")
        g.attrs["column-order"] = json.dumps(list(value.columns))
        for name, col in value.columns.items():
            write_elem(g, name, col if _is_str_seq(col) else np.asarray(col), compression=compression)
    elif isinstance(value, Json):
        ds = parent.create_dataset(key, data=json.dumps(value.value), dtype=h5py.string_dtype())
        _set_enc(ds, "json", "0.1.0")
    elif isinstance(value, Mapping):
        g = parent.create_group(key)
        _set_enc(g, "dict", "0.1.0")
        for k, v in value.items():
            write_elem(g, str(k), v, compression=compression)
    elif isinstance(value, str):
        escaped = "\x00" in value
        ds = parent.create_dataset(key, data=escape_nul(value) if escaped else value, dtype=h5py.string_dtype())
        _set_enc(ds, "string", "0.2.0")
        if escaped:
            ds.attrs[NUL_ESCAPED] = True
    elif isinstance(value, bool | int | float | np.generic):
        ds = parent.create_dataset(key, data=np.asarray(value))
        _set_enc(ds, "numeric-scalar", "0.2.0")
    elif _is_str_seq(value):
        texts = [str(x) for x in value]
        escaped = any("\x00" in t for t in texts)
        ds = parent.create_dataset(key, data=[escape_nul(t) for t in texts] if escaped else texts,
                                   dtype=h5py.string_dtype())
        _set_enc(ds, "string-array", "0.2.0")
        if escaped:
            ds.attrs[NUL_ESCAPED] = True
    elif isinstance(value, np.ndarray | list | tuple):
        arr = np.asarray(value)
        if arr.dtype.kind in ("U", "O"):
            raise TypeError(f"cannot store {key!r}: an array of {arr.dtype} is neither numeric nor all strings")
        _write_array(parent, key, arr, compression)
    else:
        raise TypeError(f"cannot store {key!r}: unsupported type {type(value).__name__}")


def _write_array(parent: h5py.Group, key: str, arr: np.ndarray, compression: str | None) -> None:
    kwargs: dict[str, Any] = {}
    if compression and arr.size >= 4096:
        kwargs = {"compression": compression, "compression_opts": 4, "chunks": True}
    ds = parent.create_dataset(key, data=arr, **kwargs)
    _set_enc(ds, "array", "0.2.0")


# --- reading -------------------------------------------------------------------------------

Reader = Callable[[Any], Any]
_READERS: dict[tuple[str, str], Reader] = {}


def register_reader(enc_type: str, major: str) -> Callable[[Reader], Reader]:
    """Register a reader for (encoding-type, major version)."""

    def deco(fn: Reader) -> Reader:
        _READERS[(enc_type, major)] = fn
        return fn

    return deco


_VERSION_RE = re.compile(r"(\d{1,6})\.(\d{1,6})\.(\d{1,6})\Z")


def _attr_text(obj: h5py.HLObject, name: str) -> str:
    v = obj.attrs.get(name)
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            pass
    elif isinstance(v, str):
        return v
    if v is None:
        raise StoreError(f"{obj.name}: element has no encoding-type/encoding-version; the store is not an aclarena store")
    raise StoreError(f"{obj.name}: {name} is {v!r}, not a string; the store is damaged: move results.h5 aside "
                     "and rerun the analyses")


def encoding_of(obj: h5py.HLObject) -> tuple[str, str]:
    """(encoding-type, encoding-version) of an element, both checked to be strings, the version MAJOR.MINOR.PATCH."""
    enc_type, version = _attr_text(obj, ENC_TYPE), _attr_text(obj, ENC_VERSION)
    if not _VERSION_RE.match(version):
        raise StoreError(f"{obj.name}: encoding-version {version!r} is not MAJOR.MINOR.PATCH; the store is damaged: "
                         "move results.h5 aside and rerun the analyses")
    return enc_type, version


def _reader_for(obj: h5py.HLObject) -> tuple[str, str, Reader]:
    enc_type, version = encoding_of(obj)
    major = version.split(".")[0]
    reader = _READERS.get((enc_type, str(int(major))))
    if reader is None:
        known_majors = sorted(int(v) for (t, v) in _READERS if t == enc_type)
        if known_majors and int(major) > known_majors[-1]:
            raise StoreError(
                f"{obj.name}: {enc_type} version {version} was written by a newer aclarena; upgrade aclarena"
            )
        raise StoreError(f"{obj.name}: unknown element encoding {enc_type!r} version {version}")
    return enc_type, version, reader


def read_elem(obj: h5py.HLObject) -> Any:
    """Decode an element, dispatching on (encoding-type, major version)."""
    enc_type, _, reader = _reader_for(obj)
    try:
        return reader(obj)
    except StoreError:
        raise
    except Exception as e:
        e.add_note(f"while reading HDF5 element {obj.name}")
        raise StoreError(f"{obj.name}: cannot decode {enc_type} element ({type(e).__name__}: {e})") from e


@register_reader("array", "0")
def _read_array(ds: h5py.Dataset) -> np.ndarray:
    return ds[()]


@register_reader("string-array", "0")
def _read_string_array(ds: h5py.Dataset) -> list[str]:
    out = [s.decode() if isinstance(s, bytes) else str(s) for s in ds[()]]
    return [unescape_nul(s) for s in out] if ds.attrs.get(NUL_ESCAPED) else out


@register_reader("string", "0")
def _read_string(ds: h5py.Dataset) -> str:
    v = ds[()]
    out = v.decode() if isinstance(v, bytes) else str(v)
    return unescape_nul(out) if ds.attrs.get(NUL_ESCAPED) else out


@register_reader("numeric-scalar", "0")
def _read_scalar(ds: h5py.Dataset) -> Any:
    return ds[()].item()


@register_reader("json", "0")
def _read_json(ds: h5py.Dataset) -> Any:
    v = ds[()]
    return json.loads(v.decode() if isinstance(v, bytes) else v)


@register_reader("ragged-array", "0")
def _read_ragged(g: h5py.Group) -> Ragged:
    values, offsets = _ragged_parts(g)
    return Ragged(values=values[()], offsets=check_offsets(g.name, offsets[()], len(values)))


@register_reader("table", "0")
def _read_table(g: h5py.Group) -> Table:
    order = json.loads(g.attrs["column-order"])
    return Table({name: read_elem(g[name]) for name in order})


@register_reader("dict", "0")
def _read_dict(g: h5py.Group) -> dict[str, Any]:
    return {k: read_elem(g[k]) for k in g}


def check_offsets(name: str, offsets: Any, n_values: int) -> np.ndarray:
    """Row offsets as a ragged array needs them: 1-d integers from 0, non-decreasing, ending at ``n_values``."""
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or offsets.size == 0 or offsets.dtype.kind not in "iu":
        raise StoreError(f"{name}: offsets are not a 1-d integer array; the store is damaged: move results.h5 "
                         "aside and rerun the analysis")
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or int(offsets[-1]) != n_values:
        raise StoreError(f"{name}: offsets do not run from 0 up to the {n_values} stored values (they end at "
                         f"{int(offsets[-1])}); the store is damaged: move results.h5 aside and rerun the analysis")
    return offsets.astype(np.int64, copy=False)


def _ragged_parts(g: h5py.Group) -> tuple[h5py.Dataset, h5py.Dataset]:
    if not isinstance(g, h5py.Group):
        raise StoreError(f"{g.name}: a ragged-array must be a group (values, offsets); the store is damaged")
    values, offsets = g.get("values"), g.get("offsets")
    if not isinstance(values, h5py.Dataset) or not isinstance(offsets, h5py.Dataset) or values.ndim < 1:
        raise StoreError(f"{g.name}: a ragged-array needs the datasets values (at least 1-d) and offsets; the "
                         "store is damaged: move results.h5 aside and rerun the analysis")
    return values, offsets


class RaggedView:
    """Lazy access to a stored ragged array: reads one row at a time from the file.

    The type, version and offsets are checked when the view is made, so a row never reads past
    the values or comes out short.
    """

    def __init__(self, group: h5py.Group) -> None:
        enc_type, _, _ = _reader_for(group)
        if enc_type != "ragged-array":
            raise StoreError(f"{group.name}: expected a ragged-array, found {enc_type}")
        self._values, offsets = _ragged_parts(group)
        self.offsets = check_offsets(group.name, offsets[()], len(self._values))

    @property
    def n_rows(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int) -> np.ndarray:
        if not 0 <= i < self.n_rows:
            raise IndexError(f"row {i} out of range (0..{self.n_rows - 1})")
        return self._values[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def all(self) -> np.ndarray:
        return self._values[()]
