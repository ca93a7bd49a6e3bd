"""Training data of a phase: arena experts, rejection samples, files, and RL prompts with rewards.

* SFT: ``expert`` conversations of the arena's scripted experts
  (:func:`aclarena.envs.experts.expert_dataset`), ``rejection`` samples of the starting model
  (reward-1 trajectories, :func:`aclarena.envs.experts.rejection_sample`), or a ``file`` of
  conversations (``{"messages": [...], "tools": [...]}`` per line).
* RL: the domain's environment (:func:`arena_rl_data`): single-turn domains use trl's own
  generation and :func:`aclarena.envs.data.arena_reward`; tool domains a multi-turn
  ``rollout_func`` (:class:`aclarena.train.rollout.ArenaRollout`). Or a ``file`` of prompts
  scored by a reward function the config names (``module:function``).

Every arena draw is from the ``train`` split (evaluation tasks are never trained on) and
deterministic per seed.
"""

from __future__ import annotations

import importlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aclarena.errors import ConfigError
from aclarena.train.phases import RLData

SINGLE_TURN = ("math", "if", "general")


def expert_records(domain: str, n: int, seed: int, suite: str = "id") -> list[dict[str, Any]]:
    """``n`` expert conversations of ``domain``'s train split, ready for one ``datasets.Dataset``."""
    from aclarena.envs.experts import expert_dataset, hf_ready

    return hf_ready(expert_dataset(domain, n, seed, split="train", suite=suite))


def rejection_records(model: Any, tokenizer: Any, domain: str, n: int, k: int, seed: int,
                      suite: str = "id") -> list[dict[str, Any]]:
    """Reward-1 samples of ``model`` on ``n`` train tasks (``k`` samples each), as SFT records."""
    from aclarena.envs import get_env
    from aclarena.envs.experts import hf_ready, rejection_sample

    tasks = get_env(domain).generate(n, seed=seed, split="train", variant=suite)
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    try:
        records = rejection_sample(model, tokenizer, tasks, k=k, seed=seed)
    finally:
        model.train(was_training)
    return hf_ready(records)


Sampler = Callable[[Any, Any, list[Any], int], list[Any]]


def sample_policy(model: Any, tokenizer: Any, tasks: list[Any], seed: int) -> list[Any]:
    """One sampled trajectory (temperature 1) of ``model`` per entry of ``tasks`` (tasks repeat ``k`` times)."""
    from aclarena.envs.rollout import generate_trajectories

    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    try:
        trajs = generate_trajectories(model, tokenizer, tasks, do_sample=True, temperature=1.0, seed=seed)
    finally:
        model.train(was_training)
    return [t for t in trajs if t is not None]


def rejection_phase_data(model: Any, tokenizer: Any, domain: str, n: int, k: int, seed: int, *,
                         max_per_task: int = 0, fallback: str = "none", suite: str = "id",
                         sample: Sampler = sample_policy) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The data of a rejection-sampling SFT phase, and the report of where it came from.

    ``k`` samples per train task from the current policy (``sample``); the ones the domain's
    reward verifies (reward 1) are kept, at most ``max_per_task`` per task (0: every distinct
    one). Where a task's pass@k is 0, ``fallback`` decides: ``none`` trains on nothing there,
    ``expert`` on that task's expert demonstration, ``expert-if-empty`` on every task's expert
    demonstration only when pass@k is 0 on all of them (a bootstrap). Records carry ``source``
    (``sample`` or ``expert``); the report counts tasks, samples, solved tasks, kept samples and
    the tasks that fell back (their ids).
    """
    from aclarena.envs import get_env
    from aclarena.envs.experts import expert_trajectory, hf_ready, keep_verified, to_record

    tasks = get_env(domain).generate(n, seed=seed, split="train", variant=suite)
    trajs = sample(model, tokenizer, [t for t in tasks for _ in range(k)], seed)
    correct = sum(1 for t in trajs if t.reward >= 1.0)
    kept = [{**r, "source": "sample"} for r in keep_verified(trajs, max_per_task=max_per_task or None)]
    solved = {r["task_id"] for r in kept}
    if fallback == "expert":
        back = [t for t in tasks if t.id not in solved]
    elif fallback == "expert-if-empty" and not kept:
        back = list(tasks)
    else:
        back = []
    experts = [{**to_record(expert_trajectory(t)), "source": "expert"} for t in back]
    report = {"source": "rejection", "domain": domain, "tasks": len(tasks), "k": k, "samples": len(trajs),
              "correct_samples": correct, "tasks_solved": len(solved), "pass_at_k": len(solved) / max(1, len(tasks)),
              "kept": len(kept), "max_per_task": max_per_task, "fallback": fallback, "fallback_tasks": len(back),
              "fallback_task_ids": [t.id for t in back], "records": len(kept) + len(experts)}
    return hf_ready(kept + experts), report


def file_records(path: str | Path, n: int = 0) -> Any:
    """A ``datasets.Dataset`` from a local JSONL / JSON / Parquet file (the first ``n`` rows; 0: all)."""
    from datasets import load_dataset

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"data file {path} not found; the config's `path` must name a local file")
    fmt = {"jsonl": "json", "json": "json", "parquet": "parquet", "csv": "csv"}.get(p.suffix.lstrip(".").lower())
    if fmt is None:
        raise ConfigError(f"data file {path}: unknown format; use .jsonl, .json, .parquet or .csv")
    try:
        ds = load_dataset(fmt, data_files=str(p), split="train")
    except Exception as e:  # datasets raises many types for malformed files
        raise ConfigError(f"data file {path} cannot be read: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if n:
        ds = ds.select(range(min(n, len(ds))))
    return ds


def import_function(spec: str) -> Callable[..., Any]:
    """``module:function`` -> the function (a one-line error when it cannot be imported)."""
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot import {spec!r}: {e}; put its module on PYTHONPATH") from None
    if not callable(fn):
        raise ConfigError(f"{spec!r} is not a function")
    return fn


def arena_rl_data(domain: str, n: int, seed: int, *, suite: str = "id", max_context: int | None = None,
                  max_turns: int | None = None, max_new_tokens: int | None = None) -> RLData:
    """RL prompts and rewards of an arena domain (``n`` train tasks); ``max_turns`` and
    ``max_new_tokens`` (per turn) default to the environment's limits."""
    from datasets import Dataset

    from aclarena.envs import get_env
    from aclarena.envs.data import arena_reward, grpo_dataset
    from aclarena.train.rollout import ArenaRollout, env_reward, prompt_row

    env = get_env(domain)
    if domain in SINGLE_TURN:
        rows = grpo_dataset(domain, n, seed, split="train", suite=suite)
        return RLData(dataset=Dataset.from_list(rows), reward_funcs=[arena_reward],
                      max_completion_length=env.max_new_tokens if max_new_tokens is None else max_new_tokens)
    tasks = env.generate(n, seed=seed, split="train", variant=suite)
    rollout = ArenaRollout(tasks, max_context=max_context, max_turns=max_turns, max_new_tokens=max_new_tokens)
    ds = Dataset.from_list([prompt_row(t) for t in tasks])
    return RLData(dataset=ds, reward_funcs=[env_reward], rollout=rollout,
                  max_completion_length=(1024 if max_context is None else max_context))


def file_rl_data(path: str, n: int, reward: str, *, rollout: str | None = None,
                 max_completion_length: int = 512) -> RLData:
    """RL prompts from a file (a ``prompt`` column, conversational or text) scored by ``reward``.

    ``rollout`` names a factory ``f(dataset) -> rollout_func`` for multi-turn episodes with your
    own environment (the arena's is :class:`aclarena.train.rollout.ArenaRollout`); without it,
    trl generates one completion per prompt (with vLLM when ``use_vllm`` is set).
    """
    ds = file_records(path, n)
    if "prompt" not in ds.column_names:
        raise ConfigError(f"RL data file {path} needs a `prompt` column; it has {ds.column_names}")
    func = import_function(rollout)(ds) if rollout is not None else None
    return RLData(dataset=ds, reward_funcs=[import_function(reward)], rollout=func,
                  max_completion_length=max_completion_length)


GENERIC_TOOLS = {
    "get_weather": ("Today's weather in a city.", {"city": ("string", "city name")}),
    "lookup_phone": ("A person's phone number.", {"name": ("string", "full name")}),
    "get_time": ("The local time in a city.", {"city": ("string", "city name")}),
}
WEATHER = ("sunny", "rainy", "cloudy", "windy", "snowy")


def _generic_tool_chat(rng: random.Random, names: list[str], cities: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A chat in which the assistant calls a generic tool (none of the arena's) and answers from its result."""
    from aclarena.envs.base import tool_schema

    offered = rng.sample(sorted(GENERIC_TOOLS), rng.randint(1, len(GENERIC_TOOLS)))
    tool = rng.choice(offered)
    tools = [tool_schema(t, GENERIC_TOOLS[t][0], GENERIC_TOOLS[t][1]) for t in offered]
    args: dict[str, str]
    result: dict[str, Any]
    if tool == "lookup_phone":
        who = rng.choice(names)
        args, result = {"name": who}, {"name": who, "phone": f"555-{rng.randint(0, 9999):04d}"}
        ask, answer = f"What is the phone number of {who}?", f"The number of {who} is {result['phone']}."
    elif tool == "get_weather":
        city = rng.choice(cities)
        args, result = {"city": city}, {"city": city, "weather": rng.choice(WEATHER), "celsius": rng.randint(-5, 35)}
        ask = f"What is the weather like in {city} today?"
        answer = f"It is {result['weather']} in {city}, {result['celsius']} degrees."
    else:
        city = rng.choice(cities)
        args, result = {"city": city}, {"city": city, "time": f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"}
        ask, answer = f"What time is it in {city}?", f"It is {result['time']} in {city}."
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant. Use the tools when they help."},
        {"role": "user", "content": ask},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                             "function": {"name": tool, "arguments": args}}]},
        {"role": "tool", "content": json.dumps(result)},
        {"role": "assistant", "content": answer},
    ]
    return messages, tools


def _arithmetic_text(rng: random.Random) -> str:
    """An arithmetic fact, in words or symbols (what a base model knows; not the math task's format)."""
    a, b = rng.randint(0, 20), rng.randint(0, 20)
    op = rng.choice(("+", "-", "*"))
    if op == "-" and b > a:
        a, b = b, a
    c = a + b if op == "+" else (a - b if op == "-" else a * b)
    word = {"+": "plus", "-": "minus", "*": "times"}[op]
    return rng.choice((f"{a} {op} {b} = {c}", f"{a} {word} {b} is {c}.", f"What is {a} {word} {b}? It is {c}."))


def pretraining_records(tokenizer: Any, *, chat_examples: int, mc_examples: int, seed: int,
                        tool_examples: int = 0, arithmetic_examples: int = 0, copy_examples: int = 0,
                        tool_chain_examples: int = 0, instruction_examples: int = 0,
                        story_examples: int = 0, passage_repeats: int = 4) -> list[dict[str, str]]:
    """The mini base's pretraining text: what a base model knows, and none of the arena's tasks.

    * the world's passages (``passage_repeats`` times: the knowledge the general suite asks about);
    * generic chat about the world ("Tell me about X." answered with its passage);
    * multiple-choice practice on train-split facts (the general suite's format);
    * generic tool use: chats that call a weather, phone or clock tool (none of the arena's) with
      made-up names and answer from the result, in the template's tool-call syntax, and (a third)
      chats where such tools are offered but do not help, answered directly;
    * arithmetic facts (``7 + 5 = 12``, ``7 plus 5 is 12.``);
    * the skills of :mod:`aclarena.train.pretraining` (copying names, ids and numbers from the
      context, chains of generic tool calls that copy ids out of results, short instructions,
      arithmetic stories), when their counts are above 0.

    No arena task appears: no word problem, no search, retail or telecom tool, no writing
    constraint, so every stage has its skill to teach; the chat template and JSON tool calls do,
    as in a base model that has seen chat and tool-use data.
    """
    import random

    from aclarena.envs import get_env
    from aclarena.envs.experts import expert_trajectory
    from aclarena.envs.world import SYLLABLES, world

    rng = random.Random(seed)
    w = world()
    texts = [text for _, text in w.passages]
    asks = ("Tell me about {t}.", "What do you know about {t}?", "Who or what is {t}?", "Describe {t}.",
            "{t}: what is it?")
    systems = ("You are a helpful assistant.", "You are a friendly assistant. Answer briefly.", None)
    chats = []
    for _ in range(chat_examples):
        title, text = rng.choice(w.passages)
        body = text.split(": ", 1)[1]
        msgs = []
        sys_prompt = rng.choice(systems)
        if sys_prompt:
            msgs.append({"role": "system", "content": sys_prompt})
        msgs += [{"role": "user", "content": rng.choice(asks).format(t=title)}, {"role": "assistant", "content": body}]
        chats.append(tokenizer.apply_chat_template(msgs, tokenize=False))
    mcs = []
    if mc_examples:
        for task in get_env("general").generate(mc_examples, seed=seed, split="train", variant="id"):
            mcs.append(tokenizer.apply_chat_template(expert_trajectory(task).messages, tokenize=False))

    def made_up(k: int) -> str:
        return "".join(rng.choice(SYLLABLES) for _ in range(k)).capitalize()

    tool_chats = []
    for i in range(tool_examples):
        names = [f"{made_up(2)} {made_up(2)}" for _ in range(3)]
        cities = [made_up(rng.choice((2, 3))) for _ in range(2)] + [rng.choice(sorted(w.cities))]
        messages, tools = _generic_tool_chat(rng, names, cities)
        if i % 3 == 2:  # a third of them: the tools do not help, and the assistant answers directly
            title, text = rng.choice(w.passages)
            messages = [messages[0], {"role": "user", "content": rng.choice(asks).format(t=title)},
                        {"role": "assistant", "content": text.split(": ", 1)[1]}]
        tool_chats.append(tokenizer.apply_chat_template(messages, tools=tools, tokenize=False))
    arithmetic = ["\n".join(_arithmetic_text(rng) for _ in range(4)) for _ in range(arithmetic_examples)]
    from aclarena.train.pretraining import skill_texts

    skills = skill_texts(tokenizer, copy=copy_examples, tools=tool_chain_examples, instructions=instruction_examples,
                         arithmetic=story_examples, seed=seed)
    records = [{"text": t} for t in texts * passage_repeats + chats + mcs + tool_chats + arithmetic + skills]
    rng.shuffle(records)
    return records


def fingerprint(obj: Any) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
