"""The drift monitor's scalars of one check: pure functions of per-position scores.

While a stage trains, :class:`aclarena.train.callbacks.DriftMonitorCallback` scores probe sets of
earlier capabilities teacher-forced with the live weights; :func:`probe_metrics` turns one probe
set's per-position scores into the scalars of :data:`METRICS`: the study's token drift against
the probe's reference (ACLArena, arXiv 2609.23989: KL and flips at high-entropy positions) and
the forward KL to the stage-start policy (RL's Razor, Shenfeld et al. 2025, arXiv 2509.04259:
on a ``razor-<stage>`` probe of the trained stage's own prompts it is the paper's predictor; on the
earlier tasks' probes, an adaptation of it). The default warning rules on them
(:func:`default_rules`) live here too: ``fkl``'s limit was fitted on seed 0 of the mini study's
held-out validation; the others are provisional (one mini run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from aclarena.diagnostics.early_warning import MetricRule, TrendRule
from aclarena.diagnostics.token_drift import HighEntropy, high_entropy_mask, summarize_drift

#: Scalars of one check, per probe set. ``kl_*`` and ``flip_*`` are against the probe's
#: reference checkpoint, ``fkl*`` against the stage-start policy.
METRICS: dict[str, str] = {
    "kl_high": "mean KL(p_ref ‖ p_θ) at the reference's high-entropy positions (nats)",
    "kl_low": "mean KL(p_ref ‖ p_θ) at the other positions (nats)",
    "kl_all": "whole-sequence mean KL(p_ref ‖ p_θ) over every scored position (nats)",
    "kl_share_high": "share of the total KL mass at the high-entropy positions",
    "flip_high": "share of high-entropy positions whose top-1 token differs from the reference's",
    "flip_all": "share of all scored positions whose top-1 token differs from the reference's",
    "fkl": "forward KL(π_start ‖ π_θ) per token over every scored position (nats)",
    "fkl_high": "forward KL(π_start ‖ π_θ) per token at the high-entropy positions (nats)",
}
#: Scalars taken from the trainer's own logs (plain predictors, for comparison).
TRAIN_METRICS: dict[str, str] = {"loss": "the trainer's training loss"}

#: What a warning may do: log it, save a checkpoint, stop training.
ACTIONS = ("log", "save", "stop")


def default_rules() -> dict[str, MetricRule]:
    """The default rules (docs/monitor.md). ``fkl``'s limit is the threshold fitted on seed 0 of the mini
    study's held-out validation (first recipe, search stage; docs/results/archive/earlier-studies/findings_recipe1.json),
    reported there on seeds 1-2; ``fkl_high``'s and the trend settings are provisional, read off one mini run.

    Forward-KL metrics start at exactly 0 at the stage start, so they get absolute thresholds;
    drift against an earlier reference starts wherever earlier stages left it, so it gets the
    trend rule only. The loss is recorded, not warned on.
    """
    trend = TrendRule(alpha=0.3, z=3.0, warmup=2, min_std=0.002, rel_std=0.1, direction="up")
    return {
        "kl_high": MetricRule(trend=trend),
        "kl_all": MetricRule(trend=trend),
        "flip_high": MetricRule(trend=dataclasses.replace(trend, min_std=0.02)),
        "fkl": MetricRule(threshold=0.165, trend=trend),  # fitted on seed 0: 0.1648 (findings_recipe1.json)
        "fkl_high": MetricRule(threshold=0.25),
    }


def rules_to_json(rules: Mapping[str, MetricRule]) -> dict[str, Any]:
    return {k: v.to_dict() for k, v in rules.items()}


def mean_or_nan(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else float("nan")


def probe_metrics(
    ref_entropy: np.ndarray,
    ref_logprob: np.ndarray,
    ref_top1: np.ndarray,
    kl: np.ndarray,
    js: np.ndarray,
    logprob: np.ndarray,
    top1: np.ndarray,
    *,
    valid: np.ndarray,
    fkl: np.ndarray,
    fkl_valid: np.ndarray,
    high: HighEntropy,
) -> dict[str, float]:
    """The :data:`METRICS` of one probe set (flat per-position arrays, probe order).

    ``ref_*``, ``kl``, ``js``, ``logprob``, ``top1``: the live model against the probe's reference
    (``valid`` marks positions scored without trouble); ``fkl``: the per-position forward KL from the
    stage-start policy (``fkl_valid`` likewise). The high-entropy set is the reference's, chosen
    among positions where the reference is finite (as :func:`summarize_drift` chooses it).
    """
    summ = summarize_drift(ref_entropy, ref_logprob, ref_top1, kl, js, logprob, top1, high=high, valid=valid,
                           n_points=2)
    ref_ok = np.isfinite(ref_entropy) & np.isfinite(ref_logprob)
    is_high = np.zeros(len(kl), dtype=bool)
    if ref_ok.any():
        mask, _ = high_entropy_mask(ref_entropy[ref_ok].astype(np.float64), high)
        is_high[np.flatnonzero(ref_ok)[mask]] = True
    fok = np.asarray(fkl_valid, dtype=bool) & np.isfinite(fkl)
    f = np.asarray(fkl, dtype=np.float64)
    return {
        "kl_high": summ.kl_mean_high, "kl_low": summ.kl_mean_low, "kl_all": summ.kl_mean,
        "kl_share_high": summ.kl_share_high, "flip_high": summ.flip_rate_high, "flip_all": summ.flip_rate,
        "fkl": mean_or_nan(f[fok]), "fkl_high": mean_or_nan(f[fok & is_high]),
    }
