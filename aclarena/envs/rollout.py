"""The rollout loop: multi-turn chat with tool calls in Qwen3's format, batched.

The assistant calls tools by writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(one or more per turn); each result goes back as a ``{"role": "tool"}`` message. A turn
without a tool call is an answer (single-turn and search tasks) or a message to the
scripted user (e-commerce), who replies or ends the episode. Episodes end at the
environment's turn limit or when the context is full.

A malformed call (bad JSON, no ``name``, an unclosed tag), an unknown tool or arguments a
tool refuses make a *failed step*: recorded in the trajectory, reported back to the model
as ``Error: ...`` in a tool message, never raised.

The loop is written against a *policy*: a function from a batch of conversations
``(messages, tools)`` to assistant texts. :func:`model_policy` wraps a transformers model
(batched ``generate`` with left padding); experts and other generators (vLLM) plug in the
same way. :class:`Episode` is the step-by-step interface for custom RL rollouts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aclarena.envs.base import Environment, Step, Task, ToolError, Trajectory
from aclarena.models.arch import context_length
from aclarena.models.chat import (
    Conversation,
    Policy,
    cut_reply,
    render_prompt,
    reply_stopping,
    stop_token_ids,
)
from aclarena.models.chat import end_of_turn as end_of_turn  # imported from here by train/ and tests
from aclarena.models.prefix_cache import PrefixCache, takes_positions

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)


@dataclass
class Parsed:
    """An assistant text split into content, well-formed tool calls and the first format error."""

    content: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def parse_assistant(text: str) -> Parsed:
    """Split an assistant turn into its content and ``<tool_call>`` blocks (Qwen3 / Hermes format)."""
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    for m in TOOL_CALL_RE.finditer(text):
        body = m.group(1).strip()
        try:
            obj = json.loads(body)
        except ValueError:
            errors.append(f"malformed tool call: not JSON: {body[:60]!r}")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            errors.append('malformed tool call: expected {"name": ..., "arguments": {...}}')
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):  # some models emit the arguments as a JSON string
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                errors.append(f"malformed tool call: arguments of {obj['name']!r} are not JSON")
                continue
        if not isinstance(args, dict):
            errors.append(f"malformed tool call: arguments of {obj['name']!r} must be an object")
            continue
        calls.append({"name": obj["name"], "arguments": args})
    rest = TOOL_CALL_RE.sub("", text)
    if "<tool_call>" in rest or "</tool_call>" in rest:
        errors.append("malformed tool call: unclosed <tool_call> tag")
    content = THINK_RE.sub("", rest).strip()
    return Parsed(content=content, calls=calls, error=errors[0] if errors else None)


class Episode:
    """One task being played: feed it assistant texts with :meth:`act` until :attr:`done`."""

    def __init__(self, env: Environment, task: Task, *, max_turns: int | None = None) -> None:
        self.env = env
        self.task = task
        self.max_turns = env.max_turns if max_turns is None else max_turns
        if self.max_turns < 1:
            raise ValueError(f"`max_turns` must be at least 1, got {self.max_turns}")
        self.messages: list[dict[str, Any]] = task.messages
        self.tools = task.tool_list
        self.state = env.new_state(task)
        self.steps: list[Step] = []
        self.done = False
        self.end_reason: str | None = None

    @property
    def conversation(self) -> Conversation:
        """What the policy sees next: the messages so far and the tool schemas."""
        return self.messages, self.tools

    def act(self, text: str | None) -> bool:
        """Play one assistant turn (``None``: the policy could not continue). Returns :attr:`done`."""
        if self.done:
            raise RuntimeError("the episode is over")
        if text is None:
            return self._end("context")
        parsed = parse_assistant(text)
        step = Step(turn=len(self.steps) + 1, text=text, content=parsed.content, tool_calls=parsed.calls,
                    error=parsed.error)
        self.steps.append(step)
        self.messages.append({"role": "assistant", "content": text})
        names = set(self.env.tool_names(self.task))
        for call in parsed.calls:
            result, error = "", None  # the tool's text, or why there is none
            if call["name"] not in names:
                known = ", ".join(sorted(names)) or "none (answer directly)"
                error = f"unknown tool {call['name']!r}; available tools: {known}"
            else:
                try:
                    result = self.env.call_tool(self.task, self.state, call["name"], call["arguments"])
                except ToolError as e:
                    error = str(e)
            if error is not None:
                step.error = step.error or error
                result = f"Error: {error}"
            step.tool_results.append(result)
            self.messages.append({"role": "tool", "content": result})
        if parsed.error is not None and not parsed.calls:
            self.messages.append({"role": "tool", "content": f"Error: {parsed.error}"})
        if not parsed.calls and parsed.error is None:
            reply = self.env.user_reply(self.task, self.state, parsed.content)
            if reply is None:
                return self._end("answer")
            self.messages.append({"role": "user", "content": reply})
        if len(self.steps) >= self.max_turns:
            return self._end("turn_limit")
        return False

    def _end(self, reason: str) -> bool:
        self.done, self.end_reason = True, reason
        return True

    def result(self) -> Trajectory:
        """The scored trajectory (the episode must be over)."""
        if not self.done:
            raise RuntimeError("the episode is not over yet")
        traj = Trajectory(task=self.task, messages=self.messages, steps=self.steps, state=self.state,
                          end_reason=self.end_reason or "answer")
        metrics = self.env.score(self.task, traj)
        traj.reward = float(metrics["reward"])
        traj.metrics = {k: float(v) for k, v in metrics.items()}
        return traj


def env_of(task: Task) -> Environment:
    from aclarena.envs import get_env

    return get_env(task.env)


def run_episodes(
    tasks: Sequence[Task],
    policy: Policy,
    *,
    batch_size: int = 32,
    max_turns: int | None = None,
    on_batch: Callable[[int], None] | None = None,
    before_batch: Callable[[int], bool] | None = None,
) -> list[Trajectory | None]:
    """Play every task with ``policy``, ``batch_size`` episodes at a time; trajectories in task order.

    At each turn the still-running episodes of a batch are answered in one policy call.
    ``on_batch(n)`` is called after each batch with the number of finished episodes.
    ``before_batch(b)`` is called before batch ``b``: it may seed the sampler and returns
    whether to play it (a skipped batch's tasks get None: a data-parallel rank's share).
    """
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}")
    out: list[Trajectory | None] = []
    for b, start in enumerate(range(0, len(tasks), batch_size)):
        if before_batch is not None and not before_batch(b):
            out.extend([None] * len(tasks[start:start + batch_size]))
            continue
        episodes = [Episode(env_of(t), t, max_turns=max_turns) for t in tasks[start:start + batch_size]]
        while True:
            live = [e for e in episodes if not e.done]
            if not live:
                break
            texts = policy([e.conversation for e in live])
            if len(texts) != len(live):
                raise RuntimeError(f"the policy answered {len(texts)} conversations out of {len(live)}")
            for e, text in zip(live, texts, strict=True):
                e.act(text)
        out.extend(e.result() for e in episodes)
        if on_batch is not None:
            on_batch(len(episodes))
    return out


def context_limit(model: Any, max_context: int | None = None) -> int:
    """``max_context`` when given (it must be positive), else the model's context length
    (:func:`aclarena.models.arch.context_length`; 2**30, no bound, without one)."""
    if max_context is not None:
        if max_context < 1:
            raise ValueError(f"`max_context` must be at least 1, got {max_context}")
        return int(max_context)
    return context_length(model.config) or 1 << 30


def model_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_new_tokens: int = 64,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_context: int | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    prompt_format: str = "chat",
    reuse_cache: bool | None = None,
) -> Policy:
    """A policy generating with ``model``: one left-padded ``generate`` call per batch.

    ``reuse_cache`` (default: when greedy) keeps each call's KV cache for the next: an episode's next turn
    prefills only what its previous turn did not read (:mod:`aclarena.models.prefix_cache`). The kept keys
    differ from a fresh prefill's by float rounding only, so greedy answers are those of prefilling every
    prompt but at a tie to that rounding (tested equal); sampled rollouts prefill every prompt unless asked.

    Conversations are rendered in ``prompt_format`` (:func:`aclarena.models.chat.render_prompt`); a
    ``plain`` reply also ends where :func:`aclarena.models.chat.reply_end` says.

    Conversations longer than ``max_context - max_new_tokens`` tokens (default: the model's
    ``max_position_embeddings``) get None: the episode ends with ``end_reason="context"``.
    """
    import torch

    limit = context_limit(model, max_context)
    stops = stop_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    device = next(model.parameters()).device
    template_kwargs = dict(chat_template_kwargs or {})
    reuse = (not do_sample if reuse_cache is None else reuse_cache) and takes_positions(model)
    kept = PrefixCache() if reuse else None

    def policy(convs: Sequence[Conversation]) -> list[str | None]:
        texts = [render_prompt(tokenizer, m, t, prompt_format=prompt_format, **template_kwargs) for m, t in convs]
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        keep = [i for i, x in enumerate(ids) if len(x) + max_new_tokens <= limit]
        out: list[str | None] = [None] * len(convs)
        if not keep:
            return out
        # without a kept cache: plain left padding
        prepared = (kept or PrefixCache()).prepare([ids[i] for i in keep], pad_id)
        width = prepared.width
        kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": do_sample, "pad_token_id": pad_id,
                                  "eos_token_id": stops}
        if do_sample:
            kwargs |= {"temperature": temperature, "top_p": top_p, "top_k": 0}
        else:
            kwargs |= {"temperature": None, "top_p": None, "top_k": None}
        stopping = reply_stopping(tokenizer, width, prompt_format)
        if stopping is not None:
            kwargs["stopping_criteria"] = stopping
        with torch.no_grad():
            # transformers types PreTrainedModel without GenerationMixin (its causal-LM classes add generate)
            result = model.generate(input_ids=prepared.input_ids.to(device),  # type: ignore[operator]
                                    attention_mask=prepared.attention_mask.to(device), cache=prepared.cache,
                                    return_dict_in_generate=True, **kwargs)
        gen = result.sequences
        if kept is not None:
            kept.keep(result.cache, gen, prepared.attention_mask)
        new = gen[:, width:].tolist()
        stop_set = set(stops)
        for row, i in enumerate(keep):
            toks = new[row]
            cut = next((j for j, t in enumerate(toks) if t in stop_set), len(toks))
            out[i] = cut_reply(tokenizer, toks[:cut], prompt_format)[1]
        return out

    return policy


def prompt_lengths(tokenizer: PreTrainedTokenizerBase, tasks: Sequence[Task], prompt_format: str = "chat") -> list[int]:
    """Tokens of each task's opening prompt, as the policy renders it (generation prompt included)."""
    texts = [render_prompt(tokenizer, t.messages, t.tool_list, prompt_format=prompt_format) for t in tasks]
    return [len(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def greedy_order(tokenizer: PreTrainedTokenizerBase, tasks: Sequence[Task], idx: Sequence[int],
                 prompt_format: str = "chat") -> list[int]:
    """``idx`` (the positions of ``tasks``) sorted by prompt length, ties in task order: batches of
    similar lengths pad little (the probe generator sorts the same way)."""
    lengths = prompt_lengths(tokenizer, tasks, prompt_format)
    return [i for _, _, i in sorted(zip(lengths, range(len(idx)), idx, strict=True))]


def generate_trajectories(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tasks: Sequence[Task],
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 32,
    max_new_tokens: int | None = None,
    max_turns: int | None = None,
    on_batch: Callable[[int], None] | None = None,
    shard: tuple[int, int] | None = None,
    sort_by_length: bool = True,
    prompt_format: str = "chat",
    reuse_cache: bool | None = None,
) -> list[Trajectory | None]:
    """Roll ``model`` out on ``tasks`` (all of one environment or mixed); greedy unless ``do_sample``.
    Prompts are rendered in ``prompt_format`` (``chat`` or ``plain``, :func:`aclarena.models.chat.render_prompt`).

    Greedy episodes are batched by prompt length (``sort_by_length``, :func:`greedy_order`), so a
    batch pads little; each turn of a batch is one ``generate`` call, which starts from the previous
    call's KV cache when greedy (``reuse_cache``, :func:`model_policy`). Greedy decoding does not depend
    on the batch a task is in, so the trajectories are those of playing each task alone (tested);
    sampled ones keep the task order, which their seeds depend on.

    Sampling is seeded per batch from ``(seed, batch number)``, so a batch draws the same
    samples whichever process plays it. ``shard=(rank, size)`` plays only the batches
    ``b`` with ``b % size == rank`` (the others' trajectories are None): a data-parallel
    rank's share (:mod:`aclarena.distributed`). Without it every item is a Trajectory.
    """
    import numpy as np
    import torch

    if not tasks:
        return []
    counter = [0]  # batches are numbered across environments

    def before_batch(_: int) -> bool:
        b = counter[0]
        counter[0] += 1
        if shard is not None and b % shard[1] != shard[0]:
            return False
        torch.manual_seed(int(np.random.SeedSequence([seed, b]).generate_state(1)[0]))
        return True

    by_env: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        by_env.setdefault(t.env, []).append(i)
    if not do_sample and sort_by_length:
        by_env = {env: greedy_order(tokenizer, [tasks[i] for i in idx], idx, prompt_format)
                  for env, idx in by_env.items()}
    out: list[Trajectory | None] = [None] * len(tasks)
    from aclarena.models.vllm_engine import is_vllm, vllm_policy

    for idx in by_env.values():
        env = env_of(tasks[idx[0]])
        if is_vllm(model):  # --engine vllm: the same loop, answered by a vLLM engine
            policy = vllm_policy(model, tokenizer, max_new_tokens=env.max_new_tokens if max_new_tokens is None else max_new_tokens,
                                 do_sample=do_sample, temperature=temperature, top_p=top_p, seed=seed,
                                 prompt_format=prompt_format)
        else:
            policy = model_policy(model, tokenizer, max_new_tokens=env.max_new_tokens if max_new_tokens is None else max_new_tokens,
                                  do_sample=do_sample, temperature=temperature, top_p=top_p, prompt_format=prompt_format,
                                  reuse_cache=reuse_cache)
        trajs = run_episodes([tasks[i] for i in idx], policy, batch_size=batch_size, max_turns=max_turns,
                             on_batch=on_batch, before_batch=before_batch)
        for i, tr in zip(idx, trajs, strict=True):
            out[i] = tr
    return out
