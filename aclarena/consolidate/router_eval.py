"""Scoring routers on labelled contexts, and writing their result to results.h5 (``routing/<router>``).

The metrics are those of :mod:`aclarena.diagnostics.routing`; the contexts those of
:mod:`aclarena.consolidate.contexts`; :mod:`aclarena.store.routing` reads the results back.
docs/store-format.md lists the stored elements.
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
from aclarena.store.routing import RESULT_TYPE, RESULT_VERSION, ROOT, read_reports

__all__ = ["RESULT_TYPE", "RESULT_VERSION", "ROOT", "RouterReport", "evaluate_router", "read_reports", "report_data",
           "write_report"]


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


def report_data(report: RouterReport) -> dict[str, Any]:
    """The report as store elements."""
    from aclarena.store import Json, Table

    g = report.groups
    return {
        "accuracy": Table({"type": [x.group for x in g], "n": np.array([x.n for x in g], dtype=np.int64),
                           "accuracy": np.array([x.accuracy for x in g]),
                           "abstain_rate": np.array([x.abstain_rate for x in g]),
                           "chance": np.array([x.chance for x in g]),
                           "p_chance": np.array([x.p_chance for x in g])}),
        "labels": Json(list(report.labels)),
        "confusion": report.confusion,
        "mixed": Json(dict(report.mixed)),
        "decisions": Table({"type": [d[0] for d in report.decisions], "source": [d[1] for d in report.decisions],
                            "label": [d[2] for d in report.decisions], "routed": [d[3] for d in report.decisions],
                            "correct": np.array([d[4] for d in report.decisions], dtype=bool)}),
        "settings": Json(dict(report.settings)),
    }


def write_report(store: Any, report: RouterReport, *, fingerprint: str, extra: Mapping[str, Any] | None = None,
                 manifest_text: str | None = None) -> str:
    """Write ``routing/<router>``; returns the key."""
    key = f"{ROOT}/{report.router}"
    data = report_data(report) | dict(extra or {})
    store.write(key, data, result_type=RESULT_TYPE, result_version=RESULT_VERSION,
                attrs={"fingerprint": fingerprint, "router": report.router, "overall": report.overall,
                       "seconds": report.seconds, "settings": dict(report.settings)},
                overwrite=True, manifest_text=manifest_text)
    return key
