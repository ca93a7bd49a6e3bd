"""The study-shaped comparison table: consolidation methods x suites, mean ± std over replicates.

Assembled from the capability matrix (:mod:`aclarena.results.capability`) and the manifest:

* reference rows: each domain's single-task oracle and the sequential end point;
* one row per consolidation (consolidated checkpoints grouped by name without the replicate
  suffix ``-s<r>``: ``merge-ta-l0.5`` and ``merge-ta-l0.5-s1`` are two replicates of one row);
* the MLE row: MLE is a system, not one checkpoint. Each suite is answered by the expert its
  router picks from that suite's execution context (or by the backbone when the router finds
  no expert, the ``backbone`` fallback), as recorded by ``consolidate --method mle`` under
  ``consolidate/mle[-s<r>]``; its score on a suite is that checkpoint's.

The four-part score of a repair (:mod:`aclarena.diagnostics.repair_score`) is assembled here
too (:func:`repair_scores`), from the per-item outcomes of the capability cells.

Columns: the in-domain suites of the curriculum's domains, then the other suites
(out-of-domain and general). A cell is the mean over the row's replicates of each
replicate's score, with the standard deviation over replicates (ddof 1) when there are
several, else over the evaluation seeds of the one cell when it has several.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.results.capability import DOMAIN_ORDER, CapabilityMatrix, stage_chains
from aclarena.results.consolidation import REPAIR_PREFIX
from aclarena.store.manifest import Manifest
from aclarena.store.results import StoreReader

_SUFFIX_RE = re.compile(r"-s(\d+)$")


def group_name(name: str) -> str:
    """A checkpoint's row: its name without the replicate suffix ``-s<r>``."""
    return _SUFFIX_RE.sub("", name)


@dataclass(frozen=True)
class CompareCell:
    mean: float
    std: float
    n: int
    std_over: str  # "replicates", "eval seeds" or ""
    members: tuple[str, ...]

    def text(self, digits: int = 3) -> str:
        if math.isnan(self.mean):
            return "-"
        if math.isnan(self.std):
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}"


@dataclass(frozen=True)
class CompareRow:
    label: str
    role: str  # "oracle", "end", "method", "mle"
    method: str | None
    members: tuple[str, ...]
    cells: dict[str, CompareCell]
    domain: str | None = None  # an oracle row's domain (from the manifest, not from its label)


@dataclass
class Comparison:
    in_domain: list[str]
    out_of_domain: list[str]
    rows: list[CompareRow]
    router: str
    score: str
    notes: list[str] = field(default_factory=list)

    @property
    def suites(self) -> list[str]:
        return self.in_domain + self.out_of_domain

    def row(self, label: str) -> CompareRow | None:
        return next((r for r in self.rows if r.label == label), None)

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else float(x)

        return {
            "in_domain": self.in_domain, "out_of_domain": self.out_of_domain, "router": self.router,
            "score": self.score, "notes": self.notes,
            "rows": [{"label": r.label, "role": r.role, "method": r.method, "members": list(r.members),
                      "cells": {s: {"mean": num(c.mean), "std": num(c.std), "n": c.n, "std_over": c.std_over,
                                    "members": list(c.members)} for s, c in r.cells.items()}}
                     for r in self.rows],
        }


def _cell(matrix: CapabilityMatrix, members: Sequence[str], suite: str, what: str) -> CompareCell:
    vals, used, single_std = [], [], float("nan")
    std_key = "std" if what == "mean" else "avg_k_std"
    for m in members:
        c = matrix.get(m, suite)
        if c is not None and c.ok:
            v = getattr(c, what)
            if not math.isnan(v):
                vals.append(v)
                used.append(m)
                if c.n_seeds > 1:
                    single_std = getattr(c, std_key)
    if not vals:
        return CompareCell(float("nan"), float("nan"), 0, "", ())
    if len(vals) > 1:
        return CompareCell(float(np.mean(vals)), float(np.std(vals, ddof=1)), len(vals), "replicates", tuple(used))
    over = "eval seeds" if not math.isnan(single_std) else ""
    return CompareCell(vals[0], single_std, 1, over, tuple(used))


def _row(matrix: CapabilityMatrix, label: str, role: str, method: str | None, members: Sequence[str],
         suites: Sequence[str], what: str, domain: str | None = None) -> CompareRow:
    return CompareRow(label, role, method, tuple(members), {s: _cell(matrix, members, s, what) for s in suites},
                      domain)


def read_mle_routes(reader: StoreReader | None) -> dict[str, dict[str, Any]]:
    """``{mle record name: {"routes": {router: {suite: {...}}}, "replicate": r}}``: the MLE records of
    ``consolidate/`` (:class:`~aclarena.results.consolidation.MleRecord`, read and checked by their type)."""
    from aclarena.results.consolidation import ROOT, MleRecord, read_consolidation

    out: dict[str, dict[str, Any]] = {}
    if reader is None or not reader.has(ROOT):
        return out
    for name in reader.keys(ROOT):
        if reader.has(f"{ROOT}/{name}/routes"):  # only an MLE record has routes: the others are not read
            record = read_consolidation(reader, name)
            if isinstance(record, MleRecord):
                out[name] = {"routes": record.routes, "replicate": record.replicate}
    return out


def comparison(matrix: CapabilityMatrix, manifest: Manifest, reader: StoreReader | None = None, *,
               router: str = "rule", what: str = "mean") -> Comparison:
    """Assemble the comparison table (rows in the study's order: oracles, end point, methods, MLE)."""
    if what not in ("mean", "avg_k_mean"):
        raise ValueError(f"`what` must be 'mean' or 'avg_k_mean', got {what!r}")
    notes: list[str] = []
    chains = [c for c in stage_chains(manifest) if len(c) > 1] if manifest.base is not None else []
    domains: list[str] = []
    for chain in chains:
        for spec in chain[1:]:
            if spec.domain is not None and spec.domain not in domains:
                domains.append(spec.domain)
    if not domains:
        domains = [d for d in DOMAIN_ORDER if d != "general"]
    in_domain = [s for d in domains for s in matrix.suites if matrix.suite_info.get(s) == (d, "id")]
    out_domain = [s for s in matrix.suites if s not in in_domain]
    suites = in_domain + out_domain
    rows: list[CompareRow] = []
    oracles = [s for s in manifest if s.kind == "oracle" and s.domain is not None]
    for d in domains:
        last = [o.name for o in oracles if o.domain == d
                and not any(x.domain == d and o.name in manifest.ancestors(x.name) for x in oracles)]
        if last:
            rows.append(_row(matrix, group_name(last[0]), "oracle", None, last, suites, what, domain=d))
    if chains:
        ends = [c[-1].name for c in chains]
        rows.append(_row(matrix, f"sequential end point ({group_name(ends[0])})", "end", None, ends, suites, what))
    groups: dict[str, list[str]] = {}
    method_of: dict[str, str | None] = {}
    for spec in manifest:
        if spec.kind != "consolidated" or spec.method == "mle":
            continue
        g = group_name(spec.name)
        groups.setdefault(g, []).append(spec.name)
        method_of.setdefault(g, spec.method)
    for g, members in groups.items():
        rows.append(_row(matrix, g, "method", method_of[g], members, suites, what))
    mle = read_mle_routes(reader)
    if mle:
        rows.extend(_mle_rows(matrix, manifest, mle, router, suites, what, notes))
    for r in rows:
        missing = [s for s in suites if r.cells[s].n == 0]
        if missing and len(missing) == len(suites):
            notes.append(f"{r.label}: not evaluated; run `aclarena-diag eval` on {', '.join(r.members)}")
    return Comparison(in_domain=in_domain, out_of_domain=out_domain, rows=rows, router=router,
                      score="greedy" if what == "mean" else "avg@k", notes=notes)


def _mle_rows(matrix: CapabilityMatrix, manifest: Manifest, mle: dict[str, dict[str, Any]], router: str,
              suites: Sequence[str], what: str, notes: list[str]) -> list[CompareRow]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for name, rec in sorted(mle.items(), key=lambda kv: kv[1]["replicate"]):
        groups.setdefault(group_name(name), []).append(rec)
    rows = []
    for g, recs in groups.items():
        cells: dict[str, CompareCell] = {}
        members: list[str] = []
        for suite in suites:
            per_rep = []
            for rec in recs:
                routes = rec["routes"].get(router)
                if routes is None:
                    continue
                choice = routes.get(suite)
                if choice is None:
                    continue
                name = choice.get("checkpoint")
                if name is None or name not in manifest:
                    continue
                members.append(name)
                per_rep.append(name)
            cells[suite] = _cell(matrix, per_rep, suite, what)
        if not any(rec["routes"].get(router) for rec in recs):
            notes.append(f"{g}: no routes of router {router!r}; consolidate with --routers including it")
        rows.append(CompareRow(f"{g} ({router} router)", "mle", "mle", tuple(dict.fromkeys(members)), cells))
    return rows


# --- the four-part score ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RepairScoreRow:
    """The four-part score of ``checkpoint`` against the stage ``old`` -> ``new``
    (:mod:`aclarena.diagnostics.repair_score`): per part its value, interval and suites."""

    checkpoint: str
    method: str | None
    old: str
    new: str
    score: Any  # RepairScore

    def to_dict(self) -> dict[str, Any]:
        from aclarena.diagnostics.repair_score import PARTS

        def num(x: float) -> float | None:
            return None if math.isnan(x) else float(x)

        parts = {}
        for p in PARTS:
            part = self.score.part(p)
            parts[p] = {"value": num(part.value), "ci95": [num(part.ci[0]), num(part.ci[1])],
                        "suites": list(part.suites), "dropped_resamples": part.dropped}
        return {"checkpoint": self.checkpoint, "method": self.method, "from": self.old, "to": self.new, **parts,
                "partition": dict(self.score.partition),
                "stage_effect": {s: {"new_minus_old": num(d), "ci95": [num(lo), num(hi)]}
                                 for s, (d, lo, hi) in self.score.effects.items()},
                "n_items": dict(self.score.n_items)}


def lineage_of(reader: StoreReader | None, name: str) -> tuple[str, str] | None:
    """(from, to) of a repair recorded under ``consolidate/<name>``; None when there is none."""
    from aclarena.results.consolidation import RepairRecord, consolidation_key, read_consolidation

    if reader is None or not reader.has(consolidation_key(name)):
        return None
    record = read_consolidation(reader, name)
    if not isinstance(record, RepairRecord):
        return None
    frm, to = record.settings.get("from"), record.settings.get("to")
    return (frm, to) if isinstance(frm, str) and isinstance(to, str) else None


def _items_of(reader: StoreReader | None, matrix: CapabilityMatrix, checkpoint: str, suite: str) -> dict[str, float] | None:
    from aclarena.results.capability import read_items

    cell = matrix.get(checkpoint, suite)
    if reader is None or cell is None or not cell.ok:
        return None
    got = read_items(reader, cell)
    if got is None or got[1].size == 0:
        return None
    ids, scores = got
    per_item = scores.mean(axis=0) if scores.ndim == 2 else scores
    return dict(zip(ids, (float(v) for v in per_item), strict=True))


def score_against(reader: StoreReader | None, matrix: CapabilityMatrix, manifest: Manifest, checkpoint: str, old: str, new: str, *,
                  n_boot: int = 1000, seed: int = 0) -> RepairScoreRow | None:
    """The four-part score of ``checkpoint`` against the stage ``old`` -> ``new`` over every suite all three were
    evaluated on (items matched by id); target suites: the in-domain suites of NEW's domain. None when no suite
    has all three."""
    from aclarena.diagnostics.repair_score import SuiteOutcomes, repair_score

    new_spec = manifest.resolve(new)
    targets = set(matrix.in_domain_suites(new_spec.domain)) if new_spec.domain else set()
    suites = []
    for suite in matrix.suites:
        got = [_items_of(reader, matrix, ck, suite) for ck in (old, new, checkpoint)]
        if any(g is None for g in got):
            continue
        a, b, c = (g for g in got if g is not None)
        ids = [i for i in a if i in b and i in c]
        if not ids:
            continue
        suites.append(SuiteOutcomes(suite, "target" if suite in targets else "held-out",
                                    np.array([a[i] for i in ids]), np.array([b[i] for i in ids]),
                                    np.array([c[i] for i in ids])))
    if not suites:
        return None
    spec = manifest.checkpoints.get(checkpoint)
    return RepairScoreRow(checkpoint, spec.method if spec is not None else None, old, new,
                          repair_score(suites, n_boot=n_boot, seed=seed))


def repair_scores(reader: StoreReader | None, matrix: CapabilityMatrix, manifest: Manifest, *, pair: tuple[str, str] | None = None,
                  checkpoints: Sequence[str] | None = None, n_boot: int = 1000) -> list[RepairScoreRow]:
    """Four-part scores: every repair against its own stage (its recorded from/to), or, with ``pair``, every
    consolidated checkpoint (or ``checkpoints``) against that stage (merges scored like repairs)."""
    rows = []
    if pair is not None:
        for n in pair:
            manifest.resolve(n)
        names = list(checkpoints) if checkpoints is not None else [s.name for s in manifest if s.kind == "consolidated"]
        for n in names:
            row = score_against(reader, matrix, manifest, n, pair[0], pair[1], n_boot=n_boot)
            if row is not None:
                rows.append(row)
        return rows
    for spec in manifest:
        if spec.kind != "consolidated" or not (spec.method or "").startswith(REPAIR_PREFIX):
            continue
        lin = lineage_of(reader, spec.name)
        if lin is None or lin[0] not in manifest or lin[1] not in manifest:
            continue
        row = score_against(reader, matrix, manifest, spec.name, lin[0], lin[1], n_boot=n_boot)
        if row is not None:
            rows.append(row)
    return rows
