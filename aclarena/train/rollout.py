"""Multi-turn tool rollouts for trl's ``GRPOTrainer``: the arena's own episode loop as a ``rollout_func``.

trl 1.16 runs multi-turn tool use itself only for chat templates whose tool-call format it
recognises (``add_response_schema``); the mini arena's template is not among them, and the
arena's environments have their own loop anyway (scripted users, policy checks, failed
steps). So RL on the tool domains plugs that loop into trl through ``rollout_func``:

* trl hands over the per-process batch of prompts, *including* the ``num_generations``
  repeats of each; every entry becomes one episode, sampled independently.
* The episodes of a batch advance together, one batched ``generate`` per turn (left padded).
  The completion of an entry is everything after its prompt: the sampled assistant turns
  *and* the tool results / user replies between them (as the chat template renders them).
* ``env_mask`` is 1 on tokens the policy sampled and 0 on environment tokens; trl uses it as
  the loss mask, so only the policy's own tokens get a gradient. ``logprobs`` are the
  sampling log-probabilities of every completion token (0 on environment tokens).
* ``env_reward`` (the episode's verifiable reward) reaches :func:`env_reward`, the reward
  function, as a keyword argument.

Each prompt's system message carries the task id (``task_id``, ignored by the template), so
the rollout knows which task (database, hidden answer) an entry is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from aclarena.envs.base import Task
from aclarena.envs.rollout import Episode, context_limit, end_of_turn, env_of, stop_token_ids

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def env_reward(prompts: Sequence[Any], completions: Sequence[Any], env_reward: Sequence[float], **kwargs: Any) -> list[float]:
    """trl reward function: the episode reward computed during the rollout."""
    return [float(r) for r in env_reward]


def prompt_row(task: Task) -> dict[str, Any]:
    """A GRPO dataset row for a multi-turn task: the opening messages, the system one tagged with the task id."""
    system, user = task.messages
    return {"prompt": [{**system, "task_id": task.id}, {**user, "task_id": None}], "task_id": task.id}


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], tools: Any, gen: bool) -> str:
    clean = [{k: v for k, v in m.items() if k != "task_id"} for m in messages]
    # tokenize=False: the rendered text (transformers annotates every return form together)
    return cast(str, tokenizer.apply_chat_template(clean, tools=tools, add_generation_prompt=gen, tokenize=False))


class ArenaRollout:
    """``rollout_func(prompts, trainer)`` playing arena episodes with the trainer's current policy.

    Args:
        tasks: every task the dataset's prompts may name, by id.
        max_new_tokens: tokens per assistant turn (default: the environment's budget).
        max_context: longest prompt + completion (default: the model's positions).
        max_turns: turn limit (default: the environment's).
    """

    def __init__(self, tasks: Mapping[str, Task] | Sequence[Task], *, max_new_tokens: int | None = None,
                 max_context: int | None = None, max_turns: int | None = None) -> None:
        self.tasks = dict(tasks) if isinstance(tasks, Mapping) else {t.id: t for t in tasks}
        if not self.tasks:
            raise ValueError("`tasks` is empty")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be >= 1, got {max_new_tokens}")
        self.max_new_tokens = max_new_tokens
        self.max_context = max_context
        self.max_turns = max_turns
        self.__name__ = "arena_rollout"

    def task_of(self, prompt: Any) -> Task:
        tid = prompt[0].get("task_id") if isinstance(prompt, list) and prompt else None
        if tid is None or tid not in self.tasks:
            raise ValueError("a GRPO prompt does not name a task of this rollout (its system message needs `task_id`)")
        return self.tasks[tid]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        import torch
        from trl.models import unwrap_model_for_generation

        tok = trainer.processing_class
        args = trainer.args
        tasks = [self.task_of(p) for p in prompts]
        episodes = [Episode(env_of(t), t, max_turns=self.max_turns) for t in tasks]
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=args.ds3_gather_for_generation) as model, \
                torch.no_grad():
            out = self.play(model, tok, episodes, temperature=args.temperature, top_p=args.top_p)
        return out

    def play(self, model: Any, tokenizer: PreTrainedTokenizerBase, episodes: list[Episode], *,
             temperature: float = 1.0, top_p: float = 1.0) -> dict[str, list[Any]]:
        """Play ``episodes`` to the end with sampling; the rollout_func output (see the module docstring)."""
        import torch

        limit = context_limit(model, self.max_context)
        stops = stop_token_ids(model, tokenizer)
        stop_set = set(stops)
        # the end of an assistant turn comes from the chat template (ChatML "<|im_end|>\n", Llama 3
        # "<|eot_id|>", ...): the observation that follows a turn starts where the template's turn ends
        eot_text, eot = end_of_turn(tokenizer)
        if eot is None:
            raise RuntimeError("the chat template ends an assistant turn with no token of its own (rendered after "
                               f"the content: {eot_text!r}); multi-turn rollouts need one, e.g. <|im_end|> or <|eot_id|>")
        eot_token = str(tokenizer.decode([eot], skip_special_tokens=False))
        after_eot = eot_text[len(eot_token):]
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
        device = next(model.parameters()).device
        n = len(episodes)
        prompt_ids: list[list[int]] = []
        for e in episodes:
            text = _render(tokenizer, e.messages, e.tools, True)
            prompt_ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        completion: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        mask: list[list[int]] = [[] for _ in range(n)]
        while True:
            live = [i for i, e in enumerate(episodes) if not e.done]
            if not live:
                break
            budget = {i: min(episodes[i].env.max_new_tokens if self.max_new_tokens is None else self.max_new_tokens,
                             limit - len(prompt_ids[i]) - len(completion[i])) for i in live}
            for i in [i for i in live if budget[i] < 1]:
                episodes[i].act(None)  # the context is full: the episode ends (end_reason "context")
            live = [i for i in live if budget[i] >= 1]
            if not live:
                break
            contexts = [prompt_ids[i] + completion[i] for i in live]
            width = max(len(c) for c in contexts)
            input_ids = torch.full((len(live), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(live), width), dtype=torch.long)
            for row, ctx in enumerate(contexts):  # left padding: generation continues right after the context
                input_ids[row, width - len(ctx):] = torch.tensor(ctx, dtype=torch.long)
                attention[row, width - len(ctx):] = 1
            gen = model.generate(
                input_ids=input_ids.to(device), attention_mask=attention.to(device),
                max_new_tokens=max(budget[i] for i in live), do_sample=True, temperature=temperature, top_p=top_p,
                top_k=0, pad_token_id=pad_id, eos_token_id=stops, output_scores=True, return_dict_in_generate=True,
            )
            new = gen.sequences[:, width:]
            # scores are the processed logits (after temperature / top-p): the sampling distribution
            step_logps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in gen.scores], dim=1)
            picked = step_logps.gather(-1, new[:, : step_logps.size(1)].unsqueeze(-1)).squeeze(-1).cpu()
            new = new.cpu().tolist()
            for row, i in enumerate(live):
                toks = new[row][: budget[i]]
                cut = next((j + 1 for j, t in enumerate(toks) if t in stop_set), len(toks))
                toks = toks[:cut]
                ended = bool(toks) and toks[-1] in stop_set
                text = cast(str, tokenizer.decode(toks[:-1] if ended else toks, skip_special_tokens=False))  # one sequence
                completion[i].extend(toks)
                logprobs[i].extend(float(x) for x in picked[row, : len(toks)])
                mask[i].extend([1] * len(toks))
                e = episodes[i]
                before = len(e.messages)
                e.act(text)
                if e.done:
                    continue
                # what the template puts between this turn and the next: the tool results / user reply
                # and the next assistant header, tokenised as the model will read them
                upto = _render(tokenizer, e.messages[: before + 1], e.tools, False)
                full = _render(tokenizer, e.messages, e.tools, True)
                if not full.startswith(upto) or not upto.endswith(eot_text):
                    raise RuntimeError("the chat template does not render conversations prefix-preserving; "
                                       "multi-turn rollouts need a template that does")
                obs = ("" if ended else eot_token) + after_eot + full[len(upto):]
                obs_ids = tokenizer(obs, add_special_tokens=False)["input_ids"]
                if not ended and (not obs_ids or obs_ids[0] != eot):
                    raise RuntimeError(f"the end of turn {eot_token!r} is not a single token of this tokenizer")
                completion[i].extend(obs_ids)
                logprobs[i].extend([0.0] * len(obs_ids))
                mask[i].extend([0] * len(obs_ids))
        for i in range(n):  # an observation may overrun the context on the last turn; it carries no loss
            cap = max(1, limit - len(prompt_ids[i]))
            del completion[i][cap:], logprobs[i][cap:], mask[i][cap:]
            if not completion[i]:  # the prompt alone filled the context: one masked end token keeps trl's shapes
                completion[i], logprobs[i], mask[i] = [eot], [0.0], [0]
        rewards = [e.result().reward for e in episodes]
        return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": logprobs, "env_mask": mask,
                "env_reward": rewards}
