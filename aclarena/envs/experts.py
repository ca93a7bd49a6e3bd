"""Scripted experts and rejection sampling: the SFT data of the mini arena.

At small scale an untrained model samples no correct trajectory, so supervised data
comes from scripted expert policies: each environment knows the right actions for a task
(:meth:`Environment.expert_actions`), and playing them through the environment yields a
full conversation with real tool results and scripted-user replies. For models that can
already solve tasks, :func:`rejection_sample` keeps their reward-1 samples instead.

Records are chat conversations ready for trl's ``SFTTrainer``::

    {"messages": [system, user, assistant (tool_calls), tool, ..., assistant],
     "tools": [...] or None, "domain": "search", "suite": "search/id", "task_id": "..."}

Assistant tool calls are structured (``{"type": "function", "function": {"name",
"arguments"}}``); the chat template renders them back to exactly the text the expert
wrote (:func:`flatten_tool_calls` gives the text form).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aclarena.envs.base import Task, Trajectory
from aclarena.envs.rollout import Episode, env_of, generate_trajectories, parse_assistant

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def play(task: Task, actions: Sequence[str], *, max_turns: int | None = None) -> Trajectory:
    """Play fixed assistant turns on ``task``; if the turns run out first, an empty reply ends it."""
    episode = Episode(env_of(task), task, max_turns=max_turns)
    for text in actions:
        if episode.done:
            break
        episode.act(text)
    while not episode.done:
        episode.act("")
    return episode.result()


def expert_trajectory(task: Task) -> Trajectory:
    """The expert's trajectory on ``task`` (reward 1 by construction; tests check it)."""
    actions = env_of(task).expert_actions(task)
    episode = Episode(env_of(task), task)
    for text in actions:
        if episode.done:
            raise RuntimeError(f"expert of {task.env} plays past the end of the episode on {task.id}")
        episode.act(text)
    if not episode.done:
        raise RuntimeError(f"expert of {task.env} stops before the end of the episode on {task.id}")
    return episode.result()


def structure_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assistant turns with their ``<tool_call>`` blocks as structured ``tool_calls`` (well-formed ones only)."""
    out = []
    for m in messages:
        if m["role"] != "assistant" or "<tool_call>" not in (m.get("content") or ""):
            out.append(dict(m))
            continue
        parsed = parse_assistant(m["content"])
        if parsed.error is not None:
            out.append(dict(m))  # keep malformed text as it was generated
            continue
        out.append({"role": "assistant", "content": parsed.content,
                    "tool_calls": [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                                   for c in parsed.calls]})
    return out


def flatten_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inverse of :func:`structure_messages`: tool calls written into the content as text."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if m["role"] != "assistant" or not calls:
            out.append({k: v for k, v in m.items() if k != "tool_calls"})
            continue
        parts = [m["content"]] if m.get("content") else []
        for c in calls:
            f = c.get("function", c)
            parts.append("<tool_call>" + json.dumps({"name": f["name"], "arguments": f["arguments"]},
                                                    ensure_ascii=False) + "</tool_call>")
        out.append({"role": "assistant", "content": "\n".join(parts)})
    return out


def to_record(traj: Trajectory, *, structured: bool = True) -> dict[str, Any]:
    """An SFT record of a trajectory (see the module docstring)."""
    messages = structure_messages(traj.messages) if structured else [dict(m) for m in traj.messages]
    return {"messages": messages, "tools": traj.task.tool_list, "domain": traj.task.env, "suite": traj.task.suite,
            "task_id": traj.task.id}


def hf_ready(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records safe to put in one ``datasets.Dataset`` with other domains' records.

    Arrow gives a column one schema: mixing domains merges every tool's parameters (and
    every call's arguments) into one struct, and the chat template then lists parameters a
    tool does not have. So tool calls are written into the assistant text (identical
    rendering) and ``tools`` becomes a JSON string, which trl's SFTTrainer decodes (trl >= 1.x).
    """
    return [{**r, "messages": flatten_tool_calls(r["messages"]),
             "tools": json.dumps(r["tools"], ensure_ascii=False) if r.get("tools") is not None else None}
            for r in records]


def expert_dataset(domain: str, n: int, seed: int = 0, *, split: str = "train", suite: str = "id",
                   structured: bool = True) -> list[dict[str, Any]]:
    """``n`` expert conversations of ``domain`` (SFT data), from the ``train`` split by default."""
    from aclarena.envs import get_env

    tasks = get_env(domain).generate(n, seed=seed, split=split, variant=suite)
    return [to_record(expert_trajectory(t), structured=structured) for t in tasks]


def rejection_sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tasks: Sequence[Task],
    *,
    k: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 32,
    structured: bool = True,
    unique: bool = True,
) -> list[dict[str, Any]]:
    """Sample ``k`` trajectories per task from ``model`` and keep the reward-1 ones as SFT records.

    With ``unique`` a conversation sampled twice is kept once.
    """
    if k < 1:
        raise ValueError(f"`k` must be >= 1, got {k}")
    repeated = [t for t in tasks for _ in range(k)]
    trajs = generate_trajectories(model, tokenizer, repeated, do_sample=True, temperature=temperature, seed=seed,
                                  batch_size=batch_size)
    return keep_verified([t for t in trajs if t is not None], structured=structured, unique=unique)


def keep_verified(trajectories: Sequence[Trajectory], *, max_per_task: int | None = None, structured: bool = True,
                  unique: bool = True) -> list[dict[str, Any]]:
    """SFT records of the trajectories the environment rewarded 1 (verified correct), in order.

    With ``unique`` a conversation seen twice is kept once; ``max_per_task`` caps the records
    kept per task (the first ones sampled).
    """
    out, seen = [], set()
    per_task: dict[str, int] = {}
    for tr in trajectories:
        if tr.reward < 1.0:
            continue
        key = json.dumps(tr.messages, sort_keys=True)
        if unique and key in seen:
            continue
        if max_per_task is not None and per_task.get(tr.task.id, 0) >= max_per_task:
            continue
        seen.add(key)
        per_task[tr.task.id] = per_task.get(tr.task.id, 0) + 1
        out.append(to_record(tr, structured=structured))
    return out
