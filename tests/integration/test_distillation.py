"""Multi-teacher on-policy distillation: each row's teacher is used, and the student's KL to its teachers falls."""

from __future__ import annotations

import json

import pytest
import torch

from aclarena.consolidate.distillation import (
    divergence_beta,
    multi_teacher_trainer,
    prompt_records,
    sequence_kl,
)
from aclarena.errors import AclarenaError


def _config(tmp_path, steps):
    from trl import DistillationConfig

    return DistillationConfig(output_dir=str(tmp_path / "out"), bf16=False, use_cpu=True, gradient_checkpointing=False,
                              max_completion_length=10, per_device_train_batch_size=4, learning_rate=3e-3,
                              max_steps=steps, logging_steps=2, report_to="none", save_strategy="no", beta=1.0,
                              disable_tqdm=True, seed=0)


def _eval_sequences(model, tok, rows):
    torch.manual_seed(0)
    out = []
    for r in rows:
        enc = tok.apply_chat_template(r["prompt"], tools=json.loads(r["tools"]) if r["tools"] else None,
                                      add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.no_grad():
            g = model.generate(**enc, max_new_tokens=10, do_sample=True, pad_token_id=tok.pad_token_id)
        mask = torch.zeros_like(g)
        mask[:, enc["input_ids"].shape[1]:] = 1
        out.append((g, torch.ones_like(g), mask, r["teacher_id"]))
    return out


@pytest.mark.slow
def test_students_kl_to_its_teachers_falls(tmp_path, tokenizer):
    from datasets import Dataset

    from aclarena.models.tiny import build_model, tiny_config

    cfg = tiny_config(tokenizer)
    student = build_model(cfg, seed=0)
    teachers = {"math": build_model(cfg, seed=1), "search": build_model(cfg, seed=2)}
    rows = prompt_records(["math", "search"], 6, 0, {"math": "math", "search": "search"})
    # tool prompts are multi-turn: some cut after a tool result
    assert any(r["prompt"][-1]["role"] == "tool" for r in rows if r["domain"] == "search")
    assert all(r["tools"] is None for r in rows if r["domain"] == "math")
    tokenizer.padding_side = "left"
    held = _eval_sequences(student, tokenizer, rows[:2] + rows[6:8])

    def kl(model):
        return sum(sequence_kl(model, teachers[t], g, a, m) for g, a, m, t in held) / len(held)

    before = kl(student)
    trainer = multi_teacher_trainer(model=student, teachers=teachers, args=_config(tmp_path, 8),
                                    train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    trainer.train()
    after = kl(trainer.model)
    assert after < 0.8 * before, (before, after)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) >= 3 and all(x == x for x in losses)


def test_rows_must_name_given_teachers(tmp_path, tokenizer):
    from datasets import Dataset

    from aclarena.models.tiny import build_model, tiny_config

    cfg = tiny_config(tokenizer)
    rows = prompt_records(["math"], 4, 0, {"math": "oracle-x"})
    trainer = multi_teacher_trainer(model=build_model(cfg, seed=0), teachers={"oracle-math": build_model(cfg, seed=1)},
                                    args=_config(tmp_path, 1), train_dataset=Dataset.from_list(rows),
                                    processing_class=tokenizer)
    with pytest.raises(ValueError, match="oracle-x"):
        trainer.train()


def test_divergences():
    assert divergence_beta("reverse") == 1.0 and divergence_beta("forward") == 0.0 and divergence_beta("js") == 0.5
    with pytest.raises(AclarenaError, match="did you mean 'reverse'"):
        divergence_beta("revers")
