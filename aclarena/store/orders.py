"""The order study's summary in results.h5 (``orders/summary``, result type ``order-study``): one JSON element
``report`` holding what ``orders.json`` holds (:mod:`aclarena.analysis.orders`; docs/store-format.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aclarena.store.results import StoreReader

STORE_KEY = "orders/summary"
RESULT_TYPE = "order-study"
RESULT_VERSION = "0.1.0"


def read_orders(reader: StoreReader | None) -> dict[str, Any] | None:
    """The stored order study of an open results store (None when there is none)."""
    if reader is None or not reader.has(STORE_KEY):
        return None
    with reader.damaged(STORE_KEY):
        value = reader.read(f"{STORE_KEY}/report")
        data = json.loads(value) if isinstance(value, str) else value
        if not isinstance(data, dict) or "findings" not in data:
            raise ValueError("not an order study: no findings")
        return data
