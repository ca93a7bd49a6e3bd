"""Continual-learning metrics of a run's capability matrix: the work of ``aclarena-diag forgetting``.

Stage order is the manifest's chain of ``kind = "stage"`` checkpoints from the base; each
stage's domain is measured on its in-domain suite; oracles are the ``kind = "oracle"``
checkpoints of each domain. Formulas and sources: docs/cl-metrics.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.analysis._common import RunPath, frame, manifest_or_load, nan_none
from aclarena.diagnostics.cl_metrics import METRIC_LABELS, CLReport, cl_report, peak_drop
from aclarena.envs import suite_chance
from aclarena.results.capability import at_chance, at_chance_line, cell_ci95, chain_data, open_matrix
from aclarena.store import Manifest

if TYPE_CHECKING:
    from aclarena.store.results import StoreReader

LABELS = METRIC_LABELS  # one home: aclarena.diagnostics.cl_metrics


@dataclass(frozen=True)
class ForgettingResult:
    """The CL report of one chain.

    ``R[i, j]``: score of ``stages[i]`` on ``suites[j]`` (the in-domain suite of ``tasks[j]``);
    ``metrics``: the scalar metrics (ACC, BWT, FWT, forgetting, retention...; None where undefined),
    labelled in :data:`LABELS`; ``domains``: one row per stage domain; ``along_chain``: every
    suite's scores along ``chain``; ``consolidated``: the metrics with each consolidated model in
    place of the last stage. ``writes`` is empty: the report is derived, never stored.
    """

    chain: tuple[str, ...]
    stages: tuple[str, ...]
    tasks: tuple[str, ...]
    suites: tuple[str, ...]
    R: np.ndarray
    report: CLReport
    metrics: Mapping[str, float | None]
    domains: tuple[dict[str, Any], ...]
    along_chain: tuple[dict[str, Any], ...]
    consolidated: tuple[dict[str, Any], ...]
    notes: tuple[str, ...] = ()
    writes: tuple[str, ...] = field(default=())

    def matrix(self) -> Any:
        """DataFrame ``R``: stages (rows) by their domains' in-domain suites (columns)."""
        import pandas as pd

        return pd.DataFrame(np.asarray(self.R, dtype=float), index=list(self.stages), columns=list(self.suites))

    def to_pandas(self) -> Any:
        """DataFrame, one row per stage domain: base, after its own stage, final, forgetting, retention..."""
        return frame(self.domains)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (strict JSON): what ``aclarena-diag forgetting --json`` prints."""
        return {"chain": list(self.chain), "stages": list(self.stages), "tasks": list(self.tasks),
                "suites": list(self.suites), "R": [[nan_none(float(x)) for x in row] for row in self.R],
                "summary": dict(self.metrics), "labels": LABELS, "domains": list(self.domains),
                "along_chain": list(self.along_chain), "consolidated": list(self.consolidated),
                "notes": list(self.notes)}


def forgetting(run_dir: RunPath, *, chain: str | None = None, suite_of: Mapping[str, str] | None = None,
               settings: str | None = None, manifest: Manifest | None = None) -> ForgettingResult:
    """The continual-learning metrics of the run's capability matrix (run ``eval`` first).

    ``chain`` names the last stage of the chain to measure when the manifest has several;
    ``suite_of`` maps a stage domain to the suite measuring it (default ``DOMAIN/id``);
    ``settings`` keeps only cells of that eval settings id. Nothing is written to the store.
    """
    manifest = manifest_or_load(run_dir, manifest)
    with open_matrix(run_dir, manifest, settings=settings) as (r, matrix):
        data = chain_data(matrix, manifest, r, chain=chain, suite_of=dict(suite_of or {}))
        guessed = _at_chance_along(r, matrix, data.chain)
        chance_flips = _chance_transitions(r, matrix, data.chain)
    rep = cl_report(data.R, data.tasks, base=data.base, oracle=data.oracle, items=data.items)
    summary = {k: nan_none(v) for k, v in rep.summary().items()}
    T = len(data.tasks)
    domains = []
    for j, (task, suite) in enumerate(zip(data.tasks, data.suites, strict=True)):
        domains.append({
            "domain": task, "suite": suite,
            "base": nan_none(float(data.base[j])) if data.base is not None else None,
            "after_own_stage": nan_none(float(data.R[j, j])),
            "best_before_final": nan_none(float(np.max(data.R[: T - 1, j]))) if j < T - 1 else None,
            "final": nan_none(float(data.R[-1, j])),
            "forgetting_max": nan_none(float(rep.forgetting_max[j])) if j < T - 1 else None,
            "forgetting_first_last": nan_none(float(rep.forgetting_first_last[j])) if j < T - 1 else None,
            "oracle": data.oracle_names[j],
            "oracle_score": nan_none(float(data.oracle[j])) if data.oracle is not None else None,
            "retention": nan_none(float(rep.retention[j])) if rep.retention is not None else None,
            "sample_forgetting": nan_none(float(rep.sample_forgetting[j]))
            if rep.sample_forgetting is not None and j < T - 1 else None,
            "sample_backward_transfer": nan_none(float(rep.sample_backward_transfer[j]))
            if rep.sample_backward_transfer is not None and j < T - 1 else None,
        })
    along = matrix.array(data.chain, matrix.suites)
    suites = []
    for j, suite in enumerate(matrix.suites):
        col = along[:, j]
        domain, role = matrix.suite_info.get(suite, (None, "other"))
        finite = col[~np.isnan(col)]
        suites.append({"suite": suite, "domain": domain, "role": role,
                       "scores": [nan_none(float(x)) for x in col],
                       "peak": nan_none(float(finite.max())) if finite.size else None,
                       "peak_at": data.chain[int(np.nanargmax(col))] if finite.size else None,
                       "final": nan_none(float(col[-1])),
                       "peak_drop": nan_none(peak_drop(col)) if not np.isnan(col).any() else None,
                       "at_chance": guessed.get(suite, []),
                       "chance": suite_chance(suite),
                       "transitions": chance_flips.get(suite, [])})
    consolidated = []
    for name, row in data.consolidated.items():
        R_alt = data.R.copy()
        R_alt[-1] = row
        alt = cl_report(R_alt, data.tasks, base=data.base, oracle=data.oracle)
        s = alt.summary()
        consolidated.append({"checkpoint": name, "scores": [nan_none(float(x)) for x in row],
                             "average_accuracy": nan_none(s["average_accuracy"]),
                             "backward_transfer": nan_none(s["backward_transfer"]),
                             "forgetting_max": nan_none(s["forgetting_max"]),
                             "retention_vs_oracle": nan_none(s["retention_vs_oracle"])})
    notes = [*data.notes, *(at_chance_line(suite, suite_chance(suite), names) for suite, names in guessed.items())]
    return ForgettingResult(chain=tuple(data.chain), stages=tuple(data.stages), tasks=tuple(data.tasks),
                            suites=tuple(data.suites), R=data.R, report=rep, metrics=summary, domains=tuple(domains),
                            along_chain=tuple(suites), consolidated=tuple(consolidated), notes=tuple(notes))


def _chance_transitions(reader: StoreReader, matrix: Any, chain: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Suite (with a guessing score) -> per consecutive pair of ``chain``: items forgotten and gained, plain and
    chance-adjusted (:func:`aclarena.diagnostics.cl_metrics.chance_adjusted`), on the items both were scored on."""
    from aclarena.diagnostics.cl_metrics import sample_transitions
    from aclarena.results.capability import read_items

    out: dict[str, list[dict[str, Any]]] = {}
    for suite in matrix.suites:
        chance = suite_chance(suite)
        if not chance:
            continue
        per: dict[str, dict[str, float]] = {}
        for ck in chain:
            c = matrix.get(ck, suite)
            got = read_items(reader, c) if c is not None and c.ok else None
            if got is not None:
                scores = got[1].mean(axis=0) if got[1].ndim == 2 else got[1]
                per[ck] = dict(zip(got[0], scores.tolist(), strict=True))
        rows = []
        for a, b in zip(chain, chain[1:], strict=False):
            if a not in per or b not in per:
                continue
            ids = [i for i in per[a] if i in per[b]]
            if not ids:
                continue
            tr = sample_transitions([per[a][i] for i in ids], [per[b][i] for i in ids])
            f, bt = tr.chance_adjusted(chance)
            rows.append({"from": a, "to": b, "n": tr.n_items, "forgotten": tr.forgotten, "gained": tr.gained,
                         "sample_forgetting": nan_none(tr.forgetting),
                         "sample_forgetting_chance_adjusted": nan_none(f),
                         # the paper's own estimator, under its own name: never compare it with aclarena's
                         "sample_forgetting_2510_17776": nan_none(tr.harmon_forgetting(chance)),
                         "sample_backward_transfer": nan_none(tr.backward_transfer),
                         "sample_backward_transfer_chance_adjusted": nan_none(bt)})
        if rows:
            out[suite] = rows
    return out


def _at_chance_along(reader: StoreReader, matrix: Any, chain: list[str]) -> dict[str, list[str]]:
    """Suite -> the checkpoints of ``chain`` whose score's 95% interval holds the suite's guessing score."""
    out: dict[str, list[str]] = {}
    for suite in matrix.suites:
        chance = suite_chance(suite)
        if not chance:
            continue
        names = [ck for ck in chain if (c := matrix.get(ck, suite)) is not None and c.ok
                 and at_chance(cell_ci95(reader, c), chance)]
        if names:
            out[suite] = names
    return out


