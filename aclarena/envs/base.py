"""The mini arena's building blocks: tasks, trajectories and the environment protocol.

An :class:`Environment` is one domain of the curriculum (math, search, ecom, if) or the
general-knowledge suite. It owns

* a seeded task generator with ``train`` and ``eval`` splits that never share a task: every
  candidate task has a *split key* (for math, the arithmetic; for search, the fact asked),
  and a hash of that key, not the seed, decides its split;
* an in-domain suite (``id``) and an out-of-domain suite (``ood``);
* the environment identity a deployed agent sees: a system prompt and OpenAI-style tool
  schemas (``{"type": "function", "function": {name, description, parameters}}``);
* tool execution against a per-episode state (a search index, a retail database, ...);
* a verifiable reward on the finished trajectory.

Rollouts (:mod:`aclarena.envs.rollout`) drive an environment; experts
(:mod:`aclarena.envs.experts`) produce correct trajectories.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aclarena.errors import AclarenaError, unknown_name

# Bump when a generator, a tool or a reward changes: eval result keys include it, so that
# cells computed on older tasks are not taken for current ones.
ARENA_VERSION = "1"
SPLITS = ("train", "eval")
# Share of the split-key space held out for evaluation.
EVAL_PERCENT = 20


def split_of(key: str) -> str:
    """``"eval"`` for about EVAL_PERCENT % of split keys, ``"train"`` for the rest (a stable hash)."""
    h = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16)
    return "eval" if h % 100 < EVAL_PERCENT else "train"


def stable_hash(*parts: Any, n: int = 10) -> str:
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def tool_schema(name: str, description: str, params: Mapping[str, tuple[str, str]] | None = None,
                required: Sequence[str] | None = None) -> dict[str, Any]:
    """An OpenAI-style function schema; ``params`` maps argument name -> (JSON type, description)."""
    params = dict(params or {})
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": t, "description": d} for k, (t, d) in params.items()},
                "required": list(required if required is not None else params),
            },
        },
    }


class ToolError(Exception):
    """A tool was called with bad arguments: the message goes back to the model as the tool result."""


@dataclass(frozen=True)
class Task:
    """One task: what the model sees (system prompt, tools, user message) and hidden data.

    Attributes:
        id: ``"<env>/<variant>/<hash>"``, stable across processes and machines.
        env: the environment's name (``math``, ``search``, ``ecom``, ``if``, ``general``).
        variant: ``id`` or ``ood`` (``general`` has ``id`` only).
        split: ``train`` or ``eval``.
        system: the system prompt.
        tools: tool schemas, or None for a tool-free environment.
        prompt: the first user message.
        key: the split key (tasks with the same key always land in the same split).
        data: everything the reward and the expert need (answers, databases, plans); never shown.
    """

    id: str
    env: str
    variant: str
    split: str
    system: str
    tools: tuple[dict[str, Any], ...] | None
    prompt: str
    key: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def suite(self) -> str:
        """The suite name (``math/id``, ``ecom/ood``, ``general``)."""
        return suite_name(self.env, self.variant)

    @property
    def domain(self) -> str:
        """The curriculum domain (``general`` for the general-knowledge suite)."""
        return self.env

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The opening chat: system prompt and user message."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.prompt}]

    @property
    def tool_list(self) -> list[dict[str, Any]] | None:
        return [copy.deepcopy(t) for t in self.tools] if self.tools is not None else None

    def to_record(self) -> dict[str, Any]:
        """A JSON-serialisable record of the whole task (see :func:`task_from_record`)."""
        return {
            "id": self.id, "env": self.env, "variant": self.variant, "split": self.split,
            "system": self.system, "tools": list(self.tools) if self.tools is not None else None,
            "prompt": self.prompt, "key": self.key, "data": _plain(self.data),
        }


def task_from_record(record: Mapping[str, Any] | str) -> Task:
    """Rebuild a :class:`Task` from :meth:`Task.to_record` (or its JSON text)."""
    fields: Mapping[str, Any] = json.loads(record) if isinstance(record, str) else record
    tools = fields.get("tools")
    return Task(
        id=fields["id"], env=fields["env"], variant=fields["variant"], split=fields["split"],
        system=fields["system"], tools=tuple(tools) if tools is not None else None,
        prompt=fields["prompt"], key=fields["key"], data=fields.get("data", {}),
    )


def _plain(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x


@dataclass
class Step:
    """One assistant turn of a trajectory.

    ``error`` is set when the turn failed: a malformed ``<tool_call>``, an unknown tool, or
    arguments a tool refused. Failed steps are recorded, never raised.
    """

    turn: int
    text: str
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "text": self.text, "content": self.content, "tool_calls": self.tool_calls,
                "tool_results": self.tool_results, "error": self.error}


END_REASONS = ("answer", "turn_limit", "context", "error")


@dataclass
class Trajectory:
    """A finished (or cut) episode: the whole conversation, its steps, final state and reward."""

    task: Task
    messages: list[dict[str, Any]]
    steps: list[Step]
    state: dict[str, Any]
    end_reason: str
    reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def final_text(self) -> str:
        """The content of the last assistant turn if it made no tool call, else ``""``."""
        if not self.steps:
            return ""
        last = self.steps[-1]
        if last.tool_calls or last.failed:
            return ""
        return last.content

    @property
    def n_failed(self) -> int:
        return sum(s.failed for s in self.steps)

    @property
    def turns(self) -> int:
        return len(self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task.id, "suite": self.task.suite, "messages": self.messages,
                "steps": [s.to_dict() for s in self.steps], "end_reason": self.end_reason,
                "reward": self.reward, "metrics": self.metrics}


class Environment(ABC):
    """A domain of the arena. Subclasses implement the generator, tools, user and reward."""

    name: str = ""
    variants: tuple[str, ...] = ("id", "ood")
    max_turns: int = 1
    max_new_tokens: int = 64
    #: the expected reward of guessing uniformly (a multiple-choice suite: one over its options);
    #: 0 where a guess earns nothing. A score whose interval holds it measures no skill.
    chance: float = 0.0

    # --- identity ------------------------------------------------------------------------
    @abstractmethod
    def system_prompt(self, variant: str) -> str:
        """The system prompt of this environment (variant ``id`` or ``ood``)."""

    def tools(self, variant: str) -> list[dict[str, Any]] | None:
        """Tool schemas (OpenAI style), or None when the environment has no tools."""
        return None

    # --- tasks ---------------------------------------------------------------------------
    @abstractmethod
    def _candidate(self, rng: random.Random, variant: str) -> tuple[str, str, dict[str, Any]]:
        """Draw one candidate task: ``(split_key, user_prompt, hidden_data)``."""

    def generate(self, n: int, seed: int = 0, split: str = "eval", variant: str = "id") -> list[Task]:
        """``n`` tasks of ``split`` and ``variant``, the same for the same arguments on any machine.

        Tasks ask about distinct split keys (facts, computations) while the split's task
        space allows, then have distinct prompts; beyond that (large training sets) they repeat.
        """
        self.check_variant(variant)
        if split not in SPLITS:
            raise unknown_name("split", split, SPLITS)
        if not isinstance(n, int) or n < 0:
            raise AclarenaError(f"the number of tasks must be a non-negative integer, got {n!r}")
        rng = random.Random(f"{self.name}|{variant}|{split}|{seed}")
        system, tools = self.system_prompt(variant), self.tools(variant)
        tools_t = tuple(tools) if tools is not None else None
        tasks: list[Task] = []
        seen_keys: set[str] = set()
        seen_prompts: set[str] = set()
        misses = 0
        budget = 200 + 50 * n
        while len(tasks) < n:
            key, prompt, data = self._candidate(rng, variant)
            if split_of(key) != split:
                misses += 1
                if misses > 3 * budget + 1000 * max(len(tasks), 1):
                    raise AclarenaError(f"{self.name}/{variant}: cannot draw {split} tasks; the task space is too small")
                continue
            # distinct split keys (facts, computations) first, then distinct prompts, then repeats
            if (key in seen_keys and misses < budget) or (prompt in seen_prompts and misses < 2 * budget):
                misses += 1
                continue
            seen_keys.add(key)
            seen_prompts.add(prompt)
            tid = f"{self.name}/{variant}/{stable_hash(prompt, data)}"
            tasks.append(Task(id=tid, env=self.name, variant=variant, split=split, system=system, tools=tools_t,
                              prompt=prompt, key=key, data=data))
        return tasks

    def check_variant(self, variant: str) -> None:
        if variant not in self.variants:
            raise unknown_name(f"suite of {self.name}", variant, self.variants)

    # --- episodes ------------------------------------------------------------------------
    def new_state(self, task: Task) -> dict[str, Any]:
        """The mutable state of one episode (a copy of the task's database, counters...)."""
        return {}

    def tool_names(self, task: Task) -> list[str]:
        return [t["function"]["name"] for t in task.tools or ()]

    def call_tool(self, task: Task, state: dict[str, Any], name: str, arguments: Mapping[str, Any]) -> str:
        """Run tool ``name``; return its result text. Raise :class:`ToolError` for bad arguments."""
        raise ToolError(f"{self.name} has no tools")

    def user_reply(self, task: Task, state: dict[str, Any], text: str) -> str | None:
        """The user's answer to an assistant message without tool call; None ends the episode."""
        return None

    @abstractmethod
    def score(self, task: Task, trajectory: Trajectory) -> dict[str, float]:
        """Verifiable outcome: a dict with ``reward`` (0 or 1) and optional extra metrics."""

    # --- experts -------------------------------------------------------------------------
    @abstractmethod
    def expert_actions(self, task: Task) -> list[str]:
        """The assistant turns (raw text, tool calls included) of a correct trajectory."""


def check_args(name: str, arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Validate tool arguments against a schema: required present, no unknown ones, simple types."""
    params = schema["function"]["parameters"]
    props = params.get("properties", {})
    if not isinstance(arguments, Mapping):
        raise ToolError(f"{name}: arguments must be an object")
    unknown = [k for k in arguments if k not in props]
    if unknown:
        raise ToolError(f"{name}: unknown argument {unknown[0]!r}; expected {', '.join(props) or 'none'}")
    missing = [k for k in params.get("required", []) if k not in arguments]
    if missing:
        raise ToolError(f"{name}: missing argument {missing[0]!r}")
    out: dict[str, Any] = {}
    for k, v in arguments.items():
        t = props[k].get("type")
        if t == "string" and not isinstance(v, str):
            v = str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
            if not isinstance(v, str):
                raise ToolError(f"{name}: argument {k!r} must be a string")
        if t == "integer":
            if isinstance(v, str) and v.strip().lstrip("-").isdigit():
                v = int(v)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ToolError(f"{name}: argument {k!r} must be an integer")
        out[k] = v
    return out


def suite_name(env: str, variant: str) -> str:
    return "general" if env == "general" else f"{env}/{variant}"


def compact_json(obj: Any) -> str:
    """Tool results as compact JSON (fewer tokens for small models)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def render_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """``<tool_call>{json}</tool_call>`` exactly as the chat template renders a structured call."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False) + "</tool_call>"
