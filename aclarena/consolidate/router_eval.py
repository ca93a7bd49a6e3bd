"""Scoring routers on labelled contexts, and their result as results.h5 stores it (``routing/<router>``).

The metrics are those of :mod:`aclarena.diagnostics.routing`; the contexts those of
:mod:`aclarena.consolidate.contexts`; :mod:`aclarena.results.routing` writes the results and reads them
back. docs/store-format.md lists the stored elements.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.consolidate.contexts import NONE, LabelledContext
from aclarena.consolidate.routers import Route, Router
from aclarena.diagnostics.routing import GroupAccuracy, accuracy_by_group, confusion_matrix, item_chance
from aclarena.results.routing import DECISION_COLUMNS, RoutingData, routing_key

__all__ = ["RouterReport", "evaluate_router"]


@dataclass(frozen=True)
class RouterReport:
    """How one router did: per context type, a confusion matrix, and every decision."""

    router: str
    experts: tuple[str, ...]
    groups: tuple[GroupAccuracy, ...]
    labels: tuple[str, ...]
    confusion: np.ndarray
    mixed: Mapping[str, int]
    decisions: tuple[tuple[str, str, str, str, bool], ...]  # (kind, source, label, routed, correct)
    seconds: float
    settings: Mapping[str, Any] = field(default_factory=dict)

    def group(self, kind: str) -> GroupAccuracy | None:
        return next((g for g in self.groups if g.group == kind), None)

    @property
    def overall(self) -> float:
        n = sum(g.n for g in self.groups)
        return sum(g.correct for g in self.groups) / n if n else float("nan")

    def payload(self, *, fingerprint: str, regret: np.ndarray | None = None) -> RoutingData:
        """The stored form of this report (:mod:`aclarena.results.routing`): ``fingerprint`` of the contexts it was
        scored on, and the bandit's ``regret`` per training round."""
        g, d = self.groups, self.decisions
        accuracy: dict[str, list[Any]] = {"type": [x.group for x in g], "n": [x.n for x in g],
                                          "accuracy": [x.accuracy for x in g],
                                          "abstain_rate": [x.abstain_rate for x in g], "chance": [x.chance for x in g],
                                          "p_chance": [x.p_chance for x in g]}
        decisions: dict[str, list[Any]] = {c: [row[i] for row in d] for i, c in enumerate(DECISION_COLUMNS)}
        return RoutingData(router=self.router, fingerprint=fingerprint, overall=self.overall, seconds=self.seconds,
                           settings=dict(self.settings), accuracy=accuracy, labels=list(self.labels),
                           confusion=self.confusion, mixed=dict(self.mixed), decisions=decisions, regret=regret,
                           key=routing_key(self.router))


def evaluate_router(router: Router, contexts: Sequence[LabelledContext],
                    settings: Mapping[str, Any] | None = None) -> RouterReport:
    """Route every context and score the decisions."""
    t0 = time.perf_counter()
    routes: list[Route] = [router.route(c.context) for c in contexts]
    seconds = time.perf_counter() - t0
    experts = tuple(router.experts)
    correct = [c.correct(r.expert) for c, r in zip(contexts, routes, strict=True)]
    abstained = [r.expert is None for r in routes]
    chance = [item_chance(c.accept or {c.label}, experts) for c in contexts]
    groups = accuracy_by_group([c.kind for c in contexts], correct, abstained, chance)
    labels = (*experts, NONE)
    single = [(c, r) for c, r in zip(contexts, routes, strict=True) if not c.accept]
    conf = confusion_matrix([c.label for c, _ in single], [r.label for _, r in single], labels) if single else \
        np.zeros((len(labels), len(labels)), dtype=np.int64)
    mixed = {"first": 0, "second": 0, "none": 0, "other": 0}
    for c, r in zip(contexts, routes, strict=True):
        if not c.accept:
            continue
        a, b = c.label.split("+", 1)
        key = "first" if r.expert == a else "second" if r.expert == b else "none" if r.expert is None else "other"
        mixed[key] += 1
    decisions = tuple((c.kind, c.source, c.label, r.label, ok) for c, r, ok in zip(contexts, routes, correct, strict=True))
    return RouterReport(router=router.name, experts=experts, groups=tuple(groups), labels=labels, confusion=conf,
                        mixed=mixed, decisions=decisions, seconds=seconds, settings=dict(settings or {}))
