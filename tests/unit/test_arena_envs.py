"""The mini arena's environments: experts score 1, corruptions score 0, splits are disjoint."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from arena_helpers import corruptions

from aclarena.envs import (
    DOMAINS,
    SUITES,
    get_env,
    parse_suite,
    resolve_suites,
    sample_prompts,
    sample_tasks,
    suite_chance,
)
from aclarena.envs.base import split_of
from aclarena.envs.experts import expert_dataset, expert_trajectory, play
from aclarena.envs.world import BM25, search, world
from aclarena.errors import AclarenaError

N_TASKS = 200


@pytest.mark.parametrize("suite", list(SUITES))
def test_expert_scores_one_and_corruptions_zero(suite):
    tasks = sample_tasks(suite, N_TASKS, seed=0) + sample_tasks(suite, N_TASKS // 2, seed=1, split="train")
    seen: Counter[str] = Counter()
    for task in tasks:
        traj = expert_trajectory(task)
        assert traj.reward == 1.0, (task.prompt, [s.text for s in traj.steps], traj.metrics, traj.state.get("violations"))
        assert traj.n_failed == 0 and traj.end_reason == "answer"
        for name, actions in corruptions(task).items():
            bad = play(task, actions)
            assert bad.reward == 0.0, (name, task.prompt, actions, bad.metrics)
            seen[name] += 1
    # every corruption kind of the domain was exercised many times
    assert all(v >= 10 for v in seen.values()), seen
    if suite.startswith("ecom"):
        assert {"do_nothing", "forbidden_action", "unconfirmed_write", "wrong_tool", "claims_done_without_acting",
                "act_after_no"} <= set(seen)
    if suite.startswith("search"):
        assert {"wrong_answer", "wrong_tool", "malformed_call"} <= set(seen)


@pytest.mark.parametrize("suite", list(SUITES))
def test_generators_are_deterministic_per_seed(suite):
    a = [t.to_record() for t in sample_tasks(suite, 20, seed=7)]
    b = [t.to_record() for t in sample_tasks(suite, 20, seed=7)]
    c = [t.to_record() for t in sample_tasks(suite, 20, seed=8)]
    assert a == b
    assert [t["id"] for t in a] != [t["id"] for t in c]
    assert len({t["prompt"] for t in a}) == 20  # distinct within a draw


@pytest.mark.parametrize("suite", list(SUITES))
def test_train_and_eval_never_share_a_task(suite):
    train = sample_tasks(suite, 600, seed=0, split="train")
    evals = sample_tasks(suite, 150, seed=0, split="eval") + sample_tasks(suite, 150, seed=1, split="eval")
    assert {t.key for t in train}.isdisjoint({t.key for t in evals})
    assert {t.prompt for t in train}.isdisjoint({t.prompt for t in evals})
    assert all(split_of(t.key) == "train" for t in train) and all(split_of(t.key) == "eval" for t in evals)


def test_split_share_is_about_a_fifth():
    keys = [f"k{i}" for i in range(5000)]
    share = sum(split_of(k) == "eval" for k in keys) / len(keys)
    assert 0.17 < share < 0.23


def test_ood_differs_from_id():
    math_id, math_ood = sample_tasks("math/id", 100, 0), sample_tasks("math/ood", 100, 0)
    assert max(len(t.data["ops"]) for t in math_id) <= 2 < min(len(t.data["ops"]) for t in math_ood)
    assert max(t.data["start"] for t in math_id) <= 9 < min(t.data["start"] for t in math_ood)
    assert all(len(t.data["hops"]) == 1 for t in sample_tasks("search/id", 50, 0))
    assert all(len(t.data["hops"]) == 2 for t in sample_tasks("search/ood", 50, 0))
    from aclarena.envs.ifeval import ID_TYPES, OOD_TYPES

    id_types = {c["type"] for t in sample_tasks("if/id", 300, 0) for c in t.data["constraints"]}
    ood = sample_tasks("if/ood", 300, 0)
    assert id_types == set(ID_TYPES) and len(ID_TYPES) >= 12
    assert {c["type"] for t in ood for c in t.data["constraints"]} >= set(OOD_TYPES)
    assert all(any(c["type"] in OOD_TYPES for c in t.data["constraints"]) or len(t.data["constraints"]) == 3
               for t in ood)


def test_environment_identity_tells_every_suite_apart():
    """A router sees only the system prompt and tools: they must differ between domains."""
    identities = {}
    for suite in SUITES:
        t = sample_tasks(suite, 1, 0)[0]
        identities[suite] = (t.system, json.dumps(t.tools))
    by_domain = {s.split("/")[0]: identities[s] for s in SUITES}
    assert len(set(by_domain.values())) == len(by_domain)
    for d in DOMAINS:
        if d != "ecom":  # ecom's OOD is another service (telecom): a different identity on purpose
            assert identities[f"{d}/id"] == identities[f"{d}/ood"]
    assert identities["ecom/id"] != identities["ecom/ood"]


def test_ecom_tool_sets():
    for variant in ("id", "ood"):
        tools = get_env("ecom").tools(variant)
        assert len(tools) >= 12
        for t in tools:
            f = t["function"]
            assert t["type"] == "function" and f["name"] and f["description"]
            assert f["parameters"]["type"] == "object"
            assert set(f["parameters"]["required"]) <= set(f["parameters"]["properties"])
    retail = {t["function"]["name"] for t in get_env("ecom").tools("id")}
    telecom = {t["function"]["name"] for t in get_env("ecom").tools("ood")}
    assert len(retail & telecom) == 1  # only transfer_to_human is shared


def test_ecom_refusal_and_decline_tasks_occur():
    tasks = sample_tasks("ecom/id", 300, 0) + sample_tasks("ecom/ood", 300, 0)
    reqs = [t.data["request"] for t in tasks]
    assert 0.15 < sum(not r["allowed"] for r in reqs) / len(reqs) < 0.45
    assert sum(r["allowed"] and not r["confirm"] for r in reqs) > 20
    assert {r["kind"] for r in reqs if r["allowed"]} >= {"cancel", "return", "exchange", "address", "payment",
                                                          "plan", "suspend", "resume", "data", "pay"}


def test_bm25_finds_each_entity_passage_first():
    w = world()
    for title, text in w.passages:
        assert search(title, 2)[0] == text
    bm = BM25(["a cat sat", "a dog sat on a dog", "birds fly"])
    assert bm.top("dog", 3) == [1]
    assert bm.top("sat", 3) == [0, 1]  # the shorter document first
    assert bm.top("zebra", 3) == []


def test_search_expert_reads_the_answer_from_the_tool():
    for task in sample_tasks("search/ood", 100, 0):
        traj = expert_trajectory(task)
        tool_text = "\n".join(m["content"] for m in traj.messages if m["role"] == "tool")
        assert task.data["hops"][1] in tool_text and task.data["answer"] in tool_text


def test_search_f1_and_normalisation():
    from aclarena.envs.search import f1_score, normalize_answer

    assert normalize_answer("The  Lune River!") == "lune river"
    assert f1_score("Lune", "Lune River") == pytest.approx(2 / 3)
    assert f1_score("x", "Lune River") == 0.0


def test_unknown_names_get_did_you_mean():
    with pytest.raises(AclarenaError, match="did you mean 'math'"):
        get_env("maths")
    with pytest.raises(AclarenaError, match="did you mean 'math/id'"):
        parse_suite("math/idd")
    with pytest.raises(AclarenaError, match="did you mean 'ood'"):
        resolve_suites("id,oodd")
    with pytest.raises(AclarenaError, match="unknown suite of math"):
        get_env("math").generate(3, variant="odd")
    with pytest.raises(AclarenaError, match="unknown split"):
        sample_tasks("math/id", 3, split="test")
    assert resolve_suites("id,general") == [f"{d}/id" for d in DOMAINS] + ["general"]
    assert resolve_suites("search") == ["search/id", "search/ood"]


def test_sample_prompts_shape():
    rows = sample_prompts("ecom", 4, seed=0)
    assert len(rows) == 4
    for r in rows:
        assert [m["role"] for m in r["messages"]] == ["system", "user"]
        assert r["domain"] == "ecom" and r["suite"] == "ecom/id" and len(r["tools"]) >= 12
    assert sample_prompts("math", 2, seed=0, suite="ood")[0]["tools"] is None
    assert sample_prompts("general", 2, seed=0)[0]["suite"] == "general"


def test_expert_dataset_records():
    rows = expert_dataset("ecom", 5, seed=0)
    for r in rows:
        roles = [m["role"] for m in r["messages"]]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        calls = [m for m in r["messages"] if m.get("tool_calls")]
        assert calls and all(c["tool_calls"][0]["type"] == "function" for c in calls)
        assert all("<tool_call>" not in (m.get("content") or "") for m in r["messages"])
    assert all(r["tools"] is None for r in expert_dataset("math", 3, seed=0))


def test_docs_samples_are_current():
    from pathlib import Path

    from aclarena.envs.samples import current_block, render_samples

    doc = Path(__file__).resolve().parents[2] / "docs" / "arena.md"
    assert current_block(doc) == render_samples(), "docs/arena.md is stale: run python -m aclarena.envs.samples docs/arena.md"


@pytest.mark.parametrize("suite", ["search/id", "general", "math/id"])
def test_eval_draws_distinct_facts_and_computations(suite):
    tasks = sample_tasks(suite, 100, seed=0)
    assert len({t.key for t in tasks}) == 100


def test_suite_chance_is_the_score_of_guessing():
    # general: every letter guessed once per task scores exactly one in four on average
    tasks = sample_tasks("general", 50, seed=0)
    rewards = [play(t, [f"Answer: {letter}"]).reward for t in tasks for letter in "ABCD"]
    assert suite_chance("general") == sum(rewards) / len(rewards) == 0.25
    # the domains' suites: a guess earns nothing; a suite the arena does not know (an lm-eval task) neither
    assert all(suite_chance(s) == 0.0 for s in SUITES if s != "general")
    assert suite_chance("lm-eval/mmlu") == 0.0
