"""Training-side helpers: tokenizer text, GRPO prompt datasets and a trl-compatible reward.

* :func:`tokenizer_corpus`: the world's passages and expert conversations as plain text,
  for training the mini arena's tokenizer (:func:`aclarena.models.tiny.train_tokenizer`)
  and for base pretraining.
* :func:`grpo_dataset` + :func:`arena_reward`: single-turn domains (math, if, general) for
  trl's ``GRPOTrainer``: a conversational ``prompt`` column and a ``task`` column (the
  task as JSON) that trl passes to the reward function as a keyword argument.
* Multi-turn tool domains (search, ecom) are rolled out with
  :func:`aclarena.envs.rollout.run_episodes` / :class:`aclarena.envs.rollout.Episode`,
  whose trajectories carry the reward.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aclarena.envs.base import task_from_record
from aclarena.envs.experts import expert_trajectory
from aclarena.envs.rollout import Episode, env_of
from aclarena.envs.world import world_corpus

SINGLE_TURN = ("math", "if", "general")


def tokenizer_corpus(n_per_suite: int = 200, seed: int = 0) -> list[str]:
    """Text for tokenizer training: world passages, system prompts, tool lists and expert conversations."""
    from aclarena.envs import SUITES, sample_tasks

    texts = list(world_corpus())
    for suite in SUITES:
        for split in ("train", "eval"):
            for task in sample_tasks(suite, n_per_suite, seed=seed, split=split):
                traj = expert_trajectory(task)
                parts = [m["content"] for m in traj.messages]
                for t in task.tools or ():
                    f = t["function"]
                    parts.append(f"{f['name']}({', '.join(f['parameters']['properties'])}): {f['description']}")
                texts.append("\n".join(parts))
    return texts


def grpo_dataset(domain: str, n: int, seed: int = 0, *, split: str = "train", suite: str = "id") -> list[dict[str, Any]]:
    """Prompt-only records for GRPO: ``{"prompt": [system, user], "task": "<json>", "domain": ...}``."""
    from aclarena.envs import get_env

    if domain not in SINGLE_TURN:
        raise ValueError(f"{domain!r} is a multi-turn tool domain; roll it out with aclarena.envs.rollout.run_episodes")
    tasks = get_env(domain).generate(n, seed=seed, split=split, variant=suite)
    return [{"prompt": t.messages, "task": json.dumps(t.to_record(), ensure_ascii=False), "domain": t.env}
            for t in tasks]


def completion_text(completion: Any) -> str:
    """A trl completion (a string, or a list of messages for conversational prompts) as text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content") or "" for m in completion if m.get("role", "assistant") == "assistant")
    if isinstance(completion, dict):
        return completion.get("content") or ""
    raise TypeError(f"unsupported completion type {type(completion).__name__}")


def arena_reward(prompts: Sequence[Any], completions: Sequence[Any], task: Sequence[str], **kwargs: Any) -> list[float]:
    """Reward for trl's GRPOTrainer on single-turn domains: 1.0 when the completion solves its task.

    ``task`` is the dataset column of :func:`grpo_dataset` (trl passes dataset columns as
    keyword arguments); extra columns are ignored.
    """
    rewards = []
    for completion, record in zip(completions, task, strict=True):
        t = task_from_record(record)
        episode = Episode(env_of(t), t)
        episode.act(completion_text(completion))
        if not episode.done:
            raise ValueError(f"{t.env} needs several turns; use aclarena.envs.rollout.run_episodes")
        rewards.append(episode.result().reward)
    return rewards


def trajectory_tokens(tokenizer: Any, messages: list[dict[str, Any]],
                      tools: list[dict[str, Any]] | None = None) -> tuple[list[int], list[int]]:
    """Token ids of a whole conversation and its assistant mask (1 on tokens the policy generated).

    For custom multi-turn RL: score ``Trajectory.messages`` with the policy and weight the
    log-probabilities of masked tokens by the advantage. Needs a chat template with
    ``{% generation %}`` markers (the mini arena's has them). Re-tokenised text can differ
    from the sampled ids where BPE would merge differently; keep the sampled ids if exactness
    matters.
    """
    out = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    ids = list(out["input_ids"])
    mask = list(out["assistant_masks"])
    if not any(mask):
        raise ValueError("the chat template marks no assistant tokens; it needs {% generation %} markers")
    return ids, mask
