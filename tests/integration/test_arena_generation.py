"""Rollouts with a real (tiny, untrained) model: batching, left padding, context limits, rejection sampling."""

from __future__ import annotations

import functools

import pytest

from aclarena.envs import sample_tasks
from aclarena.envs.rollout import generate_trajectories, model_policy, run_episodes


@pytest.fixture(scope="module")
def tiny(tokenizer):
    from aclarena.models.tiny import build_model, tiny_config

    return build_model(tiny_config(tokenizer), seed=0), tokenizer


def test_batched_generation_equals_one_by_one(tiny):
    model, tok = tiny
    tasks = sample_tasks("math/id", 3, 0) + sample_tasks("ecom/id", 2, 0) + sample_tasks("if/ood", 2, 0)
    tok.padding_side = "right"  # as a tokenizer saved by SFTTrainer comes back: the policy must not care
    batched = generate_trajectories(model, tok, tasks, batch_size=8, max_new_tokens=12)
    single = generate_trajectories(model, tok, tasks, batch_size=1, max_new_tokens=12)
    assert [t.steps[0].text for t in batched] == [t.steps[0].text for t in single]
    assert all(len(t.steps[0].text) > 0 for t in batched)
    assert [t.task.id for t in batched] == [t.id for t in tasks]


def test_sampling_is_seeded(tiny):
    model, tok = tiny
    tasks = sample_tasks("general", 4, 0)
    a = generate_trajectories(model, tok, tasks, do_sample=True, seed=3, max_new_tokens=6)
    b = generate_trajectories(model, tok, tasks, do_sample=True, seed=3, max_new_tokens=6)
    c = generate_trajectories(model, tok, tasks, do_sample=True, seed=4, max_new_tokens=6)
    assert [t.steps[0].text for t in a] == [t.steps[0].text for t in b]
    assert [t.steps[0].text for t in a] != [t.steps[0].text for t in c]


def test_full_context_ends_the_episode(tiny):
    model, tok = tiny
    tasks = sample_tasks("ecom/id", 2, 0) + sample_tasks("general", 1, 0)
    trajs = run_episodes(tasks, model_policy(model, tok, max_new_tokens=8, max_context=400))
    assert [t.end_reason for t in trajs[:2]] == ["context", "context"] and trajs[0].turns == 0
    assert trajs[2].end_reason == "answer" and all(t.reward == 0.0 for t in trajs)


def test_rejection_sampling_keeps_reward_one(tiny, monkeypatch):
    model, tok = tiny
    import aclarena.envs.experts as experts

    tasks = sample_tasks("search/id", 3, 0)
    good = [experts.expert_trajectory(t) for t in tasks]
    bad = experts.play(tasks[0], ["Answer: nobody"])

    def fake(model_, tok_, repeated, **kwargs):
        assert kwargs["do_sample"] and len(repeated) == 6
        return [good[0], good[0], bad, good[1], bad, good[2]]

    monkeypatch.setattr(experts, "generate_trajectories", fake)
    recs = experts.rejection_sample(model, tok, tasks, k=2)
    assert [r["task_id"] for r in recs] == [t.id for t in tasks]  # the duplicate of task 0 is kept once
    assert all(any(m.get("tool_calls") for m in r["messages"]) for r in recs)
    monkeypatch.undo()
    real = experts.rejection_sample(model, tok, tasks, k=2, seed=0)
    assert real == []  # an untrained model solves nothing


def _padding_counter(model, monkeypatch):
    """Count the pad positions of every generate call (left padding: attention 0)."""
    pads = [0]
    real = model.generate

    def counting(*args, **kwargs):
        pads[0] += int((kwargs["attention_mask"] == 0).sum())
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counting)
    return pads


def _asking_model(tok, monkeypatch):
    """A tiny model writing prompt-dependent text that often asks the scripted e-commerce user a question."""
    import torch

    from aclarena.models.tiny import build_model, tiny_config

    # large random weights: an untrained model at the usual scale writes the same token for every prompt,
    # which any batching would reproduce; these write prompt-dependent text
    model = build_model(tiny_config(tok), seed=0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3, generator=g)
    # and a bias towards "?": the model then asks the scripted e-commerce user, who answers, so the
    # episodes go on for several turns (each turn of a batch one generate call)
    qid = tok.convert_tokens_to_ids("?")
    forward = model.forward

    @functools.wraps(forward)  # its signature: generate passes position ids to a forward that takes them
    def asking(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.logits[..., qid] += 6.0
        return out

    monkeypatch.setattr(model, "forward", asking)
    return model


def test_greedy_batches_by_length_and_equals_one_by_one(tokenizer, monkeypatch):
    """Greedy eval sorts episodes by prompt length (less padding), and every multi-turn trajectory is
    the one of playing that task alone."""
    from aclarena.envs.rollout import prompt_lengths

    tok = tokenizer
    model = _asking_model(tok, monkeypatch)
    general = sample_tasks("general", 6, 1)
    by_len = [t for _, t in sorted(zip(prompt_lengths(tok, general), general, strict=True), key=lambda x: x[0])]
    assert len(set(prompt_lengths(tok, by_len))) > 1
    mixed = [by_len[i] for i in (5, 0, 4, 1, 3, 2)]  # long, short, ...: the worst order for padding
    tasks = mixed + sample_tasks("ecom/id", 3, 1)
    kw = {"max_new_tokens": 8, "max_turns": 3}
    single = generate_trajectories(model, tok, tasks, batch_size=1, sort_by_length=False, **kw)
    pads = _padding_counter(model, monkeypatch)
    unsorted = generate_trajectories(model, tok, tasks, batch_size=2, sort_by_length=False, **kw)
    pads_unsorted, pads[0] = pads[0], 0
    batched = generate_trajectories(model, tok, tasks, batch_size=2, **kw)
    assert pads[0] < pads_unsorted
    assert [t.task.id for t in batched] == [t.id for t in tasks]
    assert len({t.steps[0].text for t in batched}) > 3  # prompt-dependent answers
    assert [t.messages for t in batched] == [t.messages for t in single] == [t.messages for t in unsorted]
    assert [(t.reward, t.end_reason) for t in batched] == [(t.reward, t.end_reason) for t in single]
    assert any(t.turns > 1 for t in batched)  # multi-turn episodes were played


@pytest.mark.parametrize("wrap", ["hf", "unmerged-lora"])
def test_kept_cache_answers_as_prefilling_every_turn(tokenizer, monkeypatch, wrap):
    """Greedy turns read from the previous turn's KV cache (kept per row, gathered, the rest of each prompt
    prefilled): every trajectory is the one of prefilling each prompt whole, and most prompt tokens are
    not read again; also through an unmerged LoRA adapter (how eval loads one)."""
    from aclarena.models import prefix_cache
    from aclarena.models.prefix_cache import PrefixCache

    tok = tokenizer
    model = _asking_model(tok, monkeypatch)
    if wrap == "unmerged-lora":
        from peft import LoraConfig, get_peft_model

        # random A and B: the adapter changes the answers
        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    tasks = sample_tasks("ecom/id", 5, 2) + sample_tasks("general", 3, 2)
    fresh = run_episodes(tasks, model_policy(model, tok, max_new_tokens=8, reuse_cache=False), batch_size=3,
                         max_turns=4)
    calls: list[tuple[int, int]] = []
    prepare = PrefixCache.prepare

    def counting(self, ids, pad_id):
        out = prepare(self, ids, pad_id)
        calls.append((out.reused, sum(len(p) for p in ids)))
        return out

    monkeypatch.setattr(prefix_cache.PrefixCache, "prepare", counting)
    kept = run_episodes(tasks, model_policy(model, tok, max_new_tokens=8), batch_size=3, max_turns=4)
    assert sum(t.turns for t in fresh) > len(tasks) + 4  # multi-turn episodes
    assert [t.messages for t in kept] == [t.messages for t in fresh]
    assert [(t.reward, t.end_reason) for t in kept] == [(t.reward, t.end_reason) for t in fresh]
    reused, total = map(sum, zip(*calls, strict=True))
    assert reused > total / 2, (reused, total)



def test_sampling_keeps_task_order_batches(tiny):
    """Sampled rollouts are seeded per batch of the task order: sorting would change them, so it is off."""
    model, tok = tiny
    tasks = sample_tasks("general", 2, 0) + sample_tasks("math/id", 2, 0)
    a = generate_trajectories(model, tok, tasks, do_sample=True, seed=5, batch_size=2, max_new_tokens=6)
    b = generate_trajectories(model, tok, tasks, do_sample=True, seed=5, batch_size=2, max_new_tokens=6,
                              sort_by_length=False)
    assert [t.steps[0].text for t in a] == [t.steps[0].text for t in b]
