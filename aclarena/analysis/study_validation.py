"""The study's validation of the drift monitor on held-out seeds: the lead time of every replicate's
stage (:mod:`aclarena.train.lead_time`), thresholds fitted on the first seed only and judged on the
others (:func:`validation_report`), and the per-check series the predictors are read from
(:func:`warning_series`, :func:`monitor_grid_series`). docs/monitor.md reports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

#: the monitor's predictors validated on held-out seeds (aclarena.train.lead_time.PREDICTORS' metrics)
PREDICTORS = ("kl_high", "flip_high", "kl_all", "fkl", "razor_fkl", "loss")



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
