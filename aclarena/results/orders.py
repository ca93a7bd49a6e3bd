"""The ``order-study`` result type: ``study --orders``'s report, its payload, and how it is stored.

One group ``orders/summary`` (result type ``order-study``, version 0.1.0) whose JSON element ``report``
holds what the run folder's ``orders.json`` holds (docs/store-format.md). :mod:`aclarena.analysis.orders`
makes the payload (:class:`OrderStudyData`) and writes it with :func:`write_orders_result`; the Orders page
and ``export``'s ``orders/*`` figures read it with :func:`read_orders`. Plain JSON here: no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from aclarena.results import registry
from aclarena.store.results import ResultsStore, StoreReader

STORE_KEY = "orders/summary"
RESULT_TYPE = "order-study"
RESULT_VERSION = "0.1.0"


@dataclass(frozen=True)
class OrderStudyData:
    """The order study: its design, the plan, per node and domain one accuracy per seed (``cells``), the
    findings with their intervals, the per-pair diagnostics and their predictors, and how it was made."""

    design: str
    domains: list[str]
    orders: list[list[str]]
    seeds: list[int]
    plan: dict[str, Any]
    cells: dict[str, Any]
    findings: dict[str, Any]
    pairs: list[Any]
    predictors: dict[str, Any]
    part_times: dict[str, Any]
    errors: dict[str, Any]
    made_by: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as ``orders.json`` holds it (what the figures and ``summary_lines`` read)."""
        out = {"design": self.design, "domains": self.domains, "orders": self.orders, "seeds": self.seeds,
               "plan": self.plan, "cells": self.cells, "findings": self.findings, "pairs": self.pairs,
               "predictors": self.predictors, "part_times": self.part_times, "errors": self.errors}
        return out if self.made_by is None else {**out, "made_by": self.made_by}

    @classmethod
    def from_json(cls, data: Any) -> OrderStudyData:
        """A report as ``orders.json`` holds it; a wrong shape raises (``reader.damaged`` makes it one line)."""
        if not isinstance(data, dict) or "findings" not in data:
            raise ValueError("not an order study: no findings")
        return cls(design=str(data["design"]), domains=list(data["domains"]), orders=list(data["orders"]),
                   seeds=list(data["seeds"]), plan=data["plan"], cells=data["cells"], findings=data["findings"],
                   pairs=data["pairs"], predictors=data["predictors"], part_times=data["part_times"],
                   errors=data["errors"], made_by=data.get("made_by"))


def read_orders(reader: StoreReader | None) -> OrderStudyData | None:
    """The stored order study of an open results store (None when there is none)."""
    data: OrderStudyData | None = registry.read_if_stored(reader, STORE_KEY, RESULT_TYPE)
    return data


def write_orders_result(store: ResultsStore | str | os.PathLike[str], payload: OrderStudyData) -> str:
    """Write ``payload`` at :data:`STORE_KEY` (replacing the study there), completely or not at all."""
    registry.write(store, RESULT_TYPE, STORE_KEY, payload, overwrite=True)
    return STORE_KEY


ORDER_STUDY = registry.register(registry.json_type(RESULT_TYPE, RESULT_VERSION, OrderStudyData, "report"))
