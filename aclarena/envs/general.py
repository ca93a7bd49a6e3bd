"""General knowledge: multiple-choice questions about the world (the MMLU role).

No tools: the model answers from what it knows. The facts are those of the search
world, whose passages are the base model's pretraining text (:func:`world_corpus`), so
this suite tracks knowledge acquired before the curriculum and how much of it each stage
keeps. Four options, one correct; distractors are other values of the same relation.

Reward: the letter after ``Answer:`` (or a reply that is just a letter) is the correct one.
"""

from __future__ import annotations

import random
import re
from typing import Any

from aclarena.envs.base import Environment, Task, Trajectory
from aclarena.envs.search import fact_key
from aclarena.envs.world import SINGLE_HOP, world

LETTERS = "ABCD"
SYSTEM = "Answer the multiple-choice question from your own knowledge. Reply with 'Answer: <letter>'."
ANSWER_RE = re.compile(r"Answer:\s*\(?([A-D])\b")
BARE_RE = re.compile(r"^\(?([A-D])\)?\.?$")


def extract_letter(text: str) -> str | None:
    found = ANSWER_RE.findall(text)
    if found:
        return found[-1]
    bare = BARE_RE.match(text.strip())
    return bare.group(1) if bare else None


class GeneralEnv(Environment):
    name = "general"
    variants = ("id",)
    max_turns = 1
    max_new_tokens = 8
    chance = 1 / len(LETTERS)

    def system_prompt(self, variant: str) -> str:
        return SYSTEM

    def _candidate(self, rng: random.Random, variant: str) -> tuple[str, str, dict[str, Any]]:
        w = world()
        relation = rng.choice(sorted(SINGLE_HOP))
        kind, templates = SINGLE_HOP[relation]
        subject = rng.choice(sorted(w.entities(kind)))
        answer = w.fact(subject, relation)
        others = [v for v in w.values_of(relation) if v != answer]
        options = [*rng.sample(others, 3), answer]
        rng.shuffle(options)
        correct = LETTERS[options.index(answer)]
        lines = [templates[0].format(s=subject)] + [f"{L}. {o}" for L, o in zip(LETTERS, options, strict=True)]
        return fact_key(subject, relation), "\n".join(lines), {"answer": correct, "options": options}

    def expert_actions(self, task: Task) -> list[str]:
        return [f"Answer: {task.data['answer']}"]

    def score(self, task: Task, trajectory: Trajectory) -> dict[str, float]:
        letter = extract_letter(trajectory.final_text)
        return {"reward": float(letter == task.data["answer"] and trajectory.n_failed == 0),
                "format": float(letter is not None)}
