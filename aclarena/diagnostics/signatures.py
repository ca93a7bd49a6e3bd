"""Drift signatures of one update (parent -> child), with bootstrap intervals over sequences.

An *update* is one training step of a curriculum seen from outside: an SFT phase, an RL phase,
a whole stage or a consolidation. Its signature is measured on the parent's own frozen
generations of the update's domain, teacher-forced under parent and child (the ACLArena study's
token-level protocol, arXiv 2609.23989), with the per-position measures of
:mod:`aclarena.diagnostics.token_drift` (entropy of the parent, exact ``KL(p_parent ‖ p_child)``,
log-prob change of the parent's token, top-1 flips):

* ``kl_share_high``: share of the KL mass at the top ``q`` (6%) parent-entropy positions
  (chance: ``high_share``, the fraction of positions in that set);
* ``barely_moved_low``: fraction of low-entropy positions with ``|Δ log-prob| < eps``;
* ``kl_share_first_k``: share of the KL mass at the first ``k`` tokens of each reply (a *reply*
  is a run of consecutive generated tokens: one assistant turn). Format takeover, where SFT on
  another domain's demonstrations rewrites how a reply starts, puts the mass there (chance:
  ``first_k_share``);
* ``flip_rate_high`` / ``flip_rate_low``: argmax flips at high- vs low-entropy positions;
* ``concentration_area``: area under the entropy-ranked cumulative-KL curve (0.5: unrelated to
  entropy; 1: all at the top);
* ``kl_mean``: mean KL per position (how far the update moved at all).

Why these: the study found forgetting concentrated at ~6% high-entropy decision points with
~94% of positions barely moving; on-policy updates are expected to move the model less and
where it was undecided (Retaining by Doing, arXiv 2510.18874: RL forgets less than SFT because
its data is the model's own, mode-seeking samples; RL's Razor, arXiv 2509.04259: forgetting
tracks the forward KL between the fine-tuned and the base policy on the new task's
distribution, and on-policy training finds the KL-minimal solution). An SFT phase on expert
demonstrations and an RL phase are told apart by these numbers.

Intervals: sequences are the independent units (positions of one sequence are not), so each
interval is a percentile bootstrap over sequences (Efron & Tibshirani 1993, ch. 13; cluster
resampling, Davison & Hinkley 1997, sec. 3.8): ``n_boot`` resamples of the sequences with
replacement, every statistic recomputed on each, the high-entropy set re-chosen per resample.
A resample is represented by per-sequence counts, so each replicate is a weighted pass over
positions sorted once by entropy (``O(N)`` per replicate); :func:`weighted_stats` equals the
statistics of the explicitly expanded resample (tests check it against
:func:`~aclarena.diagnostics.token_drift.summarize_drift`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.diagnostics.token_drift import HighEntropy

#: the first ``k`` tokens of each reply count as its start (the issue's 12: a tool-call opening
#: or an answer prefix of the mini arena is 5-15 tokens)
DEFAULT_FIRST_K = 12
#: fewer sequences than this give no interval worth printing
MIN_SEQUENCES = 8
DEFAULT_N_BOOT = 1000
#: position-weights held per chunk of replicates (bounds memory to this many floats)
CHUNK_CELLS = 4_000_000
MEASURES = ("kl_share_high", "barely_moved_low", "kl_share_first_k", "flip_rate_high", "flip_rate_low",
            "concentration_area", "kl_mean")
#: what each share is compared with: the share of positions in its set
CHANCE = {"kl_share_high": "high_share", "kl_share_first_k": "first_k_share"}


def reply_index(position: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Index of each scored position within its reply (0 = the reply's first token).

    ``position`` holds the token index of every scored position, sequences concatenated
    (``offsets`` delimit them, CSR-like). A reply starts at a sequence's first scored position
    and wherever the token index does not follow the previous one (a tool result or a user
    turn came between).
    """
    pos = np.asarray(position, dtype=np.int64)
    off = np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or len(off) < 1 or off[0] != 0 or off[-1] != len(pos) or np.any(np.diff(off) < 0):
        raise ValueError(f"`offsets` must run from 0 to {len(pos)} without decreasing")
    n = len(pos)
    start = np.ones(n, dtype=bool)
    if n > 1:
        start[1:] = pos[1:] != pos[:-1] + 1
    start[off[:-1][off[:-1] < n]] = True
    idx = np.arange(n)
    last_start = np.maximum.accumulate(np.where(start, idx, 0))
    return idx - last_start


@dataclass(frozen=True)
class _Prepared:
    """Positions sorted once by parent entropy (highest first), with everything a replicate needs."""

    seq: np.ndarray  # sequence of each position (sorted order)
    entropy: np.ndarray
    ok: np.ndarray  # the child's values are valid there too
    kl: np.ndarray  # 0 where not ok
    moved: np.ndarray  # |Δ log-prob| < eps (False where not ok)
    flip: np.ndarray
    first: np.ndarray  # within the first k of its reply
    n_sequences: int
    high: HighEntropy


def prepare(ref_entropy: np.ndarray, ref_logprob: np.ndarray, ref_top1: np.ndarray, kl: np.ndarray,
            logprob: np.ndarray, top1: np.ndarray, sequence: np.ndarray, reply: np.ndarray, *,
            valid: np.ndarray | None = None, high: HighEntropy = HighEntropy(), eps: float = 0.05,
            first_k: int = DEFAULT_FIRST_K) -> _Prepared:
    """Validate the flat per-position arrays and sort them by parent entropy (see :func:`drift_signature`)."""
    if not (isinstance(eps, int | float) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"`eps` must be a finite number > 0, got {eps!r}")
    if not isinstance(first_k, int) or isinstance(first_k, bool) or first_k < 1:
        raise ValueError(f"`first_k` must be an integer >= 1, got {first_k!r}")
    arrays = [np.asarray(a) for a in (ref_entropy, ref_logprob, ref_top1, kl, logprob, top1, sequence, reply)]
    n = arrays[0].shape[0] if arrays[0].ndim == 1 else -1
    if any(a.ndim != 1 or a.shape[0] != n for a in arrays):
        raise ValueError(f"per-position arrays must be 1-d of equal length, got shapes {[a.shape for a in arrays]}")
    h, lp_ref, t1_ref, kl_a, lp, t1, seq, rep = arrays
    h = h.astype(np.float64)
    seq = seq.astype(np.int64)
    if n and (seq.min() < 0):
        raise ValueError("`sequence` must hold sequence indices >= 0")
    ref_ok = np.isfinite(h) & np.isfinite(lp_ref.astype(np.float64))
    ok = ref_ok & np.isfinite(kl_a.astype(np.float64)) & np.isfinite(lp.astype(np.float64))
    if valid is not None:
        v = np.asarray(valid, dtype=bool)
        if v.shape != (n,):
            raise ValueError(f"`valid` must have shape ({n},), got {v.shape}")
        ok &= v
    # the high set is chosen among positions where the parent is finite (as summarize_drift does)
    keep = np.flatnonzero(ref_ok)
    order = keep[np.argsort(-h[keep], kind="stable")]
    kl_v = np.where(ok, kl_a.astype(np.float64), 0.0)
    moved = ok & (np.abs(np.where(ok, lp.astype(np.float64) - lp_ref.astype(np.float64), np.inf)) < eps)
    n_seq = int(seq.max()) + 1 if n else 0
    return _Prepared(seq=seq[order], entropy=h[order], ok=ok[order], kl=kl_v[order], moved=moved[order],
                     flip=(t1 != t1_ref)[order] & ok[order], first=(rep < first_k)[order], n_sequences=n_seq,
                     high=high)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def weighted_stats(p: _Prepared, seq_weights: np.ndarray) -> dict[str, np.ndarray]:
    """Every statistic for each row of ``seq_weights`` (``[B, S]`` copies of each sequence in a resample).

    A row of ones gives the statistics of the data itself. Returns ``{name: [B]}`` (the
    measures of the module docstring plus ``high_share``, ``first_k_share``, ``n_high``).
    """
    sw = np.atleast_2d(np.asarray(seq_weights, dtype=np.float64))
    w = sw[:, p.seq]  # [B, N] copies of each position, sorted by entropy
    total = w.sum(axis=1)
    if p.high.q is not None:
        k = np.maximum(1.0, np.floor(p.high.q * total + 0.5))
        before = np.cumsum(w, axis=1) - w
        hw = np.clip(k[:, None] - before, 0.0, w)  # copies of each position inside the top k
    else:
        hw = w * (p.entropy > p.high.nats)[None, :]
    lw = w - hw
    okf = p.ok.astype(np.float64)
    wo, ho, lo = w * okf, hw * okf, lw * okf
    kl_w = wo * p.kl
    kl_tot = kl_w.sum(axis=1)
    out = {
        "kl_share_high": _ratio((ho * p.kl).sum(axis=1), kl_tot),
        "kl_share_first_k": _ratio((kl_w * p.first).sum(axis=1), kl_tot),
        "barely_moved_low": _ratio((lo * p.moved).sum(axis=1), lo.sum(axis=1)),
        "flip_rate_high": _ratio((ho * p.flip).sum(axis=1), ho.sum(axis=1)),
        "flip_rate_low": _ratio((lo * p.flip).sum(axis=1), lo.sum(axis=1)),
        "kl_mean": _ratio(kl_tot, wo.sum(axis=1)),
        "high_share": _ratio(ho.sum(axis=1), wo.sum(axis=1)),
        "first_k_share": _ratio((wo * p.first).sum(axis=1), wo.sum(axis=1)),
        "n_high": ho.sum(axis=1),
    }
    # area under the curve over the valid positions: copy m of a position (m = 1..w) sits at height
    # A + (m - 1/2) d / T, A the KL share ranked above it, so the position adds w A + w² d / (2T)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(kl_tot > 0, kl_tot, 1.0)[:, None]
        above = (np.cumsum(kl_w, axis=1) - kl_w) / t
        area = (wo * above + wo * wo * p.kl / (2 * t)).sum(axis=1)
    out["concentration_area"] = _ratio(area, wo.sum(axis=1))
    return out


def resample_counts(n_sequences: int, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, n_sequences]`` copies of each sequence in each bootstrap resample (seeded)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_sequences, np.full(n_sequences, 1.0 / n_sequences), size=n_boot).astype(np.float64)


@dataclass(frozen=True)
class DriftSignature:
    """The signature of one update: each measure's value and its bootstrap interval.

    ``values[m]`` is the statistic on the data, ``low[m]`` / ``high[m]`` its percentile
    interval at ``level``; ``high_share`` and ``first_k_share`` are the chance levels of the
    two KL shares (the share of positions in the set). Counts say what the numbers rest on.
    """

    values: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]
    high_share: float
    first_k_share: float
    n_sequences: int
    n_positions: int
    n_valid: int
    n_high: int
    n_first_k: int
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (strict JSON: every number finite, by construction)."""
        return {"values": dict(self.values), "low": dict(self.low), "high": dict(self.high),
                "high_share": self.high_share, "first_k_share": self.first_k_share,
                "n_sequences": self.n_sequences, "n_positions": self.n_positions, "n_valid": self.n_valid,
                "n_high": self.n_high, "n_first_k": self.n_first_k, "settings": dict(self.settings)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DriftSignature:
        return cls(values={k: float(v) for k, v in data["values"].items()},
                   low={k: float(v) for k, v in data["low"].items()},
                   high={k: float(v) for k, v in data["high"].items()},
                   high_share=float(data["high_share"]), first_k_share=float(data["first_k_share"]),
                   n_sequences=int(data["n_sequences"]), n_positions=int(data["n_positions"]),
                   n_valid=int(data["n_valid"]), n_high=int(data["n_high"]), n_first_k=int(data["n_first_k"]),
                   settings=dict(data.get("settings", {})))


class TooFewPositions(ValueError):
    """The positions cannot carry an interval (too few sequences, no drift, an empty stratum)."""


def drift_signature(
    ref_entropy: np.ndarray,
    ref_logprob: np.ndarray,
    ref_top1: np.ndarray,
    kl: np.ndarray,
    logprob: np.ndarray,
    top1: np.ndarray,
    sequence: np.ndarray,
    reply: np.ndarray,
    *,
    valid: np.ndarray | None = None,
    high: HighEntropy = HighEntropy(),
    eps: float = 0.05,
    first_k: int = DEFAULT_FIRST_K,
    n_boot: int = DEFAULT_N_BOOT,
    level: float = 0.95,
    seed: int = 0,
    min_sequences: int = MIN_SEQUENCES,
) -> DriftSignature:
    """The drift signature of an update from flat per-position arrays (sequences concatenated).

    Args:
        ref_entropy, ref_logprob, ref_top1: the parent's entropy, log-prob of its own token and top-1.
        kl, logprob, top1: the child's ``KL(p_parent ‖ p_child)``, log-prob of the parent's token, top-1.
        sequence: the sequence each position belongs to (``0 .. S-1``), the resampling unit.
        reply: index of each position within its reply (:func:`reply_index`).
        valid: False where the child's scores are not valid (kept out, as in ``summarize_drift``).

    Raises:
        TooFewPositions: fewer than ``min_sequences`` sequences with valid positions, no KL at
            all (the child equals the parent there: no share exists), or an empty high or low
            stratum. Never a 0 or NaN in place of a number.
    """
    if not (isinstance(n_boot, int) and not isinstance(n_boot, bool) and n_boot >= 100):
        raise ValueError(f"`n_boot` must be an integer >= 100, got {n_boot!r}")
    if not (isinstance(level, int | float) and 0 < level < 1):
        raise ValueError(f"`level` must be in (0, 1), got {level!r}")
    p = prepare(ref_entropy, ref_logprob, ref_top1, kl, logprob, top1, sequence, reply, valid=valid, high=high,
                eps=eps, first_k=first_k)
    seqs_with_data = np.unique(p.seq[p.ok])
    if len(seqs_with_data) < min_sequences:
        raise TooFewPositions(f"{len(seqs_with_data)} sequences with scored positions; an interval needs at least "
                              f"{min_sequences}")
    point = {k: float(v[0]) for k, v in weighted_stats(p, np.ones((1, p.n_sequences))).items()}
    if not point["kl_mean"] > 0:
        raise TooFewPositions("the child's distribution equals the parent's at every scored position (KL 0): "
                              "no drift to locate")
    missing = [m for m in MEASURES if not math.isfinite(point[m])]
    if missing:
        raise TooFewPositions(f"no position to compute {', '.join(missing)} on (an empty high- or low-entropy set)")
    counts = resample_counts(p.n_sequences, n_boot, seed)
    rows = max(1, CHUNK_CELLS // max(1, len(p.seq)))
    reps: dict[str, list[np.ndarray]] = {m: [] for m in MEASURES}
    for start in range(0, n_boot, rows):
        stats = weighted_stats(p, counts[start:start + rows])
        for m in MEASURES:
            reps[m].append(stats[m])
    low, hi = {}, {}
    for m in MEASURES:
        r = np.concatenate(reps[m])
        r = r[np.isfinite(r)]  # a resample without any high position (or KL) has no value for it
        if len(r) < n_boot // 2:
            raise TooFewPositions(f"{m} is undefined in most resamples of the sequences: too few positions")
        lo_q, hi_q = np.quantile(r, [(1 - level) / 2, (1 + level) / 2])
        low[m], hi[m] = float(lo_q), float(hi_q)
    settings = {"high": str(high), "eps": float(eps), "first_k": first_k, "n_boot": n_boot, "level": float(level),
                "seed": seed}
    return DriftSignature(values={m: point[m] for m in MEASURES}, low=low, high=hi,
                          high_share=point["high_share"], first_k_share=point["first_k_share"],
                          n_sequences=int(len(seqs_with_data)), n_positions=int(len(np.asarray(ref_entropy))),
                          n_valid=int(p.ok.sum()), n_high=int(round(point["n_high"])),
                          n_first_k=int((p.ok & p.first).sum()), settings=settings)
