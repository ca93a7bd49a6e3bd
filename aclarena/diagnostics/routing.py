"""Routing metrics: accuracy per context type, abstention, the confusion matrix, chance level.

A router maps an agent's execution context to an expert or to *no expert*. The ACLArena
study (arXiv 2609.23989) routes MLE experts by the environment context and leaves learned
routers and ambiguous contexts open; these are the measures used to answer that
(docs/consolidation.md):

* accuracy of a context type: the share of its contexts routed to an acceptable answer
  (the domain's expert; *no expert* where no expert fits; either expert for a context that
  mixes two environments);
* abstention rate: the share routed to *no expert*;
* the confusion matrix ``C[i, j]``: contexts whose answer is label ``i`` routed to label ``j``
  (labels are the experts, then ``none``);
* chance: the accuracy of a router that picks one of the experts uniformly at random, and
  the one-sided binomial tail probability of doing at least as well as observed by chance.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from aclarena.diagnostics.binomial import binomial_tail


def confusion_matrix(true: Sequence[str], pred: Sequence[str], labels: Sequence[str]) -> np.ndarray:
    """``C[i, j]`` = number of items with true label ``labels[i]`` predicted as ``labels[j]``."""
    if len(true) != len(pred):
        raise ValueError(f"`true` and `pred` differ in length: {len(true)} and {len(pred)}")
    index = {lab: i for i, lab in enumerate(labels)}
    if len(index) != len(labels):
        raise ValueError("`labels` repeat")
    out = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for t, p in zip(true, pred, strict=True):
        if t not in index or p not in index:
            raise ValueError(f"label {t if t not in index else p!r} is not in `labels` {list(labels)}")
        out[index[t], index[p]] += 1
    return out


@dataclass(frozen=True)
class GroupAccuracy:
    """Accuracy and abstention of one context type."""

    group: str
    n: int
    correct: int
    abstained: int
    chance: float

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else float("nan")

    @property
    def abstain_rate(self) -> float:
        return self.abstained / self.n if self.n else float("nan")

    @property
    def p_chance(self) -> float:
        """P(at least ``correct`` of ``n`` right by chance), one-sided binomial tail."""
        return binomial_tail(self.correct, self.n, self.chance)


def accuracy_by_group(groups: Sequence[str], correct: Sequence[bool], abstained: Sequence[bool],
                      chance: Sequence[float]) -> list[GroupAccuracy]:
    """Per-group accuracy, in order of first appearance; ``chance`` is each item's chance of being right."""
    if not len(groups) == len(correct) == len(abstained) == len(chance):
        raise ValueError("`groups`, `correct`, `abstained` and `chance` must have one entry per item")
    order: list[str] = []
    for g in groups:
        if g not in order:
            order.append(g)
    out = []
    for g in order:
        idx = [i for i, x in enumerate(groups) if x == g]
        out.append(GroupAccuracy(
            group=g, n=len(idx), correct=int(sum(bool(correct[i]) for i in idx)),
            abstained=int(sum(bool(abstained[i]) for i in idx)),
            chance=float(np.mean([chance[i] for i in idx])) if idx else float("nan"),
        ))
    return out


def item_chance(accept: Collection[str], experts: Sequence[str]) -> float:
    """Chance that a uniformly random expert is acceptable (0 when only *no expert* is)."""
    if not experts:
        raise ValueError("`experts` is empty")
    return sum(1 for e in experts if e in accept) / len(experts)


