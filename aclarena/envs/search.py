"""Search: questions about the generated world, answered with a local ``search`` tool (the NQ role).

The world (:mod:`aclarena.envs.world`) has fictional people, cities and companies, so the
model must search rather than recall. ``search(query)`` returns the two best passages by
BM25. In-domain questions are single-hop (one fact); out-of-domain questions are
multi-hop (two facts chained, the study's multi-hop search suite). The split key is the
fact asked (or the chain of facts), shared with the general suite.

Reward: exact match of the normalised answer after ``Answer:`` (SQuAD normalisation:
lowercase, no punctuation or articles), and no failed tool step; token F1 is reported too.
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from typing import Any

from aclarena.envs.base import (
    Environment,
    Task,
    ToolError,
    Trajectory,
    check_args,
    render_tool_call,
    tool_schema,
)
from aclarena.envs.world import MULTI_HOP, SINGLE_HOP, search, world

SYSTEM = ("You are a research assistant with access to an encyclopedia search engine. Look facts up with the "
          "search tool before answering, then reply with 'Answer: <answer>'.")
TOOLS = [tool_schema("search", "Search the encyclopedia; returns the best passages.",
                     {"query": ("string", "keywords to search for")})]
TOP_K = 2
FINAL_RE = re.compile(r"Answer:\s*(.+)")


def normalize_answer(s: str) -> str:
    """SQuAD's answer normalisation: lowercase, drop punctuation and articles, squeeze spaces."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1_score(prediction: str, gold: str) -> float:
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def extract_answer(text: str) -> str | None:
    found = FINAL_RE.findall(text)
    return found[-1].strip() if found else None


def fact_key(subject: str, relation: str) -> str:
    return f"fact|{subject}|{relation}"


class SearchEnv(Environment):
    name = "search"
    max_turns = 4
    max_new_tokens = 48

    def system_prompt(self, variant: str) -> str:
        return SYSTEM

    def tools(self, variant: str) -> list[dict[str, Any]]:
        return [dict(t) for t in TOOLS]

    def _candidate(self, rng: random.Random, variant: str) -> tuple[str, str, dict[str, Any]]:
        w = world()
        if variant == "id":
            relation = rng.choice(sorted(SINGLE_HOP))
            kind, templates = SINGLE_HOP[relation]
            subject = rng.choice(sorted(w.entities(kind)))
            question = rng.choice(templates).format(s=subject)
            answer = w.fact(subject, relation)
            return fact_key(subject, relation), question, {"answer": answer, "hops": [subject]}
        r1, r2 = rng.choice(sorted(MULTI_HOP))
        kind = SINGLE_HOP[r1][0]
        subject = rng.choice(sorted(w.entities(kind)))
        middle = w.fact(subject, r1)
        answer = w.fact(middle, r2)
        question = rng.choice(MULTI_HOP[(r1, r2)]).format(s=subject)
        return f"fact2|{subject}|{r1}|{r2}", question, {"answer": answer, "hops": [subject, middle]}

    def call_tool(self, task: Task, state: dict[str, Any], name: str, arguments: Any) -> str:
        if name != "search":
            raise ToolError(f"unknown tool {name!r}; available: search")
        args = check_args(name, arguments, TOOLS[0])
        query = args["query"].strip()
        if not query:
            raise ToolError("search: the query is empty")
        state["searches"] = state.get("searches", 0) + 1
        hits = search(query, TOP_K)
        if not hits:
            return "No results."
        return "\n".join(f"{i + 1}. {h}" for i, h in enumerate(hits))

    def expert_actions(self, task: Task) -> list[str]:
        calls = [render_tool_call("search", {"query": hop}) for hop in task.data["hops"]]
        return [*calls, f"Answer: {task.data['answer']}"]

    def score(self, task: Task, trajectory: Trajectory) -> dict[str, float]:
        pred = extract_answer(trajectory.final_text)
        gold = task.data["answer"]
        clean = trajectory.n_failed == 0
        em = float(pred is not None and normalize_answer(pred) == normalize_answer(gold))
        f1 = f1_score(pred, gold) if pred is not None else 0.0
        return {"reward": em if clean else 0.0, "em": em, "f1": f1,
                "searches": float(trajectory.state.get("searches", 0))}
