"""Where ``aclarena-diag signatures`` results live in results.h5, and reading them back as plain data.

One result per (update, domain) at ``signatures/<update>/<domain>`` (result type
``drift-signature``, version 0.1.0; docs/store-format.md). ``<update>`` is the child's name for
a phase or consolidation, ``<parent>..<child>`` for a whole stage. Written by
:mod:`aclarena.analysis.signatures`; read by it, the dashboard's Tokens page and the demo summary.
Plain numpy and JSON here: no torch.
"""

from __future__ import annotations

import json
import math
from typing import Any

from aclarena.store.results import StoreReader

ROOT = "signatures"
RESULT_TYPE = "drift-signature"
RESULT_VERSION = "0.1.0"
#: the measures every stored signature holds, each with its value and interval
MEASURES = ("kl_share_high", "barely_moved_low", "kl_share_first_k", "flip_rate_high", "flip_rate_low",
            "concentration_area", "kl_mean")
KINDS = ("sft", "rl", "stage", "consolidation", "update")


def signature_key(update: str, domain: str) -> str:
    return f"{ROOT}/{update}/{domain}"


def read_signature(reader: StoreReader, key: str) -> dict[str, Any]:
    """One stored signature: the update's identity (attributes) and its numbers (``values``,
    ``low``, ``high``, chance shares, counts, settings). A group of another shape is one line
    naming the key (:class:`~aclarena.errors.StoreError`)."""
    with reader.damaged(key):
        a = reader.attrs(key)
        data = reader.read(f"{key}/signature")
        _expect(isinstance(data, dict), "signature is not a JSON object")
        for part in ("values", "low", "high"):
            block = data.get(part)
            _expect(isinstance(block, dict) and all(_finite(block.get(m)) for m in MEASURES),
                    f"signature.{part} lacks a finite number for one of {', '.join(MEASURES)}")
        _expect(all(_finite(data.get(k)) for k in ("high_share", "first_k_share", "n_sequences", "n_valid")),
                "signature lacks its chance shares or counts")
        _expect(str(a.get("kind")) in KINDS, f"kind {str(a.get('kind'))[:20]!r} is not one of {', '.join(KINDS)}")
        return {"key": key, "update": str(a.get("update")), "kind": str(a.get("kind")), "parent": str(a.get("parent")),
                "child": str(a.get("child")), "domain": str(a.get("domain")), "probe": str(a.get("probe")),
                "seed": a.get("seed"), **data}


def list_signatures(reader: StoreReader | None) -> list[dict[str, Any]]:
    """Every stored signature (:func:`read_signature`), in key order; [] when there is none."""
    if reader is None or not reader.has(ROOT):
        return []
    return [read_signature(reader, key) for key in reader.results(ROOT)
            if reader.attrs(key).get("result-type") == RESULT_TYPE]


def settings_of(reader: StoreReader, key: str) -> dict[str, Any] | None:
    """The settings a stored signature was computed with (None when absent or unreadable)."""
    raw = reader.attrs(key).get("settings")
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
