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
                      max_completion_length=max_new_tokens or env.max_new_tokens)
    tasks = env.generate(n, seed=seed, split="train", variant=suite)
    rollout = ArenaRollout(tasks, max_context=max_context, max_turns=max_turns, max_new_tokens=max_new_tokens)
    ds = Dataset.from_list([prompt_row(t) for t in tasks])
    return RLData(dataset=ds, reward_funcs=[env_reward], rollout=rollout,
                  max_completion_length=(max_context or 1024))


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


def pretraining_records(tokenizer: Any, *, chat_examples: int, mc_examples: int, seed: int) -> list[dict[str, str]]:
    """The mini base's pretraining text: the world's passages, generic chat about the world, and
    multiple-choice practice (the general suite's format, on train-split questions).

    No task format of the curriculum (math, tool calls, retail, writing constraints) appears,
    so every stage has something to teach; the chat template does, so the base answers in
    turns as an instruction-tuned base would.
    """
    import random

    from aclarena.envs import get_env
    from aclarena.envs.experts import expert_trajectory
    from aclarena.envs.world import world

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
    # passages several times over: they are the knowledge the general suite asks about
    records = [{"text": t} for t in texts * 4 + chats + mcs]
    rng.shuffle(records)
    return records


def fingerprint(obj: Any) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
