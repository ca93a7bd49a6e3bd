"""The order study's designs, plan and findings maths (aclarena.diagnostics.orders), on synthetic accuracies."""

from __future__ import annotations

import itertools
import math

import pytest

from aclarena.diagnostics.orders import (
    design_orders,
    forgetting_events,
    harm_by_stage,
    order_findings,
    order_scores,
    pairwise_prediction,
    plan_orders,
    predictor_report,
    t_interval,
    williams_square,
)
from aclarena.errors import AclarenaError
from aclarena.train.naming import order_node_name

D4 = ["math", "search", "ecom", "if"]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_williams_square_is_latin_and_balanced_when_even(n: int) -> None:
    sq = williams_square(n)
    assert len(sq) == n
    for row in sq:
        assert sorted(row) == list(range(n))
    for col in range(n):
        assert sorted(r[col] for r in sq) == list(range(n))
    if n % 2 == 0:
        adjacent = [(r[i], r[i + 1]) for r in sq for i in range(n - 1)]
        assert len(adjacent) == len(set(adjacent)) == n * (n - 1)


def test_designs() -> None:
    pairs = design_orders("pairs", D4)
    assert len(pairs) == 12 and len(set(pairs)) == 12 and all(len(o) == 2 and o[0] != o[1] for o in pairs)
    latin = design_orders("latin", D4)
    assert len(latin) == 4
    for pos in range(4):
        assert sorted(o[pos] for o in latin) == sorted(D4)
    assert len(design_orders("all", D4)) == 24
    assert design_orders(" math,search ; search,math ", D4) == [("math", "search"), ("search", "math")]
    assert design_orders("math", D4) == [("math",)]


@pytest.mark.parametrize(("spec", "says"), [
    ("math,serch", "did you mean 'search'"),
    ("math,math", "repeats the domain 'math'"),
    ("latn", "did you mean 'latin'"),
    ("math,search;math,search", "given twice"),
    ("math,,search", "empty order or domain"),
    ("", "names no design"),
    ("math,general", "this curriculum's domains are math, search, ecom, if"),
])
def test_bad_designs_are_one_line(spec: str, says: str) -> None:
    with pytest.raises(AclarenaError) as e:
        design_orders(spec, D4)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_pairs_needs_two_domains() -> None:
    with pytest.raises(AclarenaError, match="at least 2 domains"):
        design_orders("pairs", ["math"])


def test_prefix_sharing_counts() -> None:
    plan = plan_orders(design_orders("pairs", D4), seeds=3)
    assert len(plan.nodes) == 4 + 12 and plan.stages == 48 and plan.unshared_stages == 72
    assert {p for p, _ in plan.shared()} == {(d,) for d in D4}
    assert all(len(users) == 3 for _, users in plan.shared())
    # all permutations: 4 + 12 + 24 + 24 distinct prefixes
    allp = plan_orders(design_orders("all", D4), seeds=1)
    assert allp.stages == 64 and allp.unshared_stages == 96
    # parents come first
    for i, p in enumerate(allp.nodes):
        assert len(p) == 1 or p[:-1] in allp.nodes[:i]
    explicit = plan_orders([("math", "search", "ecom"), ("math", "search", "if"), ("search", "math")], 2)
    assert explicit.stages == 2 * 6 and explicit.unshared_stages == 2 * 8
    assert dict(explicit.shared()) == {("math",): (("math", "search", "ecom"), ("math", "search", "if")),
                                       ("math", "search"): (("math", "search", "ecom"), ("math", "search", "if"))}
    assert "12 stages to train" in explicit.lines(order_node_name)[0]


def test_t_interval() -> None:
    r = t_interval([0.1, 0.2, 0.3])
    assert r["mean"] == pytest.approx(0.2) and r["spread"] == pytest.approx(0.1)
    assert r["high"] - r["mean"] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)
    assert t_interval([0.5])["low"] is None and t_interval([None, float("nan")])["n"] == 0


def _acc(orders, reps, truth):
    """Accuracies from a generative rule ``truth(prefix, domain, r)`` over every prefix of ``orders``."""
    acc = {}
    for o in orders:
        for k in range(len(o) + 1):
            for d in {x for oo in orders for x in oo}:
                for r in reps:
                    acc[(tuple(o[:k]), d, r)] = truth(tuple(o[:k]), d, r)
    return acc


# additive interference: learning d gives 0.6; each later stage e lowers every earlier domain by H[e]
H = {"math": 0.02, "search": 0.05, "ecom": 0.20, "if": 0.08}


def _additive(prefix, d, r):
    if d not in prefix:
        return 0.0
    after = prefix[prefix.index(d) + 1:]
    return 0.6 - sum(H[e] for e in after) + 0.01 * r


def test_findings_recover_an_additive_truth() -> None:
    reps = [0, 1, 2]
    orders = design_orders("latin", D4)
    pairs = design_orders("pairs", D4)
    nodes = plan_orders(orders + pairs, 1).nodes
    acc = _acc(orders + pairs, reps, _additive)
    f = order_findings(acc, orders, D4, nodes, reps)
    inter = {(r["first"], r["second"]): r["mean"] for r in f["matrix"]["pairs"]}
    assert inter[("math", "ecom")] == pytest.approx(0.20) and inter[("ecom", "math")] == pytest.approx(0.02)
    assert f["harm"]["most_harmful"] == "ecom" and f["harm"]["positions"] == [2, 3, 4]
    assert f["harm"]["p_most_harmful"]["ecom"] == 1.0
    harm = {r["stage"]: r["mean"] for r in f["harm"]["stages"]}
    assert harm == pytest.approx(H)
    # BWT of an order: minus the mean over earlier domains of the sum of later stages' harm
    for row in f["orders"]["orders"]:
        o = row["order"]
        want = -sum(sum(H[e] for e in o[i + 1:]) for i in range(3)) / 3
        assert row["bwt"]["mean"] == pytest.approx(want)
        assert row["bwt"]["spread"] == pytest.approx(0.0, abs=1e-12)
    # the pairwise sum predicts an additive truth exactly
    pp = f["pairwise_prediction"]
    assert pp["points"] == 12 and pp["mae"] == pytest.approx(0.0, abs=1e-12)
    for row in pp["orders"]:
        assert row["predicted_bwt"]["mean"] == pytest.approx(row["measured_bwt"]["mean"])
    best = f["orders"]["bwt"]["best"]
    assert best[-1] == "math"  # the least harmful stage last
    assert f["orders"]["final_avg"]["best"][-1] == "math"


def test_harm_is_position_controlled() -> None:
    """A stage observed only late (where drops are larger) is not called the most harmful for it."""
    reps = [0, 1]
    # truth: each stage harms by 0.05 * position; ecom harms 0.01 more than the others at every position
    def truth(prefix, d, r):
        if d not in prefix:
            return 0.0
        i = prefix.index(d)
        return 0.9 - sum(0.05 * (j + 1) + (0.01 if prefix[j] == "ecom" else 0) for j in range(i + 1, len(prefix)))

    orders = design_orders("latin", D4)
    f = order_findings(_acc(orders, reps, truth), orders, D4, plan_orders(orders, 1).nodes, reps)
    assert f["harm"]["most_harmful"] == "ecom"
    harm = {r["stage"]: r["mean"] for r in f["harm"]["stages"]}
    assert harm["ecom"] - harm["math"] == pytest.approx(0.01)
    # a design where ecom is never at position 2 or 3 has no common positions: no claim
    ev = forgetting_events(_acc(orders, reps, truth), [("math", "search"), ("search", "math", "ecom")], reps)
    h = harm_by_stage(ev, ["search", "math", "ecom"], reps)
    assert h["most_harmful"] is None and "no position" in h["reason"]


def test_order_scores_intervals_and_missing_values() -> None:
    orders = [("math", "search"), ("search", "math")]
    acc = {}
    for r, (ms, sm) in enumerate([(0.1, 0.3), (0.2, 0.3), (0.15, 0.35)]):
        acc |= {(("math",), "math", r): 0.5, (("math", "search"), "math", r): 0.5 - ms,
                (("math", "search"), "search", r): 0.4, (("search",), "search", r): 0.4,
                (("search", "math"), "search", r): 0.4 - sm, (("search", "math"), "math", r): 0.5}
    s = order_scores(acc, orders, [0, 1, 2])
    ms = next(x for x in s["orders"] if x["order"] == ["math", "search"])
    assert ms["bwt"]["values"] == pytest.approx([-0.1, -0.2, -0.15])
    assert ms["final_avg"]["mean"] == pytest.approx((0.35 + 0.4) / 2)
    assert s["bwt"]["best"] == ["math", "search"] and s["bwt"]["worst"] == ["search", "math"]
    assert s["bwt"]["best_minus_worst"]["values"] == pytest.approx([0.2, 0.1, 0.2])
    assert s["bwt"]["p_best"]["math->search"] == 1.0
    del acc[(("search", "math"), "search", 2)]
    s = order_scores(acc, orders, [0, 1, 2])
    sm = next(x for x in s["orders"] if x["order"] == ["search", "math"])
    assert sm["bwt"]["values"][2] is None and sm["bwt"]["n"] == 2
    assert pairwise_prediction(acc, orders, [0, 1, 2])["reason"].startswith("no order of 3")


def test_predictor_report_held_out() -> None:
    pairs = list(itertools.permutations(D4, 2))
    # a feature that predicts exactly, one that is noise, one known on too few pairs
    y = {p: [0.1 * i + 0.01 * r for r in range(3)] for i, p in enumerate(pairs)}
    good = {p: [2 * v + 1 for v in y[p]] for p in pairs}
    noise = {p: [((i * 7) % 5) * 0.1 + 0.001 * r for r in range(3)] for i, p in enumerate(pairs)}
    feats = {p: {"good": good[p], "noise": noise[p], "rare": [1.0, None, None] if i < 3 else [None] * 3}
             for i, p in enumerate(pairs)}
    rep = predictor_report(feats, y)
    g, n, rare = rep["features"]["good"], rep["features"]["noise"], rep["features"]["rare"]
    assert g["status"] == "ok" and g["pearson"] == pytest.approx(1.0) and g["held_out"]["r2"] == pytest.approx(1.0)
    assert g["held_out"]["mae"] == pytest.approx(0.0, abs=1e-9)
    assert g["pearson_low"] == pytest.approx(1.0)
    assert n["held_out"]["r2"] < 0.5 and n["held_out"]["mae"] > g["held_out"]["mae"]
    assert rare["status"].startswith("too few pairs (3 < 4)")


def test_ties_name_no_winner() -> None:
    orders = [("math", "search"), ("search", "math")]
    acc = {(p, d, r): 0.0 for p in [(), ("math",), ("search",), *orders] for d in ("math", "search") for r in (0, 1)}
    f = order_findings(acc, orders, ["math", "search"], plan_orders(orders, 1).nodes, [0, 1])
    assert f["harm"]["most_harmful"] is None and f["harm"]["reason"].startswith("tie: math, search")
    assert f["harm"]["p_most_harmful"] == {"math": 0.5, "search": 0.5}
    assert f["orders"]["bwt"]["best"] is None and "every order scores the same" in f["orders"]["bwt"]["reason"]


def test_one_seed_has_no_interval_and_no_resampling() -> None:
    from aclarena.diagnostics.orders import summary_lines

    orders = design_orders("pairs", ["math", "search"])
    acc = {((), d, 0): 0.0 for d in ("math", "search")}
    acc |= {(("math",), "math", 0): 0.5, (("math",), "search", 0): 0.0, (("search",), "search", 0): 0.4,
            (("search",), "math", 0): 0.0, (("math", "search"), "math", 0): 0.2, (("math", "search"), "search", 0): 0.4,
            (("search", "math"), "search", 0): 0.3, (("search", "math"), "math", 0): 0.5}
    f = order_findings(acc, orders, ["math", "search"], plan_orders(orders, 1).nodes, [0])
    assert f["harm"]["most_harmful"] == "search" and f["harm"]["p_most_harmful"] == {}
    inter = {(r["first"], r["second"]): r for r in f["matrix"]["pairs"]}
    assert inter[("math", "search")]["values"] == pytest.approx([0.3]) and inter[("math", "search")]["low"] is None
    assert f["orders"]["bwt"]["best"] == ["search", "math"] and f["orders"]["bwt"]["p_best"] == {}
    lines = summary_lines({"domains": ["math", "search"], "orders": orders, "seeds": [0], "findings": f,
                           "predictors": {}})
    assert any("most harmful stage (positions 2, each weighed the same): search (one seed: no resampling)" in line
               for line in lines)
    assert any("interference math -> search: math/id drops +0.300 (n=1)" in line for line in lines)
