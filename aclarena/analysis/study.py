"""The study's findings over several seeds: train, evaluate, analyse, one findings table.

:func:`run_study` trains ``seeds`` curricula of one config from one shared base
(``train --seeds N``: replicate ``r`` appends ``-s<r>`` to its names), evaluates every stage end,
SFT end and oracle in domain (and the chain on ``general``), freezes each replicate's seq-math
generations and scores its later checkpoints on them (``tokens``), measures parameter
displacement, consolidates each replicate (``consolidate``: the merges by default, SDFT, MLE and
MMOPD with ``--full``) and scores the outputs, measures the task-vector cosines of oracle-mix SFT
(SDFT from the base and from the sequential end) and of unrelated SFT tasks (oracle SFT phases of
two domains), validates the drift monitor on held-out seeds (the lead time of every replicate's
ecom stage; thresholds fitted on the first seed only: :func:`validation_report`), then writes
``findings.json`` (strict JSON) in the run folder: one row per finding, the value of every seed,
their mean and sample standard deviation, and the study's number beside it; the validation; each
part's wall time. Every part is resumable (finished phases, eval cells, token scores,
consolidations, Grams and lead times are reused on a rerun) and timed (``part_times``).
docs/study.md defines every row.

Each analysis is its verb's function in the analysis layer, with the verb's defaults
(:mod:`aclarena.analysis.steps`); a step that fails is recorded in ``errors`` with the line the verb
would print, and the other steps go on.
"""

from __future__ import annotations

import functools
import math
import os
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.analysis import steps as analyses
from aclarena.analysis.steps import Parts
from aclarena.diagnostics.signatures import DEFAULT_FIRST_K
from aclarena.errors import AclarenaError
from aclarena.train.naming import oracle_name, replicate_suffix, seq_name

FINDINGS_FILE = "findings.json"
#: ``verb(name, verb, fn)``: run one step, recording a failure under ``name`` (see :func:`run_study`)
Step = Callable[[str, str, Callable[[], Any]], Any]

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
#: ``--consolidations`` by default: the merges (seconds); ``--full`` adds the methods that train
CHEAP_CONSOLIDATIONS = ("merge-uniform", "merge-ties")
FULL_CONSOLIDATIONS = ("sdft", "mle", "mmopd")
#: the monitor's predictors validated on held-out seeds (aclarena.train.lead_time.PREDICTORS' metrics)
PREDICTORS = ("kl_high", "flip_high", "kl_all", "fkl", "razor_fkl", "loss")
PARTS = ("train", "eval", "tokens", "displacement", "consolidate", "signatures", "vectors", "validation")
#: the drift-signature measures reported per update (aclarena.diagnostics.signatures.MEASURES), their labels
SIGNATURE_ROWS = (
    ("kl_share_high", "share of KL at the top 6% entropy positions", "kl_share_high"),
    ("barely_moved_low", "low-entropy positions that barely move", "barely_moved_low"),
    ("kl_share_first_k", f"share of KL at the first {DEFAULT_FIRST_K} reply tokens", None),
)
SIGNATURE_KINDS = (("sft", "SFT phase"), ("rl", "RL phase"), ("stage", "whole stage"))


@dataclass
class StudyResult:
    """What :func:`run_study` found: per-seed values and the findings rows."""

    out: Path
    seeds: list[int]
    rows: list[dict[str, Any]]
    part_times: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)
    validation: dict[str, Any] | None = None
    consolidations: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "rows": self.rows, "part_times": self.part_times, "errors": self.errors,
                "consolidations": self.consolidations, "validation": self.validation}

    def to_pandas(self) -> Any:
        """DataFrame, one row per finding: finding, quantity, study, values (per seed), mean, spread."""
        from aclarena.analysis._common import frame

        return frame(self.rows)


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
                           "values": [_finite(v) for v in values], "mean": m, "spread": s, "digits": digits}
    if intervals is not None:
        row["intervals"] = [None if iv is None else [_finite(iv[0]), _finite(iv[1])] for iv in intervals]
    return row


def _finite(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


suffix = replicate_suffix


def cells_of(*evals: Any) -> dict[tuple[str, str], float]:
    """(checkpoint, suite) -> greedy mean, from ``eval --json`` outputs."""
    out: dict[tuple[str, str], float] = {}
    for e in evals:
        for c in (e or {}).get("cells", []) if isinstance(e, dict) else []:
            if c.get("status") == "ok" and c.get("mean") is not None:
                out[(c["checkpoint"], c["suite"])] = float(c["mean"])
    return out


def findings(seeds: Sequence[int], stages: Sequence[str], cells: dict[tuple[str, str], float],
             updates: Sequence[dict[str, Any]], drift: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings rows from per-replicate measurements (pure: tested on synthetic inputs).

    Args:
        seeds: the replicates (0, 1, ...), their names suffixed ``-s<r>`` for r >= 1.
        stages: the curriculum's domains in order.
        cells: (checkpoint, suite) -> greedy accuracy.
        updates: ``displacement --json``'s ``updates`` (checkpoint, parent, phase, kind, domain, norm).
        drift: replicate -> the ``tokens`` row (``kl_share_high``, ``barely_moved_low``) of the
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
                vals = [cells.get((seq_name(stage, r), f"{dom}/id")) for r in reps]
                rows.append(finding_row("the ecom stage's effect on earlier skills",
                                        f"{dom}/id {when} the ecom stage ({ck})", STUDY[key] if when == "after" else None,
                                        vals))
    norms = {u["checkpoint"]: u.get("norm") for u in updates if u.get("kind") == "stage"}
    for d in stages:
        vals = []
        for r in reps:
            sft, rl = norms.get(seq_name(d, r, "sft")), norms.get(seq_name(d, r))
            vals.append(sft / rl if sft is not None and rl not in (None, 0) else None)
        if any(v is not None for v in vals) or any(seq_name(d, r, "sft") in norms for r in reps):
            rows.append(finding_row("SFT vs RL displacement", f"{d}: ||dθ|| SFT / ||dθ|| RL", STUDY["sft_rl"], vals, 1))
    if drift:
        rows.append(finding_row("token drift at high-entropy positions",
                                "share of KL at the top 6% entropy positions (seq-ecom on seq-math's generations)",
                                STUDY["kl_share_high"], [(drift.get(r) or {}).get("kl_share_high") for r in reps]))
        rows.append(finding_row("token drift at high-entropy positions",
                                "low-entropy positions that barely move (seq-ecom on seq-math's generations)",
                                STUDY["barely_moved_low"], [(drift.get(r) or {}).get("barely_moved_low") for r in reps]))
    for d in stages:
        vals = [cells.get((seq_name(d, r), f"{d}/id")) for r in reps]
        orc = [cells.get((oracle_name(d, r), f"{d}/id")) for r in reps]
        if any(v is not None for v in vals + orc):
            rows.append(finding_row("in-domain scores", f"{d}/id after its stage ({seq_name(d)})", None, vals))
            rows.append(finding_row("in-domain scores", f"{d}/id of its oracle ({oracle_name(d)})", None, orc))
    return rows


def signature_rows(seeds: Sequence[int], stages: Sequence[str], signed: Sequence[dict[str, Any]],
                   made: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The drift signature of each phase, stage and consolidation, per seed with its interval (pure).

    ``signed``: ``signatures --json``'s ``updates`` rows (update, kind, child, domain, each measure with
    ``_low`` / ``_high``). Per domain and update kind (the SFT phase into ``seq-<d>-sft``, the RL phase
    into ``seq-<d>``, the whole stage ``..seq-<d>``), each of :data:`SIGNATURE_ROWS`; per consolidation
    in ``made`` (a shared-weight output), the KL share at the top 6% on each domain. A row's
    ``intervals`` hold each seed's 95% bootstrap interval over sequences.
    """
    reps = list(range(len(seeds)))
    by: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in signed:
        by[(str(row.get("kind")), str(row.get("child")), str(row.get("domain")))] = row
    rows: list[dict[str, Any]] = []
    finding = "drift signature of each update (on its parent's own generations)"

    def add(label: str, got: list[dict[str, Any] | None], measures: Sequence[tuple[str, str, str | None]]) -> None:
        if not any(got):
            return
        for key, what, study in measures:
            rows.append(finding_row(finding, f"{label}: {what}", STUDY[study] if study else None,
                                    [None if g is None else g.get(key) for g in got],
                                    intervals=[None if g is None else [g.get(f"{key}_low"), g.get(f"{key}_high")]
                                               for g in got]))

    for d in stages:
        for kind, label in SIGNATURE_KINDS:
            got = []
            for r in reps:
                child = seq_name(d, r, "sft" if kind == "sft" else None)
                got.append(by.get((kind, child, d)))
            add(f"{d} {label}", got, SIGNATURE_ROWS)
    labels: dict[str, dict[int, str]] = {}
    for o in made:
        if o.get("method") != "mle":
            r = int(o.get("replicate", 0))
            labels.setdefault(_stem(o["checkpoint"], r), {})[r] = o["checkpoint"]
    for label, per in labels.items():
        for d in stages:
            add(f"{label} on {d}", [by.get(("consolidation", per.get(r, ""), d)) for r in reps], SIGNATURE_ROWS[:1])
    return rows


def _study_cell(key: str, domain: str) -> str | None:
    v = STUDY_TABLE.get(key, {}).get(domain)
    return None if v is None else f"{STUDY_SUITE[domain]} {v:g}"


def _stem(name: str, r: int) -> str:
    sfx = suffix(r)
    return name[: -len(sfx)] if sfx and name.endswith(sfx) else name


def consolidation_rows(seeds: Sequence[int], stages: Sequence[str], cells: dict[tuple[str, str], float],
                       made: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each consolidation against the sequential end and the oracles, per domain (pure).

    ``made``: ``consolidate --json`` outputs (checkpoint, method, replicate, domain). A shared-weight
    output (``merge-uniform-s1``) is scored on every domain's in-domain suite; MLE on domain ``d``
    is its expert ``mle-d`` on ``d/id``. Per (consolidation, domain): its score, and its score minus
    the sequential end's and minus the domain oracle's, paired per seed (a seed missing either is null).
    """
    reps = list(range(len(seeds)))
    end = seq_name(stages[-1])
    # label -> replicate -> domain -> checkpoint
    by: dict[str, dict[int, dict[str, str]]] = {}
    for o in made:
        r = int(o.get("replicate", 0))
        if o.get("method") == "mle":
            if o.get("domain"):
                by.setdefault("mle", {}).setdefault(r, {})[o["domain"]] = o["checkpoint"]
        else:
            label = _stem(o["checkpoint"], r)
            by.setdefault(label, {}).setdefault(r, {}).update({d: o["checkpoint"] for d in stages})
    rows: list[dict[str, Any]] = []
    if not by:
        return rows
    finding = "consolidation vs the sequential end and the oracles"
    for d in stages:
        rows.append(finding_row(finding, f"{d}/id of the sequential end ({end})", _study_cell("seq-end", d),
                                [cells.get((seq_name(stages[-1], r), f"{d}/id")) for r in reps]))
    for label, per in by.items():
        for d in stages:
            score = [cells.get((per.get(r, {}).get(d, ""), f"{d}/id")) for r in reps]
            seq = [cells.get((seq_name(stages[-1], r), f"{d}/id")) for r in reps]
            orc = [cells.get((oracle_name(d, r), f"{d}/id")) for r in reps]
            what = f"{label} (expert mle-{d})" if label == "mle" else label
            rows.append(finding_row(finding, f"{d}/id of {what}", _study_cell(label, d), score))
            rows.append(finding_row(finding, f"{d}/id of {label} minus the sequential end", None,
                                    [None if a is None or b is None else a - b for a, b in zip(score, seq, strict=True)]))
            rows.append(finding_row(finding, f"{d}/id of {label} minus {oracle_name(d)}", None,
                                    [None if a is None or b is None else a - b for a, b in zip(score, orc, strict=True)]))
    return rows


def vector_pairs(stages: Sequence[str], replicates: int, names: set[str], base: str = "base", *,
                 sdft: Mapping[int, Mapping[str, str]] | None = None) -> tuple[dict[int, str], dict[int, list[str]]]:
    """The ``vectors --pair`` texts of the cosine rows, per replicate (docs/study.md defines them).

    * mix: ``θ_sdft − θ_base`` against ``θ_sdft-from-end − θ_end``: the same domain-balanced SFT on the
      oracles' rollouts (SDFT, the study's oracle-mix SFT) run from the base and from the sequential end;
      ``sdft``: replicate -> {"base": checkpoint, "end": checkpoint}, what ``consolidate --method sdft
      --start base|end`` reported writing (its outputs, not names guessed from its naming rule);
    * unrelated: ``θ_oracle-a-sft − θ_base`` against ``θ_oracle-b-sft − θ_base`` for every pair of
      domains a != b: SFT on two different domains' data from the same start.
    """
    mix: dict[int, str] = {}
    unrelated: dict[int, list[str]] = {}
    for r in range(replicates):
        end, made = seq_name(stages[-1], r), (sdft or {}).get(r, {})
        if made.get("base") in names and made.get("end") in names and end in names:
            mix[r] = f"{made['base']} - {base}:{made['end']} - {end}"
        sft = [oracle_name(d, r, "sft") for d in stages if oracle_name(d, r, "sft") in names]
        pairs = [f"{a} - {base}:{b} - {base}" for i, a in enumerate(sft) for b in sft[i + 1:]]
        if pairs:
            unrelated[r] = pairs
    return mix, unrelated


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


def warning_series(seed: int, lead: dict[str, Any]) -> tuple[list[Any], list[str]]:
    """The :class:`~aclarena.diagnostics.warning_validation.WarningSeries` of one seed's lead-time
    measurement (``monitor --lead-time``'s result), and the domains whose drop could never be
    significant (too few items solved at the stage start: they are left out of the held-out counts).

    Steps are the ground-truth evaluations; each predictor is taken as of each step
    (:func:`~aclarena.diagnostics.warning_validation.as_of`); the drop is the accuracy at the stage
    start minus the accuracy at the step; the drop step is the first Holm-significant drop.
    """
    from aclarena.diagnostics.warning_validation import WarningSeries, as_of

    out: list[WarningSeries] = []
    unreachable: list[str] = []
    ser = lead.get("series") or {}
    reach = ((lead.get("drop_test") or {}).get("domains") or {})
    for domain, points in (lead.get("ground_truth") or {}).items():
        if not points:
            continue
        steps = [int(p["step"]) for p in points]
        start = float(points[0]["accuracy"])
        drop = [start - float(p["accuracy"]) for p in points]
        first = next((int(p["step"]) for p in points[1:] if p.get("significant")), None)
        probe = ser.get(domain) or {}
        preds: dict[str, list[float]] = {}
        for m in ("kl_high", "flip_high", "kl_all", "fkl"):
            if m in probe:
                preds[m] = as_of(probe.get("step", []), probe[m], steps)
        if "razor" in ser:
            preds["razor_fkl"] = as_of(ser["razor"].get("step", []), ser["razor"].get("fkl", []), steps)
        if "train" in ser:
            preds["loss"] = as_of(ser["train"].get("step", []), ser["train"].get("loss", []), steps)
        out.append(WarningSeries(seed=seed, domain=domain, steps=steps, predictors=preds, drop=drop, drop_step=first))
        if not (reach.get(domain) or {}).get("reachable", True):
            unreachable.append(domain)
    return out, unreachable


def monitor_grid_series(run_id: int, lead: dict[str, Any]) -> list[Any]:
    """The :class:`~aclarena.diagnostics.warning_validation.WarningSeries` of one lead-time result on the
    monitor's own grid (every check), for :func:`~aclarena.diagnostics.warning_validation.compare`.

    A predictor then warns at the check where it crosses, not at the next ground-truth evaluation
    (:func:`warning_series` puts everything on the ground truth's steps). Predictors: every scalar of
    the domain's probe set, ``razor_fkl`` (the forward KL on the stage's own prompts) and
    ``loss_fall``: the first logged training loss minus the loss as of the step (how far the new task
    has been learned). The drop is the accuracy lost since the stage start as of each step; the drop
    step is the first Holm-significant drop. ``run_id`` goes into the series' ``seed`` field (the key
    of the fit / held-out split).
    """
    from aclarena.diagnostics.warning_validation import WarningSeries, as_of

    out: list[Any] = []
    ser = lead.get("series") or {}
    for domain, points in (lead.get("ground_truth") or {}).items():
        probe = ser.get(domain) or {}
        steps = [int(x) for x in probe.get("step", [])]
        if not points or len(steps) < 2:
            continue
        start = float(points[0]["accuracy"])
        drop = as_of([p["step"] for p in points], [start - float(p["accuracy"]) for p in points], steps)
        first = next((int(p["step"]) for p in points[1:] if p.get("significant")), None)
        preds: dict[str, list[float]] = {m: [math.nan if v is None else float(v) for v in col]
                                         for m, col in probe.items() if m != "step"}
        if "razor" in ser:
            preds["razor_fkl"] = as_of(ser["razor"].get("step", []), ser["razor"].get("fkl", []), steps)
        train = ser.get("train") or {}
        losses = [float(x) for x in train.get("loss", [])]
        if losses:
            preds["loss_fall"] = [losses[0] - v if math.isfinite(v) else math.nan
                                  for v in as_of(train.get("step", []), losses, steps)]
        out.append(WarningSeries(seed=run_id, domain=domain, steps=steps, predictors=preds, drop=drop, drop_step=first))
    return out


def validation_report(leads: dict[int, dict[str, Any]], fit_seed: int, *, seeds: Sequence[int],
                      errors: dict[int, str] | None = None) -> dict[str, Any]:
    """Thresholds fitted on ``fit_seed`` only, reported on the other seeds (pure; docs/study.md).

    ``leads``: seed -> its lead-time result. Series whose drop could never be significant are left
    out of lead times, false alarms and misses (a domain that could not drop cannot be a false alarm)
    but kept in R², which is over every evaluation of every seed. ``status`` is ``ok``, or
    ``not run`` with a one-line ``reason`` (fewer than 2 seeds measured, or no series left to judge).
    """
    from aclarena.diagnostics.warning_validation import r_squared, validate

    errors = errors or {}
    out: dict[str, Any] = {"status": "not run", "reason": None, "fit_seeds": [fit_seed],
                           "held_out_seeds": [s for s in seeds if s != fit_seed and s in leads],
                           "predictors": [], "excluded": [], "notes": [f"seed {s}: {e}" for s, e in errors.items()]}
    if len(seeds) < 2:
        out["reason"] = (f"the held-out validation needs at least 2 seeds (fit on seed {fit_seed}, report on the "
                         f"others); this study has {len(seeds)}: rerun with --seeds 3")
        return out
    def not_measured(which: list[int]) -> str:
        return (f"the lead time was not measured on seed(s) {', '.join(map(str, which))}"
                + (f" ({errors[which[0]]})" if which and which[0] in errors else ""))

    if fit_seed not in leads:
        out["reason"] = not_measured([fit_seed])
        return out
    every: list[Any] = []
    kept: list[Any] = []
    for seed in sorted(leads):
        series, unreachable = warning_series(seed, leads[seed])
        every += series
        kept += [x for x in series if x.domain not in unreachable]
        out["excluded"] += [{"seed": seed, "domain": d, "why": "too few items solved at the stage start for any "
                             "drop to be significant"} for d in unreachable]
    fit = [x for x in kept if x.seed == fit_seed]
    held = [x for x in kept if x.seed != fit_seed]
    if not fit:
        out["reason"] = (f"no drop could reach significance on the fit seed {fit_seed} (too few items solved at the "
                         "stage start), so no threshold can be fitted; raise --lead-n")
        return out
    if len(leads) < 2:
        out["reason"] = not_measured([s for s in seeds if s not in leads])
        return out
    if not held:
        out["reason"] = ("no drop could reach significance on the held-out seeds (too few items solved at the stage "
                         "start); raise --lead-n")
        return out
    reports = validate(kept, PREDICTORS, fit_seeds=[fit_seed])
    rows = []
    for rep in reports:
        d = rep.to_dict()
        d["r2"] = r_squared([v for x in every for v in x.predictors.get(rep.predictor, [math.nan] * len(x.steps))],
                            [v for x in every for v in x.drop])
        d["points"] = sum(len(x.steps) for x in every)
        rows.append(d)
    out.update(status="ok", predictors=rows, series={"fit": len(fit), "held_out": len(held),
                                                     "held_out_drops": sum(x.drop_step is not None for x in held)})
    if all(x.drop_step is not None for x in kept):
        out["notes"].append("every series dropped significantly (fit and held out), so false alarms could not occur "
                            "and the fit had nothing to keep a threshold from warning too early: a threshold at or "
                            "below a predictor's first value warns at the first evaluation")
    if not any(x.drop_step is not None for x in fit):
        out["notes"].append(f"seed {fit_seed} had no significant drop: no threshold could be fitted, so no predictor "
                            "warns on the held-out seeds")
    return out


def lead_defaults(cfg: Any) -> tuple[int, int]:
    """Ground-truth items and evaluation interval of the lead-time runs (the demo's: 20 items every 10
    steps; 6 every 2 on the tiny preset, the fewest whose total loss can pass Holm there)."""
    return (6, 2) if getattr(getattr(cfg, "base", None), "preset", None) == "tiny" else (20, 10)


def parse_consolidations(text: str | None, full: bool) -> list[str]:
    """``--consolidations`` (comma-separated methods; default the merges) plus, with ``--full``, SDFT, MLE, MMOPD."""
    from aclarena.consolidate.methods import get_method

    if text is None:
        names = list(CHEAP_CONSOLIDATIONS)
    elif text.strip() == "none":
        names = []
    else:
        names = [x.strip() for x in text.split(",") if x.strip()]
        if not names:
            raise AclarenaError(f"--consolidations {text!r} names no method; give e.g. merge-uniform,sdft, or none")
    for m in names:
        get_method(m)  # unknown names: one line with a did-you-mean
    if full:
        names += [m for m in FULL_CONSOLIDATIONS if m not in names]
    # MLE trains its experts on the SDFT backbone: make SDFT first
    if "mle" in names and "sdft" in names and names.index("sdft") > names.index("mle"):
        names.remove("sdft")
        names.insert(names.index("mle"), "sdft")
    return names


def _check_options(cfg: Any, seeds: int, n: int, lead_n: int | None, lead_every: int | None,
                   lead_stage: str | None) -> tuple[int, int]:
    """One line per bad option of :func:`run_study`, before anything runs; the validation's ``(lead_n, lead_every)``."""
    if seeds < 1:
        raise AclarenaError(f"--seeds must be >= 1, got {seeds}")
    if n < 1:
        raise AclarenaError(f"-n must be >= 1, got {n}")
    d_n, d_every = lead_defaults(cfg)
    lead_n = d_n if lead_n is None else lead_n
    lead_every = d_every if lead_every is None else lead_every
    if lead_n < 1 or lead_every < 1:
        raise AclarenaError(f"--lead-n and --lead-every must be >= 1, got {lead_n} and {lead_every}")
    stages = [s.domain for s in cfg.stages]
    if lead_stage is not None and lead_stage not in stages[1:]:
        raise AclarenaError(f"--lead-stage {lead_stage}: not a stage after the first of this curriculum; "
                            f"name one of {', '.join(stages[1:]) or '(none: one stage)'}")
    return lead_n, lead_every


def run_study(cfg: Any, out: str | os.PathLike[str], *, seeds: int, n: int = 100,
              show_progress: bool = False, config_text: str | None = None,
              on_part: Callable[[str, float], None] | None = None,
              on_start: Callable[[str], None] | None = None,
              consolidations: Sequence[str] = CHEAP_CONSOLIDATIONS, vectors: bool = True,
              validation: bool = True, lead_n: int | None = None, lead_every: int | None = None,
              lead_stage: str | None = None, command: str | None = None, signatures: bool = True,
              signature_n: int | None = None) -> StudyResult:
    """Train ``seeds`` curricula of ``cfg`` into ``out``, evaluate, analyse; write findings.json.

    ``n`` tasks per suite (greedy); ``on_start(text)`` / ``on_part(name, seconds)`` are called before /
    after each part. ``consolidations``: the ``consolidate`` methods to run and compare; ``vectors``:
    the task-vector cosines (trains SDFT from the base and from the end per seed); ``validation``: the
    monitor's held-out validation (retrains the ecom stage with the monitor per seed; ``lead_n`` items
    every ``lead_every`` steps, default :func:`lead_defaults`; ``lead_stage`` the stage retrained, default
    ecom, else the last); ``signatures``: the drift signature of every phase, stage and consolidation
    on its parent's own generations (``signature_n`` per probe set, default
    :data:`aclarena.analysis.signatures.DEFAULT_N`, as the mini demo's).
    """
    from aclarena.train.curriculum import run_curriculum

    lead_n, lead_every = _check_options(cfg, seeds, n, lead_n, lead_every, lead_stage)
    stages = [s.domain for s in cfg.stages]
    out = Path(out)
    parts = Parts(on_start, on_part)
    times, errors, part, verb = parts.times, parts.errors, parts.part, parts.verb

    trained = part("train", lambda: run_curriculum(cfg, out, seeds=seeds, show_progress=show_progress,
                                                   config_text=config_text))
    names = {r.job.name for r in trained.records}
    reps = list(range(seeds))
    run = str(out)

    def evaluate() -> list[Any]:
        chain = [seq_name(d, r) for r in reps for d in stages if seq_name(d, r) in names]
        others = [c for r in reps for d in stages for c in (seq_name(d, r, "sft"), oracle_name(d, r)) if c in names]
        res = [verb("eval", "eval", functools.partial(analyses.eval_cells, run, ["base", *chain], "id,general", n))]
        if others:
            res.append(verb("eval", "eval", functools.partial(analyses.eval_cells, run, others, "id", n)))
        return res

    evals = part("eval", evaluate)
    drift: dict[int, dict[str, Any]] = {}

    part("tokens", lambda: _tokens(out, seeds, stages, names, n, verb, drift))
    disp = part("displacement", lambda: verb("displacement", "displacement", lambda: analyses.displacement(run)))
    seed_list = [cfg.seed + r for r in reps]
    made: list[dict[str, Any]] = []

    if consolidations:
        evals += part("consolidate", lambda: _consolidate(run, n, seeds, stages, consolidations, verb, made))
    cells = cells_of(*evals)
    rows = findings(seed_list, stages, cells, (disp or {}).get("updates", []), drift)
    rows += consolidation_rows(seed_list, stages, cells, made)
    if signatures:
        from aclarena.analysis.signatures import DEFAULT_N

        per_probe = DEFAULT_N if signature_n is None else signature_n
        signed = part("signatures", lambda: verb("signatures", "signatures",
                                                 lambda: analyses.signatures(run, per_probe)))
        rows += signature_rows(seed_list, stages, (signed or {}).get("updates", []), made)
        if (signed or {}).get("failed"):  # those updates' values are null in their rows, and say why here
            errors["signatures"] = "no signature for " + "; ".join(signed["failed"])

    if vectors:
        rows += part("vectors", lambda: _cosines(out, seeds, stages, seed_list, verb, errors))

    report = None
    if validation:
        report = part("validation", lambda: _validation(cfg, out, seeds, stages, lead_n, lead_every, show_progress,
                                                         lead_stage))
    result = StudyResult(out=out, seeds=seed_list, rows=rows, part_times=times, errors=errors, validation=report,
                         consolidations=list(consolidations))
    write_findings(result, command=command or f"aclarena-diag study --run {out} --seeds {seeds} -n {n}")
    return result


def _tokens(out: Path, seeds: int, stages: Sequence[str], names: set[str], n: int, verb: Step,
            drift: dict[int, dict[str, Any]]) -> None:
    """Per replicate: freeze seq-math's generations, score the later checkpoints; seq-ecom's row into ``drift``."""
    from aclarena.probes.probe_set import list_probe_sets
    from aclarena.store import ResultsStore

    run = str(out)
    frozen = set(list_probe_sets(ResultsStore(out))) if (out / "results.h5").exists() else set()
    for r in range(seeds):
        ref = seq_name("math", r)
        if ref not in names or "ecom" not in stages:
            continue
        if ref not in frozen and verb(f"probe{suffix(r)}", "probe",
                                      functools.partial(analyses.probe, run, ref, "math", min(n, 32))) is None:
            continue
        data = verb(f"tokens{suffix(r)}", "tokens", functools.partial(analyses.tokens, run, ref))
        for row in (data or {}).get("checkpoints", []):
            if row.get("checkpoint") == seq_name("ecom", r):
                drift[r] = row


def _consolidate(run: str, n: int, seeds: int, stages: Sequence[str], methods: Sequence[str], verb: Step,
                 made: list[dict[str, Any]]) -> list[Any]:
    """``consolidate --seeds N`` for each method (outputs appended to ``made``), then their in-domain scores."""
    for method in methods:
        res = verb(f"consolidate {method}", "consolidate",
                   functools.partial(analyses.consolidate, run, method, seeds=seeds))
        made.extend((res or {}).get("outputs", []))
    shared = [o["checkpoint"] for o in made if o["method"] != "mle"]
    evals = []
    if shared:
        evals.append(verb("eval consolidated", "eval", functools.partial(analyses.eval_cells, run, shared, "id", n)))
    for d in stages:  # an MLE expert answers the contexts routed to it: its own domain's suite
        experts = [o["checkpoint"] for o in made if o["method"] == "mle" and o.get("domain") == d]
        if experts:
            evals.append(verb(f"eval mle-{d}", "eval",
                              functools.partial(analyses.eval_cells, run, experts, f"{d}/id", n)))
    return evals


def _cosines(out: Path, seeds: int, stages: Sequence[str], seed_list: Sequence[int], verb: Step,
             errors: dict[str, str]) -> list[dict[str, Any]]:
    """SDFT (the oracle-mix SFT) from the base and from the end per replicate, one ``vectors`` pass, the rows."""
    from aclarena.store import load_manifest

    run = str(out)
    sdft: dict[int, dict[str, str]] = {}
    for start in ("base", "end"):
        res = verb(f"sdft --start {start}", "consolidate",
                   functools.partial(analyses.consolidate, run, "sdft", seeds=seeds, start=start))
        for o in (res or {}).get("outputs", []):  # made or reused: each replicate's output checkpoint
            sdft.setdefault(int(o.get("replicate", 0)), {})[start] = o["checkpoint"]
    known = {c.name for c in load_manifest(out)}
    mix, unrelated = vector_pairs(stages, seeds, known, sdft=sdft)
    asked = [p for r in range(seeds) for p in ([mix[r]] if r in mix else []) + unrelated.get(r, [])]
    if not asked:
        errors["vectors"] = ("no pair to compare: SDFT from the base and from the end, and the oracles' SFT "
                             "phases, are missing (see the sdft steps' errors)")
        return cosine_rows(seed_list, {}, {})
    data = verb("vectors", "vectors", functools.partial(analyses.vectors, run, asked))
    got = {}
    for row in (data or {}).get("pairs", []):
        if row.get("group") == "all":
            got[row["pair"].replace(" : ", ":")] = _finite(row.get("cos"))
    return cosine_rows(seed_list, {r: got.get(p) for r, p in mix.items()},
                       {r: [got.get(p) for p in ps] for r, ps in unrelated.items()})


def _validation(cfg: Any, out: Path, seeds: int, stages: Sequence[str], lead_n: int, lead_every: int,
                show_progress: bool, lead_stage: str | None = None) -> dict[str, Any]:
    """The lead time of every seed (``monitor --lead-time`` on replicate r), then :func:`validation_report`."""
    from aclarena.train.lead_time import LeadTimeSettings, measure_lead_time

    seed_list = [cfg.seed + r for r in range(seeds)]
    stage = lead_stage or ("ecom" if "ecom" in stages[1:] else (stages[-1] if len(stages) > 1 else None))
    if stage is None:
        return validation_report({}, cfg.seed, seeds=seed_list) | {
            "reason": "the curriculum has one stage: there is no earlier skill to lose"}
    leads: dict[int, dict[str, Any]] = {}
    errs: dict[int, str] = {}
    # the monitor scores at least as often as the ground truth is evaluated: every evaluation sees a fresh value
    mon = getattr(cfg, "monitor", None)
    every = min(mon.every_n_steps if mon is not None else 5, lead_every)
    if seeds >= 2:
        for r in range(seeds):
            try:
                leads[cfg.seed + r] = measure_lead_time(out, LeadTimeSettings(stage=stage, n=lead_n, eval_every=lead_every,
                                                                              every_n_steps=every, replicate=r),
                                                        show_progress=show_progress)
            except AclarenaError as e:
                # monitor --lead-time's options are --lead-n and --lead-every here
                errs[cfg.seed + r] = re.sub(r"(^|\s|\()-n ", r"\1--lead-n ", str(e).splitlines()[0]).replace(
                    "--eval-every", "--lead-every")
                if r == 0:  # e.g. too few items for any significant drop: the same on every seed
                    break
            if r == 0 and not any(d.get("reachable") for d in leads[cfg.seed]["drop_test"]["domains"].values()):
                break  # no drop can be significant on the fit seed: nothing to fit, so the others are not retrained
    rep = validation_report(leads, cfg.seed, seeds=seed_list, errors=errs)
    rep["stage"] = stage
    rep["settings"] = {"n": lead_n, "eval_every": lead_every, "monitor_every": every, "alpha": LeadTimeSettings().alpha}
    return rep


def write_findings(result: StudyResult, *, command: str) -> Path:
    """``findings.json`` in the run folder, strict JSON, written whole then renamed."""
    from aclarena.reproducibility import made_by

    return analyses.write_report(result.out / FINDINGS_FILE, {**result.to_json(), "made_by": made_by(command)})
