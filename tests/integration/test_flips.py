"""`flips` on a constructed case whose answer is known (tests/flips_helpers.py).

L equals E except at one critical decision per item (plus four harmless later ones): the
localization must find the critical position, the swap test must recover every item at the
smallest budget while the random control recovers exactly the items whose random draw hit
the critical position, and the reverse direction must break E at that one position.
"""

from __future__ import annotations

import math

import flips_helpers as fh
import numpy as np
import pytest
import torch

from aclarena.analysis.flips import FORGOT, FlipSettings, FlipsResult, analyse, play, swap_rows
from aclarena.probes.lockstep import Swapper
from aclarena.results.flips import read_flips_data, write_flips
from aclarena.store import ResultsStore

BUDGETS = (0.5, 5.0, 20.0)


@pytest.fixture(scope="module")
def case(tokenizer):
    tokenizer.padding_side = "left"
    c = fh.construct(tokenizer)
    res = analyse(c["e"], c["l"], tokenizer, c["tasks"], [FORGOT] * len(c["tasks"]),
                  settings=FlipSettings(budgets=BUDGETS, seed=0), early="E", late="L", suite="prefix/id",
                  env_for=lambda t: c["env"])
    return c, res


def test_construction_differs_only_where_intended(case):
    c, _ = case
    got = fh.disagreements(c["e"], c["l"], c["runs"])
    for (p, _), d in zip(c["critical"], got, strict=True):
        assert d.tolist() == [p, *c["harmless"]]


def test_lockstep_replay_is_greedy_generation(case, tokenizer):
    """The lockstep loop (two models, own KV caches) emits what transformers' greedy generate emits."""
    from aclarena.envs.rollout import model_policy

    c, _ = case
    policy = model_policy(c["l"], tokenizer, max_new_tokens=fh.PrefixEnv.max_new_tokens)
    want = policy([(t.messages, None) for t in c["tasks"]])
    sw = [Swapper() for _ in c["tasks"]]
    trajs = play(c["tasks"], sw, c["e"], c["l"], tokenizer, driver="l", batch_size=3, env_for=lambda t: c["env"])
    assert [tr.steps[0].text for tr in trajs] == want


def test_localized_at_the_critical_decision(case, tokenizer):
    c, res = case
    assert len(res.items) == 4
    for it, (p, alt), (ctx, gen) in zip(res.items, c["critical"], c["runs"], strict=True):
        assert it.reproduced and it.e_reward == 1.0 and it.l_reward == 0.0
        assert it.diverge == p
        assert 0 <= it.below <= p
        assert it.e_token == tokenizer.decode([gen[p]])
        assert it.l_token == tokenizer.decode([alt])
        assert it.n_positions == len(gen)
        # E's entropy and KL(E || L) at p, computed directly from both models' logits
        with torch.no_grad():
            ids = torch.tensor([ctx + gen])
            ze = c["e"](input_ids=ids).logits[0, len(ctx) + p - 1].double()
            zl = c["l"](input_ids=ids).logits[0, len(ctx) + p - 1].double()
        lp, lq = torch.log_softmax(ze, -1), torch.log_softmax(zl, -1)
        assert it.e_entropy == pytest.approx(float(-(lp.exp() * lp).sum()), abs=1e-4)
        assert it.kl == pytest.approx(float((lp.exp() * (lp - lq)).sum()), rel=1e-4)
        assert it.e_topk[0][0] == it.e_token and it.l_topk[0][0] == it.l_token
    assert res.chance[FORGOT].n == 4


def _random_draws(res, c) -> list[frozenset[int]]:
    """The random control's draws at the smallest budget, from the same public planner."""
    reps = []
    for (p, _), (_, gen) in zip(c["critical"], c["runs"], strict=True):
        s = Swapper()
        for t in range(len(gen)):
            s.decide(t in (p, *c["harmless"]), 30.0 if t == p else 1.0)
        reps.append(s)
    _, rnd = swap_rows(reps, res.forward.budgets, seed=0)
    return [sw.ordinals for i, j, sw in rnd if j == 0]


def test_swap_test_recovers_at_the_smallest_budget_and_the_control_does_not(case):
    c, res = case
    fwd = res.forward
    assert fwd is not None and fwd.budgets == list(BUDGETS)
    assert fwd.kl[:, 0].tolist() == [1, 1, 1, 1]  # one swap, at the top-KL disagreement: recovered
    assert fwd.swaps_kl[:, 0].tolist() == [1, 1, 1, 1]
    # the control swaps one of the five disagreeing positions at random: it recovers an item exactly
    # when its draw is the first disagreement (the critical one)
    draws = _random_draws(res, c)
    assert fwd.random[:, 0].tolist() == [int(0 in d) for d in draws]
    assert fwd.curves()["random"]["share"][0] < fwd.curves()["kl"]["share"][0] == 1.0
    rev = res.reverse
    assert rev is not None
    assert rev.kl[:, 0].tolist() == [1, 1, 1, 1]  # one of L's tokens, at p, breaks E
    assert rev.random[:, 0].tolist() == [int(0 in d) for d in draws]


def test_store_round_trip(case, tmp_path):
    _, res = case
    store = ResultsStore(tmp_path)
    assert write_flips(store, res.payload()) == "flips/E/L/prefix-id"
    assert store.attrs("flips/E/L/prefix-id")["result-version"] == "0.1.0"
    with store.reader() as r:
        back = FlipsResult.from_payload(read_flips_data(r, "flips/E/L/prefix-id"))
    assert [i.item_id for i in back.items] == [i.item_id for i in res.items]
    for a, b in zip(back.items, res.items, strict=True):
        ra, rb = a.row(), b.row()
        for k in ra:
            if isinstance(ra[k], float) and math.isnan(ra[k]):
                assert math.isnan(rb[k])
            elif k.endswith("topk"):
                np.testing.assert_allclose([x[1] for x in ra[k]], [x[1] for x in rb[k]], rtol=1e-6)
                assert [x[0] for x in ra[k]] == [x[0] for x in rb[k]]
            else:
                assert ra[k] == rb[k], k
    np.testing.assert_array_equal(back.forward.kl, res.forward.kl)
    np.testing.assert_array_equal(back.reverse.random, res.reverse.random)
    assert back.trajectories == res.trajectories
    assert back.chance[FORGOT] == res.chance[FORGOT]
    df = res.to_pandas()
    assert len(df) == 4 and df["recovered_kl@0.5%"].tolist() == [1, 1, 1, 1]


class TwoTurnEnv(fh.PrefixEnv):
    """The user answers the first reply once, so every episode has two assistant turns."""

    max_turns = 2

    def new_state(self, task):
        return {"replies": 0}

    def user_reply(self, task, state, text):
        state["replies"] += 1
        return "go on" if state["replies"] == 1 else None


def test_multi_turn_positions_span_every_turn(case, tokenizer):
    """Positions count every assistant turn in order, and each turn is scored on the exact ids it saw."""
    from aclarena.probes.lockstep import localize

    c, _ = case
    env = TwoTurnEnv()
    ts = c["tasks"][:2]
    sw = [Swapper() for _ in ts]
    trajs = play(ts, sw, c["e"], c["l"], tokenizer, driver="e", env_for=lambda t: env)
    for s, tr, (ctx, gen) in zip(sw, trajs, c["runs"][:2], strict=True):
        assert tr.turns == 2 and len(s.turns) == 2 and len(s.contexts) == 2
        assert s.turns[0] == gen and s.contexts[0] == ctx  # the first turn is the one-turn replay
        assert len(s.contexts[1]) > len(ctx) + len(gen)  # the second sees the first reply and the user's answer
        assert len(s.tokens) == len(s.kl) == sum(len(t) for t in s.turns)
    loc = localize(c["e"], c["l"], tokenizer, sw)
    for d, s, (p, _) in zip(loc, sw, c["critical"][:2], strict=True):
        assert d["n_positions"] == len(s.tokens) and d["diverge"] == p
        # the teacher-forced KL of every position equals the one computed online during the replay
        np.testing.assert_allclose(d["tf_kl"], np.asarray(s.kl), rtol=1e-3, atol=1e-5)


def test_random_control_is_matched_swap_for_swap(case):
    """Issue 49: the control drew its positions among E's replay's disagreements and made as many swaps as it
    met (here 4 where the top-KL arm, whose path ended sooner, made 2); it now makes the KL arm's count."""
    _, res = case
    for curve in (res.forward, res.reverse):
        assert (curve.swaps_random == curve.swaps_kl).all(), (curve.direction, curve.swaps_kl, curve.swaps_random)
        assert not any("fewer swaps" in n for n in curve.notes())
    # 0.5% and 5% of these short replies both come to one swap on every item: said in one line
    assert res.forward.notes() == ["forward: budgets 0.5%, 5% each come to at most one swap on every item, so "
                                   "their points repeat one measurement"]


def test_swap_notes_count_short_rows():
    from aclarena.diagnostics.flips import swap_notes

    kl = np.array([[1, 1, 3], [1, 2, 4]])
    notes = swap_notes("forward", [1.0, 10.0, 50.0], kl, np.array([[0, 1, 3], [1, 2, 2]]))
    assert notes == ["forward: the random control made fewer swaps than the top-KL arm in 2 of 6 (item, budget) rows: "
                     "the disagreements drawn never came in the live generation"]
