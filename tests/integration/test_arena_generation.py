"""Rollouts with a real (tiny, untrained) model: batching, left padding, context limits, rejection sampling."""

from __future__ import annotations

import pytest

from aclarena.envs import sample_tasks
from aclarena.envs.rollout import generate_trajectories, model_policy, run_episodes


@pytest.fixture(scope="module")
def tiny(tokenizer):
    from aclarena.models.tiny import build_model, tiny_config

    return build_model(tiny_config(tokenizer), seed=0), tokenizer


def test_batched_generation_equals_one_by_one(tiny):
    model, tok = tiny
    tasks = sample_tasks("math/id", 3, 0) + sample_tasks("ecom/id", 2, 0) + sample_tasks("if/ood", 2, 0)
    tok.padding_side = "right"  # as a tokenizer saved by SFTTrainer comes back: the policy must not care
    batched = generate_trajectories(model, tok, tasks, batch_size=8, max_new_tokens=12)
    single = generate_trajectories(model, tok, tasks, batch_size=1, max_new_tokens=12)
    assert [t.steps[0].text for t in batched] == [t.steps[0].text for t in single]
    assert all(len(t.steps[0].text) > 0 for t in batched)
    assert [t.task.id for t in batched] == [t.id for t in tasks]


def test_sampling_is_seeded(tiny):
    model, tok = tiny
    tasks = sample_tasks("general", 4, 0)
    a = generate_trajectories(model, tok, tasks, do_sample=True, seed=3, max_new_tokens=6)
    b = generate_trajectories(model, tok, tasks, do_sample=True, seed=3, max_new_tokens=6)
    c = generate_trajectories(model, tok, tasks, do_sample=True, seed=4, max_new_tokens=6)
    assert [t.steps[0].text for t in a] == [t.steps[0].text for t in b]
    assert [t.steps[0].text for t in a] != [t.steps[0].text for t in c]


def test_full_context_ends_the_episode(tiny):
    model, tok = tiny
    tasks = sample_tasks("ecom/id", 2, 0) + sample_tasks("general", 1, 0)
    trajs = run_episodes(tasks, model_policy(model, tok, max_new_tokens=8, max_context=400))
    assert [t.end_reason for t in trajs[:2]] == ["context", "context"] and trajs[0].turns == 0
    assert trajs[2].end_reason == "answer" and all(t.reward == 0.0 for t in trajs)


def test_rejection_sampling_keeps_reward_one(tiny, monkeypatch):
    model, tok = tiny
    import aclarena.envs.experts as experts

    tasks = sample_tasks("search/id", 3, 0)
    good = [experts.expert_trajectory(t) for t in tasks]
    bad = experts.play(tasks[0], ["Answer: nobody"])

    def fake(model_, tok_, repeated, **kwargs):
        assert kwargs["do_sample"] and len(repeated) == 6
        return [good[0], good[0], bad, good[1], bad, good[2]]

    monkeypatch.setattr(experts, "generate_trajectories", fake)
    recs = experts.rejection_sample(model, tok, tasks, k=2)
    assert [r["task_id"] for r in recs] == [t.id for t in tasks]  # the duplicate of task 0 is kept once
    assert all(any(m.get("tool_calls") for m in r["messages"]) for r in recs)
    monkeypatch.undo()
    real = experts.rejection_sample(model, tok, tasks, k=2, seed=0)
    assert real == []  # an untrained model solves nothing
