"""The mini arena: four verifiable agent environments and a general-knowledge suite.

Domains, in curriculum order: ``math`` (word problems), ``search`` (questions about a
generated world, with a BM25 ``search`` tool), ``ecom`` (a customer-service agent with 12
tools, policy rules and a scripted user) and ``if`` (verifiable writing constraints).
Each has an in-domain suite (``math/id``) and an out-of-domain one (``math/ood``);
``general`` is a multiple-choice suite about the world (the MMLU role). docs/arena.md
describes every environment with a sample task and trajectory.

>>> from aclarena.envs import get_env, sample_prompts, sample_tasks
>>> tasks = sample_tasks("math/id", n=100, seed=0)          # eval split by default
>>> prompts = sample_prompts("search", n=8, seed=0)          # chat messages + tools
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aclarena.envs.base import (
    ARENA_VERSION,
    SPLITS,
    Environment,
    Step,
    Task,
    ToolError,
    Trajectory,
    split_of,
    suite_name,
    task_from_record,
)
from aclarena.errors import AclarenaError, unknown_name

DOMAINS: tuple[str, ...] = ("math", "search", "ecom", "if")
ENVIRONMENTS: tuple[str, ...] = (*DOMAINS, "general")
SUITES: dict[str, tuple[str, str]] = {
    **{f"{d}/{v}": (d, v) for d in DOMAINS for v in ("id", "ood")},
    "general": ("general", "id"),
}
SUITE_GROUPS = ("id", "ood", "general", "all", "custom")


def get_env(name: str) -> Environment:
    """The environment of a domain (``math``, ``search``, ``ecom``, ``if``), ``general``, or a custom
    suite registered from the run's manifest (:func:`aclarena.envs.custom.register_suites`)."""
    from aclarena.envs.custom import custom_suite

    custom = custom_suite(name)
    return custom if custom is not None else _arena_env(name)


@cache
def _arena_env(name: str) -> Environment:
    if name == "math":
        from aclarena.envs.math import MathEnv

        return MathEnv()
    if name == "search":
        from aclarena.envs.search import SearchEnv

        return SearchEnv()
    if name == "ecom":
        from aclarena.envs.ecom import EcomEnv

        return EcomEnv()
    if name == "if":
        from aclarena.envs.ifeval import IfEnv

        return IfEnv()
    if name == "general":
        from aclarena.envs.general import GeneralEnv

        return GeneralEnv()
    raise unknown_name("domain", name, ENVIRONMENTS)


def parse_suite(suite: str) -> tuple[str, str]:
    """``"math/id"`` -> ``("math", "id")``; ``"general"`` -> ``("general", "id")``."""
    if suite in SUITES:
        return SUITES[suite]
    from aclarena.envs.custom import custom_suite

    custom = custom_suite(suite)
    if custom is not None:
        return custom.name, custom.spec.role
    raise unknown_name("suite", suite, [*SUITES, *_custom_names()],
                       hint="or a group: id, ood, general, all, custom; add your own as [suites.NAME] in aclarena.toml")


def _custom_names() -> list[str]:
    from aclarena.envs.custom import registered

    return list(registered())


def resolve_suites(spec: str | list[str]) -> list[str]:
    """Expand ``"id,ood,general"``, domain names (``math`` = both its suites) and suite names."""
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [s.strip() for s in spec]
    items = [s for s in items if s]
    if not items:
        raise AclarenaError("no suite given; use e.g. --suites id,ood,general or --suites math/id")
    out: list[str] = []
    for item in items:
        if item == "all":
            names = list(SUITES)
        elif item == "custom":
            names = _custom_names()
            if not names:
                raise AclarenaError("--suites custom: this run registers no suite of its own; add [suites.NAME] to "
                                    "aclarena.toml (aclarena-diag init --suite NAME=FILE.jsonl)")
        elif item in ("id", "ood"):
            names = [f"{d}/{item}" for d in DOMAINS]
        elif item in DOMAINS:
            names = [f"{item}/id", f"{item}/ood"]
        elif item in SUITES or item in _custom_names():
            names = [item]
        else:
            raise unknown_name("suite", item, [*SUITES, *SUITE_GROUPS, *DOMAINS, *_custom_names()])
        out.extend(n for n in names if n not in out)
    return out


def suite_chance(suite: str) -> float:
    """The score of guessing on ``suite`` (``general``: 0.25, one of four options; 0 for the domains'
    suites, where a guess earns nothing). An arena suite not listed here (an imported lm-eval task) is 0."""
    if suite in SUITES:
        return get_env(SUITES[suite][0]).chance
    return get_env(suite).chance if suite in _custom_names() else 0.0


def sample_tasks(suite: str, n: int, seed: int = 0, split: str = "eval") -> list[Task]:
    """``n`` tasks of ``suite`` (``math/id``, ``general``...), deterministic per seed."""
    env_name, variant = parse_suite(suite)
    return get_env(env_name).generate(n, seed=seed, split=split, variant=variant)


def sample_prompts(domain: str, n: int, seed: int, split: str = "eval", suite: str = "id") -> list[dict[str, Any]]:
    """Opening prompts of ``n`` tasks: ``{"messages", "tools", "domain", "suite", "task_id"}``.

    ``messages`` are the system and user messages; ``tools`` the tool schemas or None.
    ``suite`` is ``id`` or ``ood`` (``domain="general"`` has only ``id``).
    """
    env = get_env(domain)
    tasks = env.generate(n, seed=seed, split=split, variant=suite)
    return [{"messages": t.messages, "tools": t.tool_list, "domain": t.env, "suite": t.suite, "task_id": t.id}
            for t in tasks]


__all__ = [
    "ARENA_VERSION",
    "DOMAINS",
    "ENVIRONMENTS",
    "SPLITS",
    "SUITES",
    "Environment",
    "Step",
    "Task",
    "ToolError",
    "Trajectory",
    "get_env",
    "parse_suite",
    "resolve_suites",
    "sample_prompts",
    "sample_tasks",
    "split_of",
    "suite_chance",
    "suite_name",
    "task_from_record",
]
