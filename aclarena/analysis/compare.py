"""The study-shaped comparison of consolidation methods: the work of ``aclarena-diag compare``.

Rows: the single-task oracles and the sequential end point (reference), then each
consolidation (its replicates together), then MLE routed by ``router``; columns: in-domain
suites, then out-of-domain ones; cells: mean ± std over replicates. Read from the capability
matrix (run ``eval`` first); see :mod:`aclarena.results.comparison`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aclarena.analysis._common import RunPath, frame, manifest_or_load
from aclarena.errors import unknown_name
from aclarena.results.capability import open_matrix
from aclarena.results.comparison import Comparison, comparison, repair_scores
from aclarena.store import Manifest

SCORES = {"greedy": "mean", "avg": "avg_k_mean"}
NO_METHODS = "no consolidated models yet: run `aclarena-diag consolidate --method ...`"


@dataclass(frozen=True)
class CompareResult:
    """The :class:`~aclarena.results.comparison.Comparison` of a run; ``writes`` is empty (derived, never stored)."""

    comparison: Comparison
    writes: tuple[str, ...] = field(default=())
    repairs: list[Any] = field(default_factory=list)  # RepairScoreRow: the four-part score of each repair

    @property
    def suites(self) -> list[str]:
        return self.comparison.suites

    @property
    def notes(self) -> list[str]:
        return self.comparison.notes

    @property
    def has_methods(self) -> bool:
        """Whether any consolidated model (or MLE) has a row."""
        return any(row.role in ("method", "mle") for row in self.comparison.rows)

    def to_pandas(self) -> Any:
        """DataFrame, one row per model (label, role) and one column of means per suite (NaN where unmeasured)."""
        cmp = self.comparison
        return frame([{"model": r.label, "role": r.role, **{s: r.cells[s].mean for s in cmp.suites}}
                      for r in cmp.rows], ["model", "role", *cmp.suites])

    def to_dict(self) -> dict[str, Any]:
        """Plain data (strict JSON): what ``aclarena-diag compare --json`` prints."""
        return self.comparison.to_json() | {"repair_scores": [r.to_dict() for r in self.repairs]}


def compare(run_dir: RunPath, *, router: str = "rule", score: str = "greedy", settings: str | None = None,
            manifest: Manifest | None = None, repair_pair: tuple[str, str] | None = None) -> CompareResult:
    """The comparison table of the run in ``run_dir``: ``score`` is greedy accuracy or ``avg`` (avg@k);
    ``router`` (rule, learned, bandit) makes the MLE row; ``settings`` keeps one eval settings id.

    ``repairs``: the four-part score (:mod:`aclarena.diagnostics.repair_score`) of every repair against
    its own stage, or, with ``repair_pair`` (OLD, NEW), of every consolidated checkpoint against that stage."""
    from aclarena.consolidate.routers import ROUTERS

    if router not in ROUTERS:
        raise unknown_name("router", router, ROUTERS)
    if score not in SCORES:
        raise unknown_name("score", score, SCORES)
    manifest = manifest_or_load(run_dir, manifest)
    with open_matrix(run_dir, manifest, settings=settings) as (r, matrix):
        cmp = comparison(matrix, manifest, r, router=router, what=SCORES[score])
        repairs = repair_scores(r, matrix, manifest, pair=repair_pair)
    return CompareResult(cmp, repairs=repairs)
