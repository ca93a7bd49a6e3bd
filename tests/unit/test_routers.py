"""Routers: they beat chance on held-out contexts, abstain clearly, learn from rewards only."""

from __future__ import annotations

import numpy as np
import pytest

from aclarena.consolidate.contexts import (
    CONTEXT_TYPES,
    NONE,
    Context,
    env_context,
    evaluation_contexts,
    rename_tools,
    training_contexts,
)
from aclarena.consolidate.router_eval import evaluate_router
from aclarena.consolidate.routers import (
    BanditRouter,
    LearnedRouter,
    MatrixSuccess,
    NoExpertError,
    Route,
    RuleRouter,
    apply_fallback,
    build_router,
)
from aclarena.diagnostics.routing import binomial_tail, confusion_matrix, item_chance
from aclarena.errors import AclarenaError
from aclarena.results.routing import read_reports, write_routing

EXPERTS = ("math", "search", "ecom", "if")


@pytest.fixture(scope="module")
def train():
    return training_contexts(EXPERTS, n=30, seed=0)


@pytest.fixture(scope="module")
def held_out():
    return evaluation_contexts(EXPERTS, n=12, seed=1)


@pytest.fixture(scope="module")
def routers(train):
    return {name: build_router(name, EXPERTS, train, seed=0, rounds=800) for name in ("rule", "learned", "bandit")}


def test_contexts_never_carry_labels_into_what_routers_read(held_out):
    kinds = {c.kind for c in held_out}
    assert kinds == set(CONTEXT_TYPES)
    for c in held_out:
        text = c.context.text()
        assert c.kind not in text and "task_id" not in text
    # training and evaluation pools are disjoint
    train_systems = {c.context.system for c in training_contexts(EXPERTS, n=30)}
    para = {c.context.system for c in held_out if c.kind == "paraphrased"}
    assert not (para & train_systems)


@pytest.mark.parametrize("name", ["rule", "learned", "bandit"])
def test_each_router_beats_chance_on_held_out_contexts(routers, held_out, name):
    report = evaluate_router(routers[name], held_out)
    g = report.group("held-out")
    assert g is not None and g.n == 12 * len(EXPERTS)
    assert g.chance == pytest.approx(0.25)
    assert g.accuracy > g.chance
    assert g.p_chance < 1e-6  # far beyond what a random choice of expert reaches
    # the confusion matrix counts every single-label context once
    assert report.confusion.sum() == sum(1 for c in held_out if not c.accept)
    assert report.labels == (*EXPERTS, NONE)


@pytest.mark.parametrize("name", ["rule", "learned", "bandit"])
def test_no_expert_is_explicit(routers, name):
    r = routers[name].route(Context(system=None, tools=None))
    assert r.expert is None and r.label == NONE and "empty context" in r.reason
    assert apply_fallback(r, "backbone") is None
    with pytest.raises(NoExpertError, match="no expert for this context"):
        apply_fallback(r, "refuse")
    with pytest.raises(AclarenaError, match="did you mean 'refuse'"):
        apply_fallback(r, "refus")


def test_rule_router_reads_tool_schemas():
    rule = RuleRouter(EXPERTS)
    assert rule.route(env_context("search")).expert == "search"
    assert rule.route(env_context("ecom")).expert == "ecom"
    # renamed tools, no system prompt: the parameter signatures of ecom's tools still place it
    bare = Context(None, rename_tools(env_context("ecom"), None).tools)
    assert rule.route(bare).expert == "ecom"
    # tools no expert has, no keyword: no expert, with the reason
    from aclarena.envs.base import tool_schema

    foreign = Context("You are a weather bot.", (tool_schema("get_weather", "Forecast", {"city": ("string", "c")}),))
    r = rule.route(foreign)
    assert r.expert is None and "no tool or keyword" in r.reason


def test_learned_router_abstains_below_its_threshold(train):
    router = LearnedRouter(EXPERTS, threshold=0.99).fit(train)
    r = router.route(Context("Translate the text into French.", None))
    assert r.expert is None and "threshold" in r.reason
    assert set(r.scores) == set(EXPERTS) and sum(r.scores.values()) == pytest.approx(1.0)
    with pytest.raises(AclarenaError, match="not trained"):
        LearnedRouter(EXPERTS).route(env_context("math"))


def test_bandit_learns_from_rewards_not_labels(train):
    # an environment where each domain's tasks are solved by another expert (a permutation):
    # a router that read labels would route to the domain; one that learns from rewards follows them
    perm = {"math": "search", "search": "ecom", "ecom": "if", "if": "math"}
    signal = MatrixSuccess({e: {d: (0.9 if perm[d] == e else 0.05) for d in EXPERTS} for e in EXPERTS}, "test")
    bandit = BanditRouter(EXPERTS, seed=0).fit(train, signal, rounds=1500)
    for d in EXPERTS:
        assert bandit.route(env_context(d)).expert == perm[d]
    regret = bandit.log.regret
    # regret grows ever more slowly: the last quarter adds less than the first
    q = len(regret) // 4
    assert regret[-1] - regret[-q] < regret[q] - regret[0]


def test_routing_metrics():
    c = confusion_matrix(["a", "a", "b", "none"], ["a", "b", "b", "none"], ["a", "b", "none"])
    np.testing.assert_array_equal(c, [[1, 1, 0], [0, 1, 0], [0, 0, 1]])
    with pytest.raises(ValueError, match="not in `labels`"):
        confusion_matrix(["x"], ["a"], ["a"])
    assert item_chance({"a", "b"}, ["a", "b", "c", "d"]) == 0.5
    assert item_chance({NONE}, ["a", "b"]) == 0.0
    # P(X >= k) against the explicit binomial sum
    from math import comb

    assert binomial_tail(3, 5, 0.25) == pytest.approx(sum(comb(5, i) * 0.25**i * 0.75 ** (5 - i) for i in range(3, 6)))
    assert binomial_tail(0, 5, 0.3) == pytest.approx(1.0)
    # one exact tail for any n (issue 15): 5,000 items at chance 1/3, checked in exact rationals
    from fractions import Fraction

    n, k, q = 5000, 1720, Fraction(1, 3)
    want = float(sum(comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k, n + 1)))
    assert binomial_tail(k, n, 1 / 3) == pytest.approx(want, rel=1e-9)
    with pytest.raises(ValueError, match="probability"):
        binomial_tail(1, 2, 1.5)


def test_report_round_trips_through_the_store(tmp_path, routers, held_out):
    from aclarena.store import ResultsStore

    report = evaluate_router(routers["rule"], held_out, settings={"n": 12})
    store = ResultsStore(tmp_path)
    write_routing(store, report.payload(fingerprint="abc"))
    with store.reader() as r:
        got = read_reports(r)["rule"]
    assert got.labels == list(report.labels)
    np.testing.assert_array_equal(got.confusion, report.confusion)
    assert got.accuracy["type"] == [g.group for g in report.groups]
    assert got.accuracy["accuracy"] == pytest.approx([g.accuracy for g in report.groups])
    assert got.fingerprint == "abc" and got.regret is None
    assert got.decisions["correct"] == [d[4] for d in report.decisions]


def test_route_label():
    assert Route("math", {}, "x").label == "math"
    assert Route(None, {}, "x").label == NONE
