"""The study's findings table: one row per finding, the value of every seed, their mean and spread, and
the reference study's number beside it (ACLArena, arXiv 2609.23989; labelled, never in place of the run's).

Pure bookkeeping over the steps' typed results (:func:`aclarena.analysis.study.run_study` runs them), each
checkpoint picked by its manifest fields (:class:`Trained`: kind, domain, phase, replicate): the
forgetting and displacement rows (:func:`findings`), the drift signatures (:func:`signature_rows`), the
consolidations (:func:`consolidation_rows`) and the task-vector cosines (:func:`cosine_rows`).
docs/study.md defines every row.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aclarena.analysis._common import num
from aclarena.diagnostics.signatures import DEFAULT_FIRST_K
from aclarena.train.naming import oracle_name, seed0_name, seq_name

if TYPE_CHECKING:
    from aclarena.analysis._common import Made
    from aclarena.analysis.eval import EvalResult
    from aclarena.analysis.signatures import Signed


class Phase(Protocol):
    """What :class:`Trained` reads of a trained phase (:class:`aclarena.train.plan.Job` is one): its manifest
    fields and its replicate."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def domain(self) -> str | None: ...

    @property
    def phase(self) -> str | None: ...

    @property
    def parent(self) -> str | None: ...

    @property
    def replicate(self) -> int: ...


@dataclass(frozen=True)
class Trained:
    """The checkpoints a run's curricula trained, by their manifest fields: per (kind, domain, replicate) of a
    chain stage (``stage``) or an oracle (``oracle``), the stage's end and the end of its SFT phase when an RL
    phase follows it. Lookups of what was not trained are None."""

    ends: Mapping[tuple[str, str, int], str]
    sft_ends: Mapping[tuple[str, str, int], str]

    @classmethod
    def of(cls, phases: Iterable[Phase]) -> Trained:
        groups: dict[tuple[str, str, int], list[Phase]] = {}
        for p in phases:
            if p.kind in ("stage", "oracle") and p.domain is not None:
                groups.setdefault((p.kind, p.domain, p.replicate), []).append(p)
        ends: dict[tuple[str, str, int], str] = {}
        sft_ends: dict[tuple[str, str, int], str] = {}
        for key, members in groups.items():
            parents = {p.parent for p in members}
            last = [p for p in members if p.name not in parents]  # the phase no other phase of the stage follows
            if len(last) == 1:
                ends[key] = last[0].name
            sft = [p.name for p in members if p.phase == "sft" and p.name in parents]
            if len(sft) == 1:
                sft_ends[key] = sft[0]
        return cls(ends, sft_ends)

    def end(self, kind: str, domain: str, replicate: int = 0) -> str | None:
        """The end of ``domain``'s stage (``kind`` ``stage``: the chain's; ``oracle``: its single-task oracle)."""
        return self.ends.get((kind, domain, replicate))

    def sft_end(self, kind: str, domain: str, replicate: int = 0) -> str | None:
        """The end of the SFT phase of ``domain``'s stage, when an RL phase follows it."""
        return self.sft_ends.get((kind, domain, replicate))


class TokenDriftRow(Protocol):
    """What the findings read of one checkpoint's token drift
    (:class:`~aclarena.diagnostics.token_drift.DriftSummary` is one)."""

    @property
    def kl_share_high(self) -> float: ...

    @property
    def barely_moved_low(self) -> float: ...

# The study's numbers (ACLArena, arXiv 2609.23989; design.md), beside each row.
STUDY = {
    "ecom_math": "AIME 23.3 -> 6.0",
    "ecom_search": "NQ 45.2 -> 14.6",
    "sft_rl": "SFT moves parameters 3-7x more than RL",
    "kl_share_high": "forgetting concentrates at ~6% high-entropy positions",
    "barely_moved_low": "~94% of low-entropy positions barely move",
    "mix_cos": "0.77 (oracle-mix SFT from the base vs from the sequential end)",
    "unrelated_cos": "0.05 (unrelated SFT tasks)",
}



# The study's in-domain table (design.md; Qwen3-8B-Base, mean of three runs): one suite per domain.
STUDY_SUITE = {"math": "AIME26", "search": "NQ", "ecom": "τ³-Retail", "if": "IF-Eval"}



STUDY_TABLE = {
    "seq-end": {"math": 10.21, "search": 33.5, "ecom": 29.6, "if": 84.8},
    "oracle": {"math": 25.83, "search": 49.9, "ecom": 33.2, "if": 86.2},
    "mmopd": {"math": 21.25, "search": 45.2, "ecom": 27.7, "if": 84.6},
    "sdft": {"math": 22.29, "search": 48.3, "ecom": 22.3, "if": 53.6},
    "merge-uniform": {"math": 14.79, "search": 39.0, "ecom": 11.8, "if": 74.6},
    "mle": {"math": 21.04, "search": 49.7, "ecom": 32.9, "if": 85.0},
}



#: the drift-signature measures reported per update (aclarena.diagnostics.signatures.MEASURES), their labels
SIGNATURE_ROWS = (
    ("kl_share_high", "share of KL at the top 6% entropy positions", "kl_share_high"),
    ("barely_moved_low", "low-entropy positions that barely move", "barely_moved_low"),
    ("kl_share_first_k", f"share of KL at the first {DEFAULT_FIRST_K} reply tokens", None),
)



SIGNATURE_KINDS = (("sft", "SFT phase"), ("rl", "RL phase"), ("stage", "whole stage"))



def mean_spread(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1) of the finite values; spread None below two values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)



def finding_row(finding: str, quantity: str, study: str | None, values: Sequence[float | None],
                digits: int = 2, intervals: Sequence[Sequence[float | None] | None] | None = None) -> dict[str, Any]:
    """One findings row; ``intervals``: per seed, that seed's own interval ``[low, high]`` (or None)."""
    m, s = mean_spread(values)
    row: dict[str, Any] = {"finding": finding, "quantity": quantity, "study": study,
                           "values": [num(v) for v in values], "mean": m, "spread": s, "digits": digits}
    if intervals is not None:
        row["intervals"] = [None if iv is None else [num(iv[0]), num(iv[1])] for iv in intervals]
    return row



def cells_of(*evals: EvalResult | None) -> dict[tuple[str, str], float]:
    """(checkpoint, suite) -> greedy mean, from ``eval`` results (None: a step that failed)."""
    out: dict[tuple[str, str], float] = {}
    for e in evals:
        if e is not None:
            out.update(e.scores())
    return out



def findings(seeds: Sequence[int], stages: Sequence[str], trained: Trained, cells: dict[tuple[str, str], float],
             norms: Mapping[str, float | None], drift: Mapping[int, TokenDriftRow]) -> list[dict[str, Any]]:
    """The findings rows from per-replicate measurements (pure: tested on synthetic inputs).

    Args:
        seeds: the replicates (0, 1, ...), their names suffixed ``-s<r>`` for r >= 1.
        stages: the curriculum's domains in order.
        trained: the checkpoints of every replicate, by kind, domain and phase.
        cells: (checkpoint, suite) -> greedy accuracy.
        norms: chain checkpoint -> ‖Δθ‖ of its update (:meth:`aclarena.analysis.displacement.DisplacementResult.stage_norms`).
        drift: replicate -> the token drift (``kl_share_high``, ``barely_moved_low``) of the
            checkpoint after the ecom stage, on that replicate's seq-math generations.
    """
    rows: list[dict[str, Any]] = []
    reps = list(range(len(seeds)))
    if "ecom" in stages and stages.index("ecom") > 0:
        before = stages[stages.index("ecom") - 1]
        for dom, key in (("math", "ecom_math"), ("search", "ecom_search")):
            if dom not in stages[: stages.index("ecom")]:
                continue
            for when, stage in (("before", before), ("after", "ecom")):
                ck = seq_name(stage)
                vals = [_cell(cells, trained.end("stage", stage, r), f"{dom}/id") for r in reps]
                rows.append(finding_row("the ecom stage's effect on earlier skills",
                                        f"{dom}/id {when} the ecom stage ({ck})", STUDY[key] if when == "after" else None,
                                        vals))
    for d in stages:
        vals = []
        for r in reps:
            sft, rl = _get(norms, trained.sft_end("stage", d, r)), _get(norms, trained.end("stage", d, r))
            vals.append(sft / rl if sft is not None and rl is not None and rl != 0 else None)
        if any(v is not None for v in vals) or any(trained.sft_end("stage", d, r) in norms for r in reps):
            rows.append(finding_row("SFT vs RL displacement", f"{d}: ||dθ|| SFT / ||dθ|| RL", STUDY["sft_rl"], vals, 1))
    if drift:
        rows.append(finding_row("token drift at high-entropy positions",
                                "share of KL at the top 6% entropy positions (seq-ecom on seq-math's generations)",
                                STUDY["kl_share_high"], [_drift(drift, r, "kl_share_high") for r in reps]))
        rows.append(finding_row("token drift at high-entropy positions",
                                "low-entropy positions that barely move (seq-ecom on seq-math's generations)",
                                STUDY["barely_moved_low"], [_drift(drift, r, "barely_moved_low") for r in reps]))
    for d in stages:
        vals = [_cell(cells, trained.end("stage", d, r), f"{d}/id") for r in reps]
        orc = [_cell(cells, trained.end("oracle", d, r), f"{d}/id") for r in reps]
        if any(v is not None for v in vals + orc):
            rows.append(finding_row("in-domain scores", f"{d}/id after its stage ({seq_name(d)})", None, vals))
            rows.append(finding_row("in-domain scores", f"{d}/id of its oracle ({oracle_name(d)})", None, orc))
    return rows



def _get(values: Mapping[str, float | None], checkpoint: str | None) -> float | None:
    return None if checkpoint is None else values.get(checkpoint)


def _cell(cells: Mapping[tuple[str, str], float], checkpoint: str | None, suite: str) -> float | None:
    return None if checkpoint is None else cells.get((checkpoint, suite))


def _drift(drift: Mapping[int, TokenDriftRow], r: int, measure: str) -> float | None:
    row = drift.get(r)
    return None if row is None else num(getattr(row, measure))


def signature_rows(seeds: Sequence[int], stages: Sequence[str], trained: Trained, signed: Sequence[Signed],
                   made: Sequence[Made] = ()) -> list[dict[str, Any]]:
    """The drift signature of each phase, stage and consolidation, per seed with its interval (pure).

    ``signed``: the signed updates (:meth:`aclarena.analysis.signatures.SignaturesResult.signed`: update, kind, child, domain,
    each measure's value and interval). Per domain and update kind (the SFT phase into ``seq-<d>-sft``, the RL phase
    into ``seq-<d>``, the whole stage ``..seq-<d>``), each of :data:`SIGNATURE_ROWS`; per consolidation
    in ``made`` (a shared-weight output), the KL share at the top 6% on each domain. A row's
    ``intervals`` hold each seed's 95% bootstrap interval over sequences.
    """
    reps = list(range(len(seeds)))
    by: dict[tuple[str, str, str], Signed] = {}
    for row in signed:
        by[(row.kind, row.child, row.domain)] = row
    rows: list[dict[str, Any]] = []
    finding = "drift signature of each update (on its parent's own generations)"

    def add(label: str, got: list[Signed | None], measures: Sequence[tuple[str, str, str | None]]) -> None:
        if not any(got):
            return
        for key, what, study in measures:
            rows.append(finding_row(finding, f"{label}: {what}", STUDY[study] if study else None,
                                    [None if g is None else g.value(key) for g in got],
                                    intervals=[None if g is None else g.interval(key) for g in got]))

    for d in stages:
        for kind, label in SIGNATURE_KINDS:
            got = []
            for r in reps:
                child = trained.sft_end("stage", d, r) if kind == "sft" else trained.end("stage", d, r)
                got.append(None if child is None else by.get((kind, child, d)))
            add(f"{d} {label}", got, SIGNATURE_ROWS)
    labels: dict[str, dict[int, str]] = {}
    for o in made:
        if o.method != "mle":
            labels.setdefault(seed0_name(o.checkpoint, o.replicate), {})[o.replicate] = o.checkpoint
    for label, per in labels.items():
        for d in stages:
            add(f"{label} on {d}", [by.get(("consolidation", per.get(r, ""), d)) for r in reps], SIGNATURE_ROWS[:1])
    return rows



def _study_cell(key: str, domain: str) -> str | None:
    v = STUDY_TABLE.get(key, {}).get(domain)
    return None if v is None else f"{STUDY_SUITE[domain]} {v:g}"



def consolidation_rows(seeds: Sequence[int], stages: Sequence[str], trained: Trained,
                       cells: dict[tuple[str, str], float], made: Sequence[Made]) -> list[dict[str, Any]]:
    """Each consolidation against the sequential end and the oracles, per domain (pure).

    ``made``: the consolidations' outputs (:class:`~aclarena.analysis._common.Made`: checkpoint, method,
    replicate, domain). A shared-weight
    output (``merge-uniform-s1``) is scored on every domain's in-domain suite; MLE on domain ``d``
    is its expert ``mle-d`` on ``d/id``. Per (consolidation, domain): its score, and its score minus
    the sequential end's and minus the domain oracle's, paired per seed (a seed missing either is null).
    """
    reps = list(range(len(seeds)))
    end = seq_name(stages[-1])
    # label -> replicate -> domain -> checkpoint
    by: dict[str, dict[int, dict[str, str]]] = {}
    for o in made:
        r = o.replicate
        if o.method == "mle":
            if o.domain:
                by.setdefault("mle", {}).setdefault(r, {})[o.domain] = o.checkpoint
        else:
            label = seed0_name(o.checkpoint, r)
            by.setdefault(label, {}).setdefault(r, {}).update({d: o.checkpoint for d in stages})
    rows: list[dict[str, Any]] = []
    if not by:
        return rows
    finding = "consolidation vs the sequential end and the oracles"
    for d in stages:
        rows.append(finding_row(finding, f"{d}/id of the sequential end ({end})", _study_cell("seq-end", d),
                                [_cell(cells, trained.end("stage", stages[-1], r), f"{d}/id") for r in reps]))
    for label, per in by.items():
        for d in stages:
            score = [cells.get((per.get(r, {}).get(d, ""), f"{d}/id")) for r in reps]
            seq = [_cell(cells, trained.end("stage", stages[-1], r), f"{d}/id") for r in reps]
            orc = [_cell(cells, trained.end("oracle", d, r), f"{d}/id") for r in reps]
            what = f"{label} (expert mle-{d})" if label == "mle" else label
            rows.append(finding_row(finding, f"{d}/id of {what}", _study_cell(label, d), score))
            rows.append(finding_row(finding, f"{d}/id of {label} minus the sequential end", None,
                                    [None if a is None or b is None else a - b for a, b in zip(score, seq, strict=True)]))
            rows.append(finding_row(finding, f"{d}/id of {label} minus {oracle_name(d)}", None,
                                    [None if a is None or b is None else a - b for a, b in zip(score, orc, strict=True)]))
    return rows



def cosine_rows(seeds: Sequence[int], mix: dict[int, float | None], unrelated: dict[int, list[float | None]]
                ) -> list[dict[str, Any]]:
    """The task-vector rows (pure): the oracle-mix SFT cosine per seed, and per seed the mean cosine
    over every pair of unrelated SFT directions (``vector_pairs``)."""
    reps = list(range(len(seeds)))
    finding = "task-vector cosines"
    rows = [finding_row(finding, "cos(sdft - base, sdft-from-end - seq end): oracle-mix SFT from the base "
                        "and from the sequential end", STUDY["mix_cos"], [mix.get(r) for r in reps])]
    vals = []
    for r in reps:
        xs = [v for v in unrelated.get(r, []) if v is not None and math.isfinite(v)]
        vals.append(statistics.fmean(xs) if xs else None)
    pairs = max((len(v) for v in unrelated.values()), default=0)
    rows.append(finding_row(finding, f"cos(oracle-a-sft - base, oracle-b-sft - base), mean over the {pairs} "
                            "pairs of domains a != b: unrelated SFT tasks", STUDY["unrelated_cos"], vals))
    return rows  # both rows always: a value that could not be measured is null, and `errors` says why
