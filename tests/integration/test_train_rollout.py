"""The multi-turn rollout given to trl's GRPOTrainer: what it returns must be exactly what the policy
sampled (mask 1, with its sampling log-probs) and what the environment said (mask 0), in one sequence."""

from __future__ import annotations

import pytest
import torch

from aclarena.envs import get_env
from aclarena.envs.rollout import Episode
from aclarena.models.tiny import build_model, tiny_config
from aclarena.train.rollout import ArenaRollout, env_reward, prompt_row


@pytest.fixture(scope="module")
def model(tokenizer):
    m = build_model(tiny_config(tokenizer, max_positions=1024), seed=3)
    m.eval()
    return m


def _render(tok, messages, tools, gen):
    return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False)


@pytest.mark.parametrize("domain", ["search", "ecom"])
def test_rollout_tokens_mask_and_logprobs(model, tokenizer, domain):
    tasks = get_env(domain).generate(3, seed=1, split="train", variant="id")
    rollout = ArenaRollout(tasks, max_new_tokens=12, max_turns=3)
    episodes = [Episode(get_env(domain), t, max_turns=3) for t in tasks for _ in range(2)]
    torch.manual_seed(0)
    with torch.no_grad():
        out = rollout.play(model, tokenizer, episodes)
    n = len(episodes)
    assert all(len(out[k]) == n for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward"))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for e, p, c, lp, m, r in zip(episodes, out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"],
                                 out["env_reward"], strict=True):
        assert e.done and r == e.result().reward
        assert len(c) == len(lp) == len(m) > 0
        assert p == tokenizer(_render(tokenizer, e.messages[:2], e.tools, True), add_special_tokens=False)["input_ids"]
        # the sequence is the conversation as the template renders it
        text = tokenizer.decode(p + c, skip_special_tokens=False)
        full = _render(tokenizer, e.messages, e.tools, False)
        assert full.startswith(text) or text.startswith(full.rstrip("\n")), (text[-200:], full[-200:])
        # masked tokens are exactly the assistant turns the model wrote
        runs, cur = [], []
        for tok_id, bit in zip(c, m, strict=True):
            if bit:
                cur.append(tok_id)
            elif cur:
                runs.append(cur)
                cur = []
        if cur:
            runs.append(cur)
        turns = [msg["content"] for msg in e.messages[2:] if msg["role"] == "assistant"]
        assert len(runs) == len(turns)
        for ids, content in zip(runs, turns, strict=True):
            body = ids[:-1] if ids[-1] == im_end else ids
            assert tokenizer.decode(body, skip_special_tokens=False) == content
        # environment tokens carry no log-prob; sampled tokens carry the model's, as a teacher-forced pass sees them
        assert all(x == 0.0 for x, bit in zip(lp, m, strict=True) if not bit)
        ids = torch.tensor([p + c])
        with torch.no_grad():
            logits = model(ids).logits[0, len(p) - 1 : -1].float()
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c)[:, None])[:, 0]
        mask = torch.tensor(m, dtype=torch.bool)
        torch.testing.assert_close(torch.tensor(lp)[mask], ref[mask], atol=2e-3, rtol=0)


def test_prompt_rows_name_their_task_and_reward_passes_through():
    tasks = get_env("search").generate(2, seed=0, split="train", variant="id")
    rows = [prompt_row(t) for t in tasks]
    rollout = ArenaRollout(tasks)
    assert [rollout.task_of(r["prompt"]).id for r in rows] == [t.id for t in tasks]
    assert rows[0]["prompt"][1]["content"] == tasks[0].prompt
    with pytest.raises(ValueError, match="task_id"):
        rollout.task_of([{"role": "system", "content": "x"}])
    assert env_reward(["p"] * 3, ["c"] * 3, env_reward=[1, 0.0, 1.0]) == [1.0, 0.0, 1.0]


class ScriptedModel(torch.nn.Module):
    """Answers each conversation with its task's next expert turn (uniform 'logits'): drives
    the rollout through every turn of a real multi-turn episode."""

    def __init__(self, tokenizer, tasks, max_positions=1024):
        super().__init__()
        self.tok = tokenizer
        self.tasks = list(tasks)
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = type("C", (), {"max_position_embeddings": max_positions})()
        self.generation_config = type("G", (), {"eos_token_id": [tokenizer.convert_tokens_to_ids("<|im_end|>")]})()

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, **kw):
        from aclarena.envs.rollout import env_of

        im_end = self.tok.convert_tokens_to_ids("<|im_end|>")
        rows, width = [], 0
        for ids, att in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            text = self.tok.decode([i for i, a in zip(ids, att, strict=True) if a], skip_special_tokens=False)
            task = next(t for t in self.tasks if t.prompt in text)
            turn = text.count("<|im_start|>assistant") - 1
            action = env_of(task).expert_actions(task)[turn]
            new = self.tok(action, add_special_tokens=False)["input_ids"][: max_new_tokens - 1] + [im_end]
            rows.append(new)
            width = max(width, len(new))
        seqs = torch.full((len(rows), input_ids.shape[1] + width), pad_token_id, dtype=torch.long)
        seqs[:, : input_ids.shape[1]] = input_ids
        for r, new in enumerate(rows):
            seqs[r, input_ids.shape[1] : input_ids.shape[1] + len(new)] = torch.tensor(new)
        vocab = len(self.tok)
        scores = tuple(torch.zeros(len(rows), vocab) for _ in range(width))
        return type("Out", (), {"sequences": seqs, "scores": scores})()


@pytest.mark.parametrize("domain", ["search", "ecom"])
def test_multi_turn_bookkeeping_with_expert_turns(tokenizer, domain):
    env = get_env(domain)
    tasks = env.generate(4, seed=2, split="train", variant="id")
    model = ScriptedModel(tokenizer, tasks)
    episodes = [Episode(env, t) for t in tasks]
    out = ArenaRollout(tasks, max_new_tokens=env.max_new_tokens).play(model, tokenizer, episodes)
    assert out["env_reward"] == [1.0] * len(tasks)  # the expert's turns, played through the rollout, solve every task
    for e, p, c, lp, m in zip(episodes, out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"],
                              strict=True):
        turns = [msg for msg in e.messages[2:] if msg["role"] == "assistant"]
        assert len(turns) >= 2  # a real multi-turn episode: environment tokens sit between the turns
        text = tokenizer.decode(p + c, skip_special_tokens=False)
        assert text == _render(tokenizer, e.messages, e.tools, False).rstrip("\n")
        env_text = tokenizer.decode([t for t, bit in zip(c, m, strict=True) if not bit], skip_special_tokens=False)
        for msg in e.messages[2:]:
            if msg["role"] in ("tool", "user"):
                assert msg["content"] in env_text
        model_text = tokenizer.decode([t for t, bit in zip(c, m, strict=True) if bit], skip_special_tokens=False)
        assert "<tool_response>" not in model_text
        vocab = len(tokenizer)
        assert all(abs(x + torch.log(torch.tensor(float(vocab))).item()) < 1e-4 for x, bit in zip(lp, m, strict=True)
                   if bit)
