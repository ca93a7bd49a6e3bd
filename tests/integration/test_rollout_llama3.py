"""Multi-turn tool RL with a Llama-3-style chat template: the end of a turn comes from the template (issue 15).

The rollout used to hard-code ChatML's ``<|im_end|>\\n`` as the end of an assistant turn; with a
Llama-3 layout (``<|start_header_id|>role<|end_header_id|>\\n\\n ... <|eot_id|>``) it refused the
template. Here a tiny Llama model with such a template plays search / e-commerce episodes and
trains one real GRPO step through trl with the arena's rollout.
"""

from __future__ import annotations

import pytest
import torch

from aclarena.envs import get_env
from aclarena.envs.rollout import Episode, end_of_turn, stop_token_ids
from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
from aclarena.train.rollout import ArenaRollout

LLAMA3_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLAMA3_TEMPLATE = (
    "{{ '<|begin_of_text|>' }}"
    "{% if tools %}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n' }}{% endif %}"
    "{{ 'Tools:' }}{% for tool in tools %}{% set f = tool.function if tool.function is defined else tool %}"
    "{{ '\\n- ' + f.name }}{% endfor %}{{ '<|eot_id|>' }}"
    "{% elif messages[0].role == 'system' %}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' + messages[0].content + '<|eot_id|>' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' %}"
    "{{ '<|start_header_id|>user<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{% elif message.role == 'assistant' %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% if message.content %}{{ message.content }}{% endif %}"
    "{% if message.tool_calls %}{% for tc in message.tool_calls %}{% set call = tc.function if tc.function is defined else tc %}"
    "{{ '<tool_call>' + ({'name': call.name, 'arguments': call.arguments} | tojson) + '</tool_call>' }}"
    "{% endfor %}{% endif %}{{ '<|eot_id|>' }}"
    "{% elif message.role == 'tool' %}"
    "{{ '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def llama3():
    from fixtures import make_tokenizer

    tok = make_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": LLAMA3_TOKENS})
    tok.eos_token = "<|end_of_text|>"  # as Llama 3 base: the end of a turn is not the tokenizer's eos
    tok.pad_token = "<|end_of_text|>"
    tok.chat_template = LLAMA3_TEMPLATE
    cfg = tiny_config(tok, arch="llama", max_positions=1024)
    eot, eos = tok.convert_tokens_to_ids("<|eot_id|>"), tok.convert_tokens_to_ids("<|end_of_text|>")
    cfg.eos_token_id = [eos]  # the generation config does not name <|eot_id|> either: the template must
    model = build_model(cfg, seed=5)
    model.eval()
    return model, tok, eot


def test_end_of_turn_is_read_from_the_template(llama3, tokenizer):
    model, tok, eot = llama3
    assert end_of_turn(tok) == ("<|eot_id|>", eot)
    assert eot in stop_token_ids(model, tok)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn(tokenizer) == ("<|im_end|>\n", im_end)  # ChatML (the arena's template)


class ScriptedLlama3(torch.nn.Module):
    """Answers each conversation with its task's next expert turn, ended by <|eot_id|>: drives the
    rollout through every turn of real multi-turn episodes (uniform 'logits')."""

    def __init__(self, tokenizer, tasks):
        super().__init__()
        self.tok = tokenizer
        self.tasks = list(tasks)
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = type("C", (), {"max_position_embeddings": 1024})()
        self.generation_config = type("G", (), {"eos_token_id": [tokenizer.convert_tokens_to_ids("<|end_of_text|>")]})()

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, **kw):
        from aclarena.envs.rollout import env_of

        eot = self.tok.convert_tokens_to_ids("<|eot_id|>")
        assert eot in kw["eos_token_id"]  # generation stops at the template's end of turn
        rows, width = [], 0
        for ids, att in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            text = self.tok.decode([i for i, a in zip(ids, att, strict=True) if a], skip_special_tokens=False)
            task = next(t for t in self.tasks if t.prompt in text)
            turn = text.count("<|start_header_id|>assistant<|end_header_id|>") - 1
            action = env_of(task).expert_actions(task)[turn]
            new = self.tok(action, add_special_tokens=False)["input_ids"][: max_new_tokens - 1] + [eot]
            rows.append(new)
            width = max(width, len(new))
        seqs = torch.full((len(rows), input_ids.shape[1] + width), pad_token_id, dtype=torch.long)
        seqs[:, : input_ids.shape[1]] = input_ids
        for r, new in enumerate(rows):
            seqs[r, input_ids.shape[1] : input_ids.shape[1] + len(new)] = torch.tensor(new)
        scores = tuple(torch.zeros(len(rows), len(self.tok)) for _ in range(width))
        return type("Out", (), {"sequences": seqs, "scores": scores})()


@pytest.mark.parametrize("domain", ["search", "ecom"])
def test_llama3_multi_turn_rollout_is_the_rendered_conversation(llama3, domain):
    _, tok, eot = llama3
    env = get_env(domain)
    tasks = env.generate(3, seed=2, split="train", variant="id")
    episodes = [Episode(env, t) for t in tasks]
    out = ArenaRollout(tasks, max_new_tokens=env.max_new_tokens).play(ScriptedLlama3(tok, tasks), tok, episodes)
    assert out["env_reward"] == [1.0] * len(tasks)  # the expert's turns, played through the rollout, solve every task
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    for e, p, c, m in zip(episodes, out["prompt_ids"], out["completion_ids"], out["env_mask"], strict=True):
        assert sum(msg["role"] == "assistant" for msg in e.messages) >= 2  # environment tokens between turns
        assert im_end not in c  # nothing of ChatML leaks into a Llama-3 conversation
        # the sequence is exactly the conversation as the Llama-3 template renders it
        full = tok.apply_chat_template(e.messages, tools=e.tools, add_generation_prompt=False, tokenize=False)
        assert tok.decode(p + c, skip_special_tokens=False) == full
        # the policy's runs are its turns, each ended by <|eot_id|>; the environment's start with a header
        for j in range(1, len(c)):
            if m[j] == 0 and m[j - 1] == 1:
                assert c[j - 1] == eot and tok.convert_ids_to_tokens(c[j]) == "<|start_header_id|>"
        model_text = tok.decode([t for t, bit in zip(c, m, strict=True) if bit], skip_special_tokens=False)
        assert "ipython" not in model_text and "<|start_header_id|>" not in model_text


def test_grpo_step_on_a_tool_domain_with_a_llama3_template(llama3, tmp_path):
    from safetensors.torch import load_file

    from aclarena.train.data import arena_rl_data
    from aclarena.train.phases import run_rl

    model, tok, _ = llama3
    start = save_checkpoint(model, tok, tmp_path / "start")
    data = arena_rl_data("search", 4, 0, max_turns=2, max_new_tokens=8)
    trl = {"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 2, "learning_rate": 1e-3,
           "entropy_coef": 0.05, "save_strategy": "no", "logging_steps": 1, "report_to": []}
    res = run_rl(start, data, tmp_path / "out", trl=trl, seed=0)
    assert res.steps == 1
    before, after = load_file(str(start / "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the step trained the policy
