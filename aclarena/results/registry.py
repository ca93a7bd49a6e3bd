"""The registry of stored result types: each type's version, its codec and its upgrades.

A result type is one :class:`ResultType`: the ``result-type`` name stored on its group, the
``result-version`` it writes now, ``encode`` (typed payload -> elements and attributes, the bytes
:class:`~aclarena.store.ResultsStore` writes), ``decode`` (a :class:`Stored` group of the current
version -> typed payload, checking every element's shape) and ``upgrades``: for each older version
it reads, a function that rewrites a :class:`Stored` of that version into the next one. Reading a
group runs the upgrades from its stored version up to the current one, then ``decode``; a
version with no upgrade path is one line, not a ``KeyError``. A newer major version is refused by
the store itself (:func:`aclarena.store.results.check_result_version`); a newer minor of the same
major is read as the current one (minor versions only add).

Torch-free: numpy and :mod:`aclarena.store` only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aclarena.errors import StoreError
from aclarena.store.results import RESULT_MAJORS, ResultsStore, StoreReader


@dataclass(frozen=True)
class Stored:
    """One result group as stored, as plain data: what upgrade functions rewrite.

    ``attrs``: the group's attributes (JSON-valued ones still strings, as stored); ``data``: each
    child element as :func:`aclarena.store.encoding.read_elem` reads it.
    """

    key: str
    version: str
    attrs: dict[str, Any]
    data: dict[str, Any]

    def upgraded(self, version: str, *, attrs: Mapping[str, Any] | None = None,
                 data: Mapping[str, Any] | None = None) -> Stored:
        """A copy at ``version`` with ``attrs`` and ``data`` merged in (what an upgrade returns)."""
        return replace(self, version=version, attrs={**self.attrs, **(attrs or {})}, data={**self.data, **(data or {})})


Upgrade = Callable[[Stored], Stored]


@dataclass(frozen=True)
class ResultType:
    """One stored result type (see the module docstring and docs/store-format.md, "Result types")."""

    name: str
    version: str
    payload: type
    encode: Callable[[Any], tuple[dict[str, Any], dict[str, Any]]]
    decode: Callable[[Stored], Any]
    upgrades: Mapping[str, Upgrade] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _parse(self.version)
        for old in self.upgrades:
            if _parse(old) >= _parse(self.version):
                raise ValueError(f"{self.name}: an upgrade from {old} is not from an older version than {self.version}")

    def upgrade(self, stored: Stored, where: str = "") -> Stored:
        """``stored`` rewritten up to :attr:`version` by the upgrade functions (each moves it one step);
        ``where`` (the file) prefixes the key in the error."""
        return upgrade_stored(stored, self.name, self.version, self.upgrades, where)

    def item(self, key: str, payload: Any) -> tuple[str, dict[str, Any], str, str, dict[str, Any]]:
        """``payload`` as one item of :meth:`ResultsStore.write_many`, at the current version."""
        data, attrs = self.encode(payload)
        return key, data, self.name, self.version, attrs


def upgrade_stored(stored: Stored, name: str, version: str, upgrades: Mapping[str, Upgrade], where: str = "", *,
                   rerun: str = "the analysis that wrote it") -> Stored:
    """``stored`` (of type ``name``) rewritten up to ``version`` by ``upgrades`` (each moves it one step); what
    :meth:`ResultType.upgrade` runs, and the reader of a type kept outside results.h5 (``monitor-series``)."""
    seen: set[str] = set()
    while _parse(stored.version) < _parse(version):
        step = upgrades.get(stored.version)
        if step is None or stored.version in seen:
            raise StoreError(f"{where}{stored.key}: {name} result version {stored.version} cannot be read by "
                             f"this aclarena (it reads {version}, upgrades from "
                             f"{', '.join(sorted(upgrades)) or 'no older version'}); rerun {rerun}")
        seen.add(stored.version)
        stored = step(stored)
    return stored


_REGISTRY: dict[str, ResultType] = {}


def register(rtype: ResultType) -> ResultType:
    """Make ``rtype`` the reader and writer of its ``result-type`` (a later registration replaces it); a major
    version above 0 is what the store then accepts and reads for that type (:data:`RESULT_MAJORS`)."""
    _REGISTRY[rtype.name] = rtype
    major = _parse(rtype.version)[0]
    if major:
        RESULT_MAJORS[rtype.name] = max(major, RESULT_MAJORS.get(rtype.name, 0))
    return rtype


def json_type(name: str, version: str, payload: Any, element: str,
              upgrades: Mapping[str, Upgrade] | None = None) -> ResultType:
    """A result type stored as one JSON element ``element`` (a report such as the demo's summary or the order
    study): ``payload`` has ``to_json()`` and a classmethod ``from_json(data)`` that raises on a wrong shape."""
    def encode(p: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        from aclarena.store.encoding import Json

        return {element: Json(p.to_json())}, {}

    def decode(s: Stored) -> Any:
        value = s.data[element]
        return payload.from_json(json.loads(value) if isinstance(value, str) else value)

    return ResultType(name=name, version=version, payload=payload, encode=encode, decode=decode,
                      upgrades=dict(upgrades or {}))


def get(name: str) -> ResultType:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise StoreError(f"no reader for result type {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def registered() -> Iterator[ResultType]:
    yield from (_REGISTRY[k] for k in sorted(_REGISTRY))


def read_stored(reader: StoreReader, key: str) -> Stored:
    """The group at ``key`` as plain data (every child read whole)."""
    attrs = reader.attrs(key)
    with reader.damaged(key):
        data = {name: reader.read(f"{key}/{name}") for name in reader.keys(key)}
        version = str(attrs.get("result-version", "0.1.0"))
    return Stored(key=key.strip("/"), version=version, attrs=attrs, data=data)


def read(reader: StoreReader, key: str, name: str) -> Any:
    """The result at ``key``, which must be of type ``name``, upgraded to its current version and decoded."""
    rtype = get(name)
    stored = read_stored(reader, key)
    found = stored.attrs.get("result-type")
    if found != name:
        raise StoreError(f"{reader.path}:{stored.key} holds a {found!r} result, not {name!r}; choose a {name} result")
    with reader.damaged(key):
        _parse(stored.version)
        return rtype.decode(rtype.upgrade(stored, f"{reader.path}:"))


def read_if_stored(reader: StoreReader | None, key: str, name: str) -> Any:
    """:func:`read` of the result at ``key``, or None when there is none (or no store)."""
    if reader is None or not reader.has(key):
        return None
    return read(reader, key, name)


def read_children(reader: StoreReader | None, root: str, name: str,
                  order: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """``{child: payload}`` of every child group of ``root`` whose type is ``name`` (others skipped), in the order
    of ``order`` (the stored order without one); empty without a store or ``root``."""
    if reader is None or not reader.has(root):
        return {}
    children = reader.keys(root) if order is None else sorted(reader.keys(root), key=order)
    return {child: read(reader, f"{root}/{child}", name) for child in children
            if reader.attrs(f"{root}/{child}").get("result-type") == name}


def read_view(reader: StoreReader | None, key: str, name: str, view: str, views: Sequence[str]) -> Any:
    """One view (a child named in ``views``) of the summary at ``key``, read alone through :func:`read_part`:
    the payload's ``views[view]``, or None when the run has none yet."""
    if view not in views:
        raise ValueError(f"`view` must be one of {', '.join(views)}, got {view!r}")
    if reader is None or not reader.has(f"{key}/{view}"):
        return None
    return read_part(reader, key, name, [view]).views[view]


def read_part(reader: StoreReader, key: str, name: str, parts: Sequence[str]) -> Any:
    """Like :func:`read`, of the children ``parts`` of the group only (one view of a large result: the type's
    ``decode`` reads the children it is given); a part not stored is left out."""
    rtype = get(name)
    attrs = reader.attrs(key)
    found = attrs.get("result-type")
    if found != name:
        raise StoreError(f"{reader.path}:{key.strip('/')} holds a {found!r} result, not {name!r}; choose a {name} "
                         "result")
    with reader.damaged(key):
        version = str(attrs.get("result-version", "0.1.0"))
        _parse(version)
        data = {p: reader.read(f"{key}/{p}") for p in parts if reader.has(f"{key}/{p}")}
        stored = Stored(key=key.strip("/"), version=version, attrs=attrs, data=data)
        return rtype.decode(rtype.upgrade(stored, f"{reader.path}:"))


def write(store: ResultsStore | str | os.PathLike[str], name: str, key: str, payload: Any, *,
          overwrite: bool = True, manifest_text: str | None = None) -> None:
    """Write ``payload`` at ``key`` as the current version of type ``name``, completely or not at all."""
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    store.write_many([get(name).item(key, payload)], overwrite=overwrite, manifest_text=manifest_text)


def _parse(version: str) -> tuple[int, ...]:
    parts = str(version).split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"result version {version!r} is not MAJOR.MINOR.PATCH")
    return tuple(int(p) for p in parts)
