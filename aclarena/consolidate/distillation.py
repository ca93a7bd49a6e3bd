"""Multi-teacher on-policy distillation: trl's ``DistillationTrainer`` with a teacher per sample.

trl 1.16's stable ``DistillationTrainer`` (Agarwal et al., 2024, arXiv 2306.13649) distils one
teacher: the student samples completions of each prompt, and the loss is a generalised
Jensen-Shannon divergence per completion token between the student's and the teacher's
next-token distributions (``beta`` 1 = reverse KL, 0 = forward KL, 0.5 = JS). Multi-teacher
routing by a ``teacher_id`` column exists only in trl's experimental asynchronous trainer,
which scores with vLLM teacher servers; so :class:`MultiTeacherDistillationTrainer` is a thin
extension of the stable trainer for local teachers:

* each row of the dataset carries ``teacher_id`` (the prompt's domain) and, for tool domains,
  ``tools`` (its tool schemas, as JSON text), rendered by the chat template per row (the stable
  trainer renders one tool list for every row);
* the loss runs per teacher over that teacher's rows of a micro-batch and adds up, each part
  reduced over the batch's valid tokens as trl reduces one teacher's, so the total equals
  the single-teacher loss when one teacher serves every row.

:func:`divergence_beta` maps ``reverse`` / ``forward`` / ``js`` to trl's ``beta``;
:func:`sequence_kl` measures a student's per-token KL to a teacher on fixed sequences
(tests check that distillation lowers it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from aclarena.consolidate.options import DIVERGENCES
from aclarena.errors import unknown_name


def divergence_beta(name: str) -> float:
    """trl's ``beta`` for a divergence name (``reverse`` KL by default in MMOPD)."""
    try:
        return DIVERGENCES[name]
    except KeyError:
        raise unknown_name("divergence", name, DIVERGENCES) from None


def _trainer_class() -> type:
    from trl import DistillationTrainer

    class MultiTeacherDistillationTrainer(DistillationTrainer):
        """``DistillationTrainer`` whose rows name their teacher (``teacher_id``) and their tools.

        Args:
            teachers: ``{teacher_id: model}``; every row's ``teacher_id`` must be a key.
            (the rest as ``DistillationTrainer``; ``teacher_model`` is taken from ``teachers``)
        """

        def __init__(self, model: Any, teachers: Mapping[str, Any], **kwargs: Any) -> None:
            if not teachers:
                raise ValueError("`teachers` is empty; give at least one {teacher_id: model}")
            ids = list(teachers)
            super().__init__(model=model, teacher_model=teachers[ids[0]], **kwargs)
            student: Any = self.model  # the model or its peft wrapper (Trainer types it as any nn.Module or None)
            vocab = student.config.get_text_config().vocab_size
            self.teachers: dict[str, Any] = {}
            for tid in ids:
                t = teachers[tid]
                if t.config.get_text_config().vocab_size != vocab:
                    raise ValueError(f"teacher {tid!r} has another vocabulary size than the student")
                self.teachers[tid] = (self.teacher_model if tid == ids[0]
                                      else self.accelerator.prepare_model(t, evaluation_mode=True))
            self.teacher_ids = ids
            self._row_tools: list[Any] | None = None

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            unknown = {x.get("teacher_id") for x in inputs} - set(self.teachers)
            if unknown:
                raise ValueError(f"rows name teacher(s) {sorted(map(str, unknown))} that were not given")
            self._row_tools = [_tools(x.get("tools")) for x in inputs]
            try:
                out = super()._generate_and_score_completions(inputs)
            finally:
                self._row_tools = None
            out["teacher_index"] = torch.tensor([self.teacher_ids.index(x["teacher_id"]) for x in inputs],
                                                device=out["prompt_ids"].device)
            return out

        def _tokenize_prompts(self, prompts: list) -> Any:
            tools = self._row_tools
            if not tools or not any(tools) or self._is_vlm:
                return super()._tokenize_prompts(prompts)
            # a tokenizer: not a vision model's processor (above); Trainer types it as any processing class
            tokenizer: Any = self.processing_class
            # one row at a time: each with its own tool schemas (the template lists them in the system turn);
            # trl annotates chat_template_kwargs `dict | str` (a JSON string on its command line), but its
            # config parses that string, so the trainer always holds a dict
            ids = [tokenizer.apply_chat_template(conversation=p, tools=t or None, chat_template=self.chat_template,
                                                 add_generation_prompt=True, tokenize=True, return_dict=True,
                                                 **self.chat_template_kwargs)["input_ids"]  # type: ignore[arg-type]
                   for p, t in zip(prompts, tools, strict=True)]
            return ids, None, {}

        def _compute_loss(self, unwrapped_student: Any, inputs: dict[str, Any], num_items_in_batch: Any) -> Any:
            index = inputs["teacher_index"]
            total = entropy = n_valid = None
            parts = []
            for k in torch.unique(index).tolist():
                rows = (index == k).nonzero(as_tuple=True)[0]
                sub = {key: (v[rows] if isinstance(v, torch.Tensor) and v.ndim > 0 and v.shape[0] == index.shape[0]
                             else v) for key, v in inputs.items()}
                # the parent computes the loss against `self.teacher_model`: point it at this rows' teacher
                self.teacher_model = self.teachers[self.teacher_ids[k]]
                loss, ent, nv = super()._compute_loss(unwrapped_student, sub, num_items_in_batch)
                parts.append((loss, nv))
                entropy = ent if entropy is None else entropy + ent
                n_valid = nv if n_valid is None else n_valid + nv
            self.teacher_model = self.teachers[self.teacher_ids[0]]
            if num_items_in_batch is not None:
                total = sum(loss for loss, _ in parts)  # each is its token sum / the batch's token count
            else:
                # each is a mean over its own tokens: weight by them
                assert n_valid is not None  # the batch has rows, so some teacher scored them
                total = sum(loss * nv for loss, nv in parts) / n_valid.clamp(min=1)
            return total, entropy, n_valid

    return MultiTeacherDistillationTrainer


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return json.loads(value) if value else None
    return list(value) or None


def multi_teacher_trainer(**kwargs: Any) -> Any:
    """A :class:`MultiTeacherDistillationTrainer` (the class is built on first use: trl imports lazily)."""
    return _trainer_class()(**kwargs)


@torch.no_grad()
def sequence_kl(student: Any, teacher: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                completion_mask: torch.Tensor, *, direction: str = "reverse") -> float:
    """Mean per-token KL between student and teacher next-token distributions on completion tokens.

    ``reverse`` is ``KL(student || teacher)`` (what MMOPD minimises), ``forward`` the other way.
    ``completion_mask[b, t] = 1`` marks tokens ``t`` whose prediction (from position ``t − 1``) counts.
    """
    s = torch.log_softmax(student(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float(), -1)
    t = torch.log_softmax(teacher(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float(), -1)
    p, q = (s, t) if direction == "reverse" else (t, s)
    kl = (p.exp() * (p - q)).sum(-1)
    mask = completion_mask[:, 1:].to(kl.dtype)
    return float((kl * mask).sum() / mask.sum().clamp(min=1))


def prompt_records(domains: Sequence[str], n: int, seed: int, teacher_of: Mapping[str, str]) -> list[dict[str, Any]]:
    """MMOPD prompts: ``n`` per domain from the train split, every domain's, tool domains multi-turn.

    Single-turn domains give their opening ``[system, user]``; tool domains give expert
    trajectories cut before each assistant turn (the opening, then after tool results and user
    replies), so the student is distilled on later turns of an episode too. Each row:
    ``{"prompt", "tools" (JSON or None), "teacher_id", "domain"}``.
    """
    from aclarena.envs import get_env
    from aclarena.envs.experts import expert_trajectory, flatten_tool_calls

    rows: list[dict[str, Any]] = []
    for d in domains:
        tasks = get_env(d).generate(n, seed=seed, split="train", variant="id")
        got = []
        for i, task in enumerate(tasks):
            tools = json.dumps(task.tool_list, ensure_ascii=False) if task.tool_list else None
            if not task.tool_list:
                got.append({"prompt": task.messages, "tools": tools})
                continue
            msgs = flatten_tool_calls(expert_trajectory(task).messages)
            cuts = [j for j, m in enumerate(msgs) if m["role"] == "assistant"]
            # cycle through the turns: the opening of one episode, a later turn of the next, ...
            j = cuts[i % len(cuts)]
            got.append({"prompt": [dict(m) for m in msgs[:j]], "tools": tools})
        for r in got[:n]:
            rows.append({**r, "teacher_id": teacher_of[d], "domain": d})
    return rows
