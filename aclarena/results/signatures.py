"""The ``drift-signature`` result type: ``aclarena-diag signatures``'s results, their payload, and how they are stored.

One result per (update, domain) at ``signatures/<update>/<domain>`` (result type ``drift-signature``,
version 0.1.0); its elements are specified in docs/store-format.md. ``<update>`` is the child's name for
a phase or consolidation, ``<parent>..<child>`` for a whole stage. :mod:`aclarena.analysis.signatures`
makes the payloads (:class:`SignatureData`) and writes them with :func:`write_signatures` (all of one
call in one atomic write); it reads them back with :func:`read_signature`, the Tokens page's figure
with :func:`list_signatures`. Plain JSON here: no torch.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.store.results import ResultsStore, StoreReader

ROOT = "signatures"
RESULT_TYPE = "drift-signature"
RESULT_VERSION = "0.1.0"
#: the measures every stored signature holds, each with its value and interval
MEASURES = ("kl_share_high", "barely_moved_low", "kl_share_first_k", "flip_rate_high", "flip_rate_low",
            "concentration_area", "kl_mean")
KINDS = ("sft", "rl", "stage", "consolidation", "update")


def signature_key(update: str, domain: str) -> str:
    return f"{ROOT}/{update}/{domain}"


@dataclass(frozen=True)
class SignatureData:
    """One stored drift signature: the update's identity and its numbers.

    ``values``, ``low``, ``high``: each of :data:`MEASURES` and its bootstrap interval;
    ``high_share``, ``first_k_share``: the chance levels of the two KL shares; counts say what the
    numbers rest on; ``settings``: what the signature was computed with (``high``, ``eps``,
    ``first_k``, ``n_boot``, ``level``, ``seed``). ``made_with``: those settings plus ``probe`` and
    the ``scores_id`` of the scores, the group's ``settings`` attribute a rerun compares to reuse
    it (None when absent or unreadable).
    """

    update: str
    kind: str
    parent: str
    child: str
    domain: str
    probe: str
    seed: int
    values: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]
    high_share: float
    first_k_share: float
    n_sequences: int
    n_positions: int
    n_valid: int
    n_high: int
    n_first_k: int
    settings: dict[str, Any] = field(default_factory=dict)
    made_with: dict[str, Any] | None = None
    key: str = ""

    def signature(self) -> dict[str, Any]:
        """The numbers as the ``signature`` element holds them (the fields of
        :meth:`aclarena.diagnostics.signatures.DriftSignature.to_dict`, in its order)."""
        return {"values": dict(self.values), "low": dict(self.low), "high": dict(self.high),
                "high_share": self.high_share, "first_k_share": self.first_k_share,
                "n_sequences": self.n_sequences, "n_positions": self.n_positions, "n_valid": self.n_valid,
                "n_high": self.n_high, "n_first_k": self.n_first_k, "settings": dict(self.settings)}


def read_signature(reader: StoreReader, key: str) -> SignatureData:
    """The stored signature at ``key``, upgraded to the current version. A group of another shape is
    one line naming the key (:class:`~aclarena.errors.StoreError`)."""
    data: SignatureData = registry.read(reader, key, RESULT_TYPE)
    return data


def list_signatures(reader: StoreReader | None) -> list[SignatureData]:
    """Every stored signature (:func:`read_signature`), in key order; [] when there is none."""
    if reader is None or not reader.has(ROOT):
        return []
    return [read_signature(reader, key) for key in reader.results(ROOT)
            if reader.attrs(key).get("result-type") == RESULT_TYPE]


def settings_of(reader: StoreReader, key: str) -> dict[str, Any] | None:
    """What a stored signature was computed with (its ``made_with``; None when absent or unreadable), read
    without the rest of the group."""
    return _made_with(reader.attrs(key).get("settings"))


def write_signatures(store: ResultsStore | str | os.PathLike[str], payloads: Sequence[SignatureData], *,
                     manifest_text: str | None = None) -> list[str]:
    """Write every payload under :func:`signature_key` (replacing what is there) in one atomic step; returns
    the keys."""
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    items = [SIGNATURE.item(signature_key(p.update, p.domain), p) for p in payloads]
    store.write_many(items, overwrite=True, manifest_text=manifest_text)
    return [it[0] for it in items]


def encode(p: SignatureData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json

    attrs = {"update": p.update, "kind": p.kind, "parent": p.parent, "child": p.child, "domain": p.domain,
             "probe": p.probe, "settings": p.made_with, "seed": p.seed}
    return {"signature": Json(p.signature())}, attrs


def decode(s: Stored) -> SignatureData:
    """A current-version stored result as its payload; a wrong shape raises (``reader.damaged`` makes it one line)."""
    a, data = s.attrs, s.data["signature"]
    _expect(isinstance(data, dict), "signature is not a JSON object")
    for part in ("values", "low", "high"):
        block = data.get(part)
        _expect(isinstance(block, dict) and all(_finite(block.get(m)) for m in MEASURES),
                f"signature.{part} lacks a finite number for one of {', '.join(MEASURES)}")
    _expect(all(_finite(data.get(k)) for k in ("high_share", "first_k_share", "n_sequences", "n_positions", "n_valid",
                                               "n_high", "n_first_k")),
            "signature lacks its chance shares or counts")
    _expect(str(a.get("kind")) in KINDS, f"kind {str(a.get('kind'))[:20]!r} is not one of {', '.join(KINDS)}")
    return SignatureData(
        update=str(a.get("update")), kind=str(a.get("kind")), parent=str(a.get("parent")),
        child=str(a.get("child")), domain=str(a.get("domain")), probe=str(a.get("probe")),
        seed=int(a["seed"]),
        values={k: float(v) for k, v in data["values"].items()}, low={k: float(v) for k, v in data["low"].items()},
        high={k: float(v) for k, v in data["high"].items()}, high_share=float(data["high_share"]),
        first_k_share=float(data["first_k_share"]), n_sequences=int(data["n_sequences"]),
        n_positions=int(data["n_positions"]), n_valid=int(data["n_valid"]), n_high=int(data["n_high"]),
        n_first_k=int(data["n_first_k"]), settings=dict(data.get("settings", {})),
        made_with=_made_with(a.get("settings")), key=s.key)


SIGNATURE = registry.register(ResultType(name=RESULT_TYPE, version=RESULT_VERSION, payload=SignatureData,
                                         encode=encode, decode=decode, upgrades={}))


def _made_with(raw: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # turned into one line naming the key by ``reader.damaged``
