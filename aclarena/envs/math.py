"""Math: word problems with a unique integer answer (the study's DAPO-Math / AIME role).

In-domain: a start value and one or two operations (2-3 operands), operands 1-9 and every
intermediate value at most 20 (a 3M-parameter model learns such arithmetic in minutes;
operands up to 30 it does not).
Out-of-domain: three or four operations on two-digit numbers. The split key is the
arithmetic itself (start, operations, operands), so no evaluation problem shares its
computation with a training problem, whatever the names and objects in the story.

Reward: the integer after the last ``Answer:`` of the reply equals the answer.
"""

from __future__ import annotations

import random
import re
from typing import Any

from aclarena.envs.base import Environment, Task, Trajectory

NAMES = ["Mia", "Leo", "Ava", "Sam", "Zoe", "Max", "Ivy", "Ben", "Eva", "Tom", "Amy", "Dan", "Lia", "Kai", "Ana",
         "Raj"]
ITEMS = ["apples", "marbles", "stickers", "pencils", "cookies", "coins", "shells", "stamps", "cards", "books", "eggs",
         "flowers"]
ADD = ["{name} buys {k} more.", "{name} finds {k} more.", "A friend gives {name} {k} more."]
SUB = ["{name} gives away {k}.", "{name} loses {k}.", "{name} uses {k}."]
MUL = ["Then {name} has {k} times as many.", "The number of {item} grows {k} times."]
SYMBOL = {"add": "+", "sub": "-", "mul": "*"}
ID_MAX = 20

SYSTEM = ("You are a math tutor. Solve the word problem step by step, one operation per step, "
          "and end with 'Answer: <number>'.")
ANSWER_RE = re.compile(r"Answer:\s*(-?\d+)")


def apply(op: str, a: int, k: int) -> int:
    return a + k if op == "add" else a - k if op == "sub" else a * k


class MathEnv(Environment):
    name = "math"
    max_turns = 1
    max_new_tokens = 64

    def system_prompt(self, variant: str) -> str:
        return SYSTEM

    def _candidate(self, rng: random.Random, variant: str) -> tuple[str, str, dict[str, Any]]:
        if variant == "id":
            # every intermediate value stays within 1..ID_MAX: one- and two-digit facts a tiny model can learn
            n_ops, lo, hi, mul_hi, cap = rng.randint(1, 2), 1, 9, 3, ID_MAX
        else:
            n_ops, lo, hi, mul_hi, cap = rng.randint(3, 4), 10, 99, 4, None
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        value = rng.randint(lo, hi)
        start = value
        ops: list[tuple[str, int]] = []
        sentences = [f"{name} has {value} {item}."]
        for _ in range(n_ops):
            room = hi if cap is None else min(hi, cap - value)
            choices = (["add"] if room >= lo else []) + (["sub"] if value >= lo + 1 else [])
            if cap is None or value * 2 <= cap:
                choices.append("mul")
            op = rng.choice(choices)
            if op == "mul":
                k = rng.randint(2, mul_hi if cap is None else max(2, min(mul_hi, cap // value)))
                template = rng.choice(MUL)
            elif op == "sub":
                k = rng.randint(lo, min(hi, value - 1))
                template = rng.choice(SUB)
            else:
                k = rng.randint(lo, room)
                template = rng.choice(ADD)
            sentences.append(template.format(name=name, k=k, item=item))
            ops.append((op, k))
            value = apply(op, value, k)
        sentences.append(f"How many {item} does {name} have now?")
        key = "math|" + str(start) + "|" + "|".join(f"{o}{k}" for o, k in ops)
        data = {"start": start, "ops": [[o, k] for o, k in ops], "answer": value}
        return key, " ".join(sentences), data

    def expert_actions(self, task: Task) -> list[str]:
        value = task.data["start"]
        parts = []
        for op, k in task.data["ops"]:
            new = apply(op, value, k)
            parts.append(f"{value} {SYMBOL[op]} {k} = {new}.")
            value = new
        parts.append(f"Answer: {value}")
        return [" ".join(parts)]

    def score(self, task: Task, trajectory: Trajectory) -> dict[str, float]:
        found = ANSWER_RE.findall(trajectory.final_text)
        correct = bool(found) and int(found[-1]) == int(task.data["answer"]) and trajectory.n_failed == 0
        return {"reward": float(correct), "format": float(bool(found))}
