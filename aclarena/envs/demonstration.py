"""One-shot scoring: a task played after one expert demonstration in the same conversation.

A pretrained base has not seen any arena task format, so it scores 0 on the suites until a stage
teaches the format. What it can do, if its pretraining gave it the skills a real base has
(copying names and ids from the context, reading a tool result, following the shape of an
example), is imitate: shown one expert conversation of the domain (a train-split task, played
by the scripted expert) before the evaluation task, it should call the right tool with the
right entity and answer from the result. That is how base models are scored before
post-training (few-shot prompting), and it is the shipped base's check of being able to learn
the arena at all: :func:`one_shot_scores` > 0 on every domain.

The demonstration goes between the system prompt (and tools) and the task's own user message:
the environment sees only the task's turns, so rewards are computed exactly as in the suite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aclarena.envs import DOMAINS
from aclarena.envs.rollout import Conversation, Policy, model_policy, run_episodes

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def demonstration(domain: str, seed: int = 0, suite: str = "id") -> list[dict[str, Any]]:
    """The turns of one expert conversation on a train task of ``domain`` (system prompt excluded)."""
    from aclarena.envs import get_env
    from aclarena.envs.experts import expert_trajectory, flatten_tool_calls

    task = get_env(domain).generate(1, seed=seed, split="train", variant=suite)[0]
    messages = flatten_tool_calls(expert_trajectory(task).messages)
    return [dict(m) for m in messages if m["role"] != "system"]


def with_demonstration(policy: Policy, demo: Sequence[dict[str, Any]]) -> Policy:
    """``policy`` that sees ``demo`` after the system prompt of every conversation."""

    def shown(convs: Sequence[Conversation]) -> list[str | None]:
        out = []
        for messages, tools in convs:
            head = [messages[0]] if messages and messages[0]["role"] == "system" else []
            out.append((head + list(demo) + messages[len(head):], tools))
        return policy(out)

    return shown


def one_shot_scores(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, n: int = 20, seed: int = 0,
                    domains: Sequence[str] = DOMAINS, batch_size: int = 16) -> dict[str, float]:
    """Mean greedy reward per domain on ``n`` in-domain evaluation tasks, each after one demonstration."""
    from aclarena.envs import get_env, sample_tasks

    tokenizer.padding_side = "left"
    model.eval()
    scores = {}
    for domain in domains:
        env = get_env(domain)
        policy = with_demonstration(model_policy(model, tokenizer, max_new_tokens=env.max_new_tokens),
                                    demonstration(domain, seed=seed))
        trajs = run_episodes(sample_tasks(f"{domain}/id", n, seed=seed, split="eval"), policy, batch_size=batch_size)
        scores[domain] = sum(t.reward for t in trajs if t is not None) / n
    return scores
