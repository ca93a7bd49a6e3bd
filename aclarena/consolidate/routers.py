"""Routers that pick an MLE expert from the execution context, or say that none fits.

Three routers, all reading only a :class:`~aclarena.consolidate.contexts.Context` (system
prompt and tool schemas):

* :class:`RuleRouter`: matches the context's tool schemas against each expert environment's
  tools (by name, or by parameter signature when tools are renamed), then falls back to
  keywords of the system prompt;
* :class:`LearnedRouter`: TF-IDF over character n-grams of the context text and a logistic
  regression (scikit-learn), trained on labelled deployment contexts;
* :class:`BanditRouter`: a contextual bandit (LinUCB; Li et al., 2010, arXiv 1003.0146) on
  the same TF-IDF features reduced by truncated SVD, whose only training signal is whether
  the expert it chose succeeded at the task (:class:`SuccessSignal`): it never sees a label.

**No expert.** Every router returns a :class:`Route`; when it cannot place a context (an empty
context, no rule firing, a probability or expected reward below its threshold, a tie) the
route has ``expert=None`` and says why. It never guesses silently. What then happens is the
*fallback policy* (:data:`FALLBACKS`): ``backbone`` (default) serves the request with the
frozen backbone and no adapter (for MLE, the SDFT model: a generalist trained on every
domain); ``refuse`` raises :class:`NoExpertError` so that the caller decides.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from aclarena.consolidate.contexts import NONE, Context, LabelledContext
from aclarena.consolidate.options import FALLBACKS, ROUTERS
from aclarena.errors import AclarenaError, unknown_name


class NoExpertError(AclarenaError):
    """A router could not place a context and the fallback policy is ``refuse``."""


@dataclass(frozen=True)
class Route:
    """A routing decision: ``expert`` (None = no expert), per-expert scores and the reason."""

    expert: str | None
    scores: Mapping[str, float]
    reason: str
    router: str = ""

    @property
    def label(self) -> str:
        return self.expert or NONE


def apply_fallback(route: Route, policy: str = "backbone") -> str | None:
    """The adapter to serve ``route`` with: its expert, or None (the bare backbone) under ``backbone``.

    Raises:
        NoExpertError: no expert and ``policy == "refuse"``.
    """
    if policy not in FALLBACKS:
        raise unknown_name("fallback policy", policy, FALLBACKS)
    if route.expert is not None:
        return route.expert
    if policy == "refuse":
        raise NoExpertError(f"no expert for this context ({route.reason}); serve it elsewhere or use --fallback backbone")
    return None


class Router(Protocol):
    name: str
    experts: tuple[str, ...]

    def route(self, ctx: Context) -> Route: ...


# --- rule router -----------------------------------------------------------------------------------

STOPWORDS = frozenset(
    ["a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "by", "from", "at", "as", "is", "are", "be", "your", "you", "their", "them", "they", "it", "its", "this", "that", "then", "than", "only", "any", "before", "after", "each", "every", "one", "per", "end", "reply", "answer"]
)


def prompt_keywords(experts: Sequence[str], variant: str = "id") -> dict[str, tuple[str, ...]]:
    """Words of each expert environment's own system prompt that no other expert's prompt has.

    Derived from the environments the experts were trained in, never from evaluation
    contexts, so that paraphrased prompts test the rule honestly.
    """
    from aclarena.envs import get_env

    words = {d: set(_words(get_env(d).system_prompt(variant))) for d in experts}
    return {d: tuple(sorted(w for w in words[d] if not any(w in words[o] for o in experts if o != d)))
            for d in experts}


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z][a-z/-]{3,}", text.lower()) if w not in STOPWORDS]


def _signature(tool: Mapping[str, Any]) -> tuple[str, ...]:
    f = tool.get("function", tool)
    return tuple(sorted((f.get("parameters") or {}).get("properties") or {}))


class RuleRouter:
    """Tool schemas first (names, then parameter signatures), then system-prompt keywords.

    A domain's tools are those of the environment its expert was trained in (the in-domain
    variant); its keywords are :func:`prompt_keywords`. A context's tools vote for the domains whose tools share their name; tools
    with unknown names vote by their parameter signature when exactly one domain has a tool
    with it. The domain with most votes wins if it holds at least ``min_share`` of the
    context's tools; otherwise the system prompt's keywords decide, if one domain has more
    hits than any other. Anything else is *no expert*.
    """

    name = "rule"

    def __init__(self, experts: Sequence[str], *, min_share: float = 0.5,
                 keywords: Mapping[str, Sequence[str]] | None = None) -> None:
        from aclarena.envs import get_env

        if not 0.0 < min_share <= 1.0:
            raise ValueError(f"`min_share` must be in (0, 1], got {min_share!r}")
        self.experts = tuple(experts)
        self.min_share = min_share
        derived = prompt_keywords(self.experts)
        self.keywords = {d: tuple((keywords or derived).get(d, ())) for d in self.experts}
        self.tool_names: dict[str, set[str]] = {}
        self.signatures: dict[tuple[str, ...], set[str]] = {}
        for d in self.experts:
            names: set[str] = set()
            for t in get_env(d).tools("id") or []:
                names.add(t["function"]["name"])
                sig = _signature(t)
                if sig:
                    self.signatures.setdefault(sig, set()).add(d)
            self.tool_names[d] = names

    def route(self, ctx: Context) -> Route:
        if ctx.empty:
            return Route(None, {}, "empty context: no system prompt and no tools", self.name)
        votes = dict.fromkeys(self.experts, 0.0)
        tools = list(ctx.tools or ())
        for t in tools:
            name = t.get("function", t).get("name", "")
            owners = [d for d in self.experts if name in self.tool_names[d]]
            if not owners:
                owners = sorted(self.signatures.get(_signature(t), set()))
            if len(owners) == 1:
                votes[owners[0]] += 1.0
            elif owners:
                for d in owners:
                    votes[d] += 1.0 / len(owners)
        if tools:
            shares = {d: v / len(tools) for d, v in votes.items()}
            best = max(shares.values())
            winners = [d for d, s in shares.items() if s == best]
            if best >= self.min_share and len(winners) == 1:
                return Route(winners[0], shares, f"{best:.0%} of the tools belong to {winners[0]}", self.name)
        present = set(_words(ctx.system or ""))
        hits = {d: float(sum(1 for k in self.keywords[d] if k in present)) for d in self.experts}
        best = max(hits.values()) if hits else 0.0
        winners = [d for d, h in hits.items() if h == best]
        if best > 0 and len(winners) == 1:
            return Route(winners[0], hits, f"system prompt keywords of {winners[0]} ({int(best)} hits)", self.name)
        why = "no tool or keyword matches an expert" if best == 0 else f"keywords tie between {', '.join(winners)}"
        return Route(None, hits, why, self.name)


# --- learned router --------------------------------------------------------------------------------


def _vectorizer(seed: int) -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, min_df=1, lowercase=True)


class LearnedRouter:
    """TF-IDF (character 3-5-grams) + logistic regression; *no expert* below ``threshold``."""

    name = "learned"

    def __init__(self, experts: Sequence[str], *, threshold: float = 0.6, C: float = 4.0, seed: int = 0) -> None:
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"`threshold` must be in [0, 1), got {threshold!r}")
        self.experts = tuple(experts)
        self.threshold = threshold
        self.C = C
        self.seed = seed
        self._vec: Any = None
        self._clf: Any = None

    def fit(self, data: Sequence[LabelledContext]) -> LearnedRouter:
        from sklearn.linear_model import LogisticRegression

        texts = [c.context.text() for c in data]
        labels = [c.label for c in data]
        missing = set(self.experts) - set(labels)
        if missing:
            raise AclarenaError(f"no training context for expert(s) {', '.join(sorted(missing))}; add some")
        self._vec = _vectorizer(self.seed)
        x = self._vec.fit_transform(texts)
        self._clf = LogisticRegression(C=self.C, max_iter=2000, random_state=self.seed)
        self._clf.fit(x, labels)
        return self

    def probabilities(self, ctx: Context) -> dict[str, float]:
        if self._clf is None:
            raise AclarenaError("the learned router is not trained; call fit() first")
        p = self._clf.predict_proba(self._vec.transform([ctx.text()]))[0]
        return {str(c): float(v) for c, v in zip(self._clf.classes_, p, strict=True)}

    def route(self, ctx: Context) -> Route:
        if ctx.empty:
            return Route(None, {}, "empty context: no system prompt and no tools", self.name)
        probs = self.probabilities(ctx)
        best = max(probs, key=probs.__getitem__)
        if probs[best] < self.threshold:
            return Route(None, probs, f"most likely {best} at p={probs[best]:.2f} < threshold {self.threshold}",
                         self.name)
        return Route(best, probs, f"p({best})={probs[best]:.2f}", self.name)


# --- RL router (contextual bandit) ------------------------------------------------------------------


class SuccessSignal(Protocol):
    """Whether expert ``expert`` succeeds on a task of domain ``domain`` (1.0 or 0.0)."""

    def __call__(self, expert: str, domain: str, rng: random.Random) -> float: ...


@dataclass(frozen=True)
class MatrixSuccess:
    """Bernoulli success with probability ``rates[expert][domain]`` (simulated or measured).

    ``simulated(experts)`` is the default when no expert has been evaluated: 0.8 on the
    expert's own domain and 0.1 elsewhere. ``source`` says which.
    """

    rates: Mapping[str, Mapping[str, float]]
    source: str = "simulated"

    def __call__(self, expert: str, domain: str, rng: random.Random) -> float:
        p = self.rates.get(expert, {}).get(domain, 0.0)
        return 1.0 if rng.random() < p else 0.0

    @classmethod
    def simulated(cls, experts: Sequence[str], own: float = 0.8, other: float = 0.1) -> MatrixSuccess:
        return cls({e: {d: own if d == e else other for d in experts} for e in experts}, "simulated")


@dataclass
class BanditLog:
    """Per training round: the reward observed, the expected reward of the chosen and of the best expert."""

    rewards: list[float] = field(default_factory=list)
    chosen: list[float] = field(default_factory=list)
    best: list[float] = field(default_factory=list)

    @property
    def regret(self) -> np.ndarray:
        """Cumulative pseudo-regret ``Σ (best − chosen)`` in expected reward (NaN when the signal has no rates)."""
        return np.cumsum(np.asarray(self.best) - np.asarray(self.chosen))


class BanditRouter:
    """LinUCB over SVD-reduced TF-IDF features; rewarded only by the chosen expert's success.

    Training draws contexts (whose task domain the success signal knows, the router does not),
    picks the arm with the highest upper confidence bound ``θ_aᵀx + α√(xᵀA_a⁻¹x)``, and updates
    that arm with the observed reward. Routing is greedy (``θ_aᵀx``); a context whose best
    expected reward is below ``min_reward`` goes to *no expert*.
    """

    name = "bandit"

    def __init__(self, experts: Sequence[str], *, dims: int = 24, alpha: float = 0.5, ridge: float = 1.0,
                 min_reward: float = 0.35, seed: int = 0) -> None:
        if dims < 2:
            raise ValueError(f"`dims` must be >= 2, got {dims}")
        self.experts = tuple(experts)
        self.dims = dims
        self.alpha = alpha
        self.ridge = ridge
        self.min_reward = min_reward
        self.seed = seed
        self._vec: Any = None
        self._svd: Any = None
        self.log = BanditLog()

    def _features(self, ctxs: Sequence[Context]) -> np.ndarray:
        # no re-normalisation and no bias term: a context unlike every training context projects
        # weakly on the subspace, so every arm expects little of it and the router abstains
        return np.asarray(self._svd.transform(self._vec.transform([c.text() for c in ctxs])))

    def fit(self, data: Sequence[LabelledContext], signal: SuccessSignal, *, rounds: int = 2000) -> BanditRouter:
        """Learn from ``rounds`` interactions; ``data`` labels feed only ``signal`` (the environment)."""
        from sklearn.decomposition import TruncatedSVD

        if not data:
            raise AclarenaError("no training contexts for the bandit router")
        rng = random.Random(self.seed)
        self._vec = _vectorizer(self.seed)
        x_text = self._vec.fit_transform([c.context.text() for c in data])  # unsupervised: no labels
        k = max(1, min(self.dims, x_text.shape[1] - 1, x_text.shape[0] - 1))
        self._svd = TruncatedSVD(n_components=k, random_state=self.seed).fit(x_text)
        feats = self._features([c.context for c in data])
        d = feats.shape[1]
        self._A = np.stack([np.eye(d) * self.ridge for _ in self.experts])
        self._b = np.zeros((len(self.experts), d))
        for _ in range(rounds):
            i = rng.randrange(len(data))
            x = feats[i]
            a = self._choose(x, explore=True)
            domain = data[i].label
            r = signal(self.experts[a], domain, rng)
            self.log.rewards.append(r)
            self.log.chosen.append(_expected(signal, self.experts[a], domain))
            self.log.best.append(max(_expected(signal, e, domain) for e in self.experts))
            self._A[a] += np.outer(x, x)
            self._b[a] += r * x
        self._theta = np.stack([np.linalg.solve(self._A[a], self._b[a]) for a in range(len(self.experts))])
        self._Ainv = np.stack([np.linalg.inv(A) for A in self._A])
        return self

    def _choose(self, x: np.ndarray, *, explore: bool) -> int:
        vals = []
        for a in range(len(self.experts)):
            theta = np.linalg.solve(self._A[a], self._b[a])
            v = float(theta @ x)
            if explore:
                v += self.alpha * math.sqrt(max(0.0, float(x @ np.linalg.solve(self._A[a], x))))
            vals.append(v)
        return int(np.argmax(vals))

    def expected(self, ctx: Context) -> dict[str, float]:
        if self._vec is None:
            raise AclarenaError("the bandit router is not trained; call fit() first")
        x = self._features([ctx])[0]
        return {e: float(self._theta[a] @ x) for a, e in enumerate(self.experts)}

    def route(self, ctx: Context) -> Route:
        if ctx.empty:
            return Route(None, {}, "empty context: no system prompt and no tools", self.name)
        exp = self.expected(ctx)
        best = max(exp, key=exp.__getitem__)
        if exp[best] < self.min_reward:
            return Route(None, exp, f"best expected success {exp[best]:.2f} ({best}) < {self.min_reward}", self.name)
        return Route(best, exp, f"expected success {exp[best]:.2f}", self.name)


def _expected(signal: SuccessSignal, expert: str, domain: str) -> float:
    rates = getattr(signal, "rates", None)
    if rates is not None:
        return float(rates.get(expert, {}).get(domain, 0.0))
    return float("nan")


def build_router(name: str, experts: Sequence[str], train: Sequence[LabelledContext], *,
                 signal: SuccessSignal | None = None, seed: int = 0, rounds: int = 2000) -> Router:
    """A trained router by name (``rule``, ``learned``, ``bandit``)."""
    if name == "rule":
        return RuleRouter(experts)
    if name == "learned":
        return LearnedRouter(experts, seed=seed).fit(train)
    if name == "bandit":
        return BanditRouter(experts, seed=seed).fit(train, signal or MatrixSuccess.simulated(experts), rounds=rounds)
    raise unknown_name("router", name, ROUTERS)
