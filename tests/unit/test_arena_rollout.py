"""The rollout loop without a model: parsing, failed steps, turn limits, scripted policies, rewards for trl."""

from __future__ import annotations

import json

import pytest

from aclarena.envs import get_env, sample_tasks
from aclarena.envs.base import render_tool_call
from aclarena.envs.data import arena_reward, completion_text, grpo_dataset
from aclarena.envs.experts import expert_trajectory, flatten_tool_calls, play, structure_messages, to_record
from aclarena.envs.rollout import Episode, parse_assistant, run_episodes


def test_parse_well_formed_calls():
    text = 'Let me look.\n<tool_call>{"name": "search", "arguments": {"query": "Oslo"}}</tool_call>' \
           '<tool_call>{"name": "get", "arguments": "{\\"id\\": 3}"}</tool_call>'
    p = parse_assistant(text)
    assert p.error is None and p.content == "Let me look."
    assert p.calls == [{"name": "search", "arguments": {"query": "Oslo"}}, {"name": "get", "arguments": {"id": 3}}]
    assert parse_assistant("<think>hmm</think>Answer: 4").content == "Answer: 4"


@pytest.mark.parametrize("text, fragment", [
    ("<tool_call>{not json}</tool_call>", "not JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', "expected {"),
    ('<tool_call>["search"]</tool_call>', "expected {"),
    ('<tool_call>{"name": "search", "arguments": [1]}</tool_call>', "must be an object"),
    ('<tool_call>{"name": "search", "arguments": "{oops"}</tool_call>', "are not JSON"),
    ('<tool_call>{"name": "search", "arguments": {}}', "unclosed"),
    ("text </tool_call>", "unclosed"),
])
def test_parse_malformed_calls(text, fragment):
    p = parse_assistant(text)
    assert p.error is not None and fragment in p.error
    assert p.calls == []


def _search_task():
    return sample_tasks("search/id", 1, seed=0)[0]


@pytest.mark.parametrize("bad", [
    "<tool_call>{broken</tool_call>",                       # malformed
    render_tool_call("google", {"query": "x"}),              # unknown tool
    render_tool_call("search", {"q": "x"}),                  # unknown argument
    render_tool_call("search", {}),                          # missing argument
    render_tool_call("search", {"query": "   "}),            # refused by the tool
    "<tool_call>" + json.dumps({"name": "search", "arguments": {"query": "a"}}),  # unclosed
])
def test_failed_steps_are_recorded_not_raised(bad):
    task = _search_task()
    ep = Episode(get_env("search"), task)
    assert ep.act(bad) is False
    step = ep.steps[-1]
    assert step.failed and step.error
    assert ep.messages[-1]["role"] == "tool" and ep.messages[-1]["content"].startswith("Error: ")
    # the episode goes on: the expert can still finish, but the failed step costs the reward
    for text in get_env("search").expert_actions(task):
        if not ep.done:
            ep.act(text)
    traj = ep.result()
    assert traj.n_failed == 1 and traj.reward == 0.0 and traj.metrics["em"] == 1.0


def test_turn_limit_ends_the_episode():
    task = _search_task()
    call = render_tool_call("search", {"query": task.data["hops"][0]})
    traj = play(task, [call] * 10)
    assert traj.end_reason == "turn_limit" and traj.turns == get_env("search").max_turns
    assert traj.reward == 0.0 and traj.final_text == ""
    traj = play(task, [call] * 10, max_turns=2)
    assert traj.turns == 2


def test_single_turn_tool_call_is_a_failed_step():
    task = sample_tasks("math/id", 1, seed=0)[0]
    traj = play(task, [render_tool_call("calculator", {"x": "1+1"})])
    assert traj.n_failed == 1 and traj.end_reason == "turn_limit" and traj.reward == 0.0
    assert "available tools: none" in traj.steps[0].error


def test_context_end_reason():
    task = _search_task()
    ep = Episode(get_env("search"), task)
    ep.act(None)
    assert ep.done and ep.result().end_reason == "context"
    with pytest.raises(RuntimeError):
        ep.act("more")


def test_run_episodes_batches_a_policy_in_task_order():
    tasks = sample_tasks("search/ood", 5, 0) + sample_tasks("ecom/id", 5, 0) + sample_tasks("math/id", 3, 0)
    scripts = {t.id: get_env(t.env).expert_actions(t) for t in tasks}
    by_prompt = {t.system + t.prompt: t.id for t in tasks}
    cursor = {t.id: 0 for t in tasks}
    calls = []

    def policy(convs):
        calls.append(len(convs))
        out = []
        for messages, _ in convs:
            tid = by_prompt[messages[0]["content"] + messages[1]["content"]]
            out.append(scripts[tid][cursor[tid]])
            cursor[tid] += 1
        return out

    trajs = run_episodes(tasks, policy, batch_size=4)
    assert [t.task.id for t in trajs] == [t.id for t in tasks]
    assert all(t.reward == 1.0 for t in trajs)
    assert max(calls) <= 4 and calls[0] == 4


def test_structured_and_flat_messages_render_identically(tokenizer):
    for suite in ("search/ood", "ecom/id", "ecom/ood", "math/id"):
        for task in sample_tasks(suite, 3, 0):
            traj = expert_trajectory(task)
            structured = structure_messages(traj.messages)
            kw = dict(tools=task.tool_list, tokenize=False)
            raw = tokenizer.apply_chat_template(traj.messages, **kw)
            assert tokenizer.apply_chat_template(structured, **kw) == raw
            assert tokenizer.apply_chat_template(flatten_tool_calls(structured), **kw) == raw
            assert flatten_tool_calls(structured) == [{k: v for k, v in m.items()} for m in traj.messages]


def test_sft_record_has_assistant_mask(tokenizer):
    rec = to_record(expert_trajectory(sample_tasks("ecom/id", 1, 0)[0]))
    out = tokenizer.apply_chat_template(rec["messages"], tools=rec["tools"], tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    mask = out["assistant_masks"]
    assert 0 < sum(mask) < len(mask)
    text = tokenizer.decode([i for i, m in zip(out["input_ids"], mask, strict=True) if m])
    assert '"name": "find_user"' in text and "yes" not in text.replace("(yes/no)", "")


def test_arena_reward_for_trl():
    rows = grpo_dataset("math", 4, seed=0) + grpo_dataset("if", 2, seed=0) + grpo_dataset("general", 2, seed=0)
    from aclarena.envs.base import task_from_record

    tasks = [task_from_record(r["task"]) for r in rows]
    good = [get_env(t.env).expert_actions(t)[0] for t in tasks]
    as_messages = [[{"role": "assistant", "content": g}] for g in good]
    assert arena_reward([r["prompt"] for r in rows], good, task=[r["task"] for r in rows], domain=["x"] * 8) == [1.0] * 8
    assert arena_reward([r["prompt"] for r in rows], as_messages, task=[r["task"] for r in rows]) == [1.0] * 8
    assert arena_reward(None, ["nonsense"] * 8, task=[r["task"] for r in rows]) == [0.0] * 8
    assert completion_text({"content": "x"}) == "x"
    with pytest.raises(ValueError, match="multi-turn"):
        grpo_dataset("search", 2)


def test_hf_ready_records_survive_a_mixed_dataset(tokenizer):
    import datasets

    from aclarena.envs.experts import expert_dataset, hf_ready

    recs = (expert_dataset("ecom", 2, 0) + expert_dataset("search", 2, 0) + expert_dataset("math", 2, 0)
            + expert_dataset("ecom", 2, 0, suite="ood"))
    want = [tokenizer.apply_chat_template(r["messages"], tools=r["tools"], tokenize=False) for r in recs]
    ds = datasets.Dataset.from_list(hf_ready(recs))
    for i, w in enumerate(want):
        row = ds[i]
        tools = json.loads(row["tools"]) if row["tools"] else None  # what trl's SFTTrainer does
        assert tokenizer.apply_chat_template(row["messages"], tools=tools, tokenize=False) == w
    # the structured records do not survive it: Arrow merges every tool's parameters
    raw = datasets.Dataset.from_list(recs)[0]
    assert tokenizer.apply_chat_template(raw["messages"], tools=raw["tools"], tokenize=False) != want[0]


def test_trajectory_tokens_mask_the_policy_turns(tokenizer):
    from aclarena.envs.data import trajectory_tokens

    traj = expert_trajectory(sample_tasks("search/ood", 1, 0)[0])
    ids, mask = trajectory_tokens(tokenizer, traj.messages, traj.task.tool_list)
    assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
    generated = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert "Answer: " + traj.task.data["answer"] in generated and "encyclopedia" not in generated
