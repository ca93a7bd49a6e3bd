"""A real model's shape, end to end through the command line (issue 32): a Llama with tied embeddings and
grouped-query attention (6 heads, 2 key/value heads, as SmolLM2's 9/3), a SentencePiece-style tokenizer
(Metaspace, `<s>`/`</s>`/`<unk>`: not the Qwen byte-level BPE of the other tests) and a ChatML template
that adds a default system prompt, like SmolLM2-Instruct's. A LoRA stage added with `init --add` must get
its base as parent, so that `displacement` measures the adapter's own update; a JSONL suite whose answers
are plain transformers' greedy replies must score 1 for that checkpoint (the model's own template, default
system prompt included, is what `eval` renders)."""

from __future__ import annotations

import json

import pytest
import torch

from aclarena.envs.custom import register_suites
from aclarena.store.manifest import Manifest, load_manifest

DEFAULT_SYSTEM = "You are a helpful assistant."
TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
PROMPTS = ["what is the first number", "name the capital city", "how many tools", "the total sum is",
           "which river is longest", "cancel my order please"]
MAX_NEW = 10


def _sentencepiece_style_tokenizer():
    from fixtures import corpus
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    chats = [f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\n{t}<|im_end|>\n" for t in corpus()[:200]]
    tk.train_from_iterator(corpus() + chats, trainers.BpeTrainer(vocab_size=600, special_tokens=special,
                                                                 show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="<|im_end|>", unk_token="<unk>",
                                  pad_token="</s>", padding_side="left", clean_up_tokenization_spaces=False)
    tok.chat_template = TEMPLATE
    return tok


@pytest.fixture(scope="module")
def real_arch(tmp_path_factory):
    from fixtures import make_lora, perturb
    from transformers import LlamaConfig

    from aclarena.models.tiny import build_model, save_checkpoint

    tok = _sentencepiece_style_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=[tok.eos_token_id],
                      pad_token_id=tok.pad_token_id)
    root = tmp_path_factory.mktemp("real-arch")
    base = build_model(cfg, seed=1)
    stage = perturb(base, 0.1, seed=2)  # enough for replies that differ by prompt
    save_checkpoint(base, tok, root / "base")
    save_checkpoint(stage, tok, root / "stage-1")
    adapter = make_lora(stage, root / "adapter", seed=3)
    acfg = json.loads((adapter / "adapter_config.json").read_text())
    acfg["base_model_name_or_path"] = str(root / "stage-1")  # what PEFT writes when the base was loaded from there
    (adapter / "adapter_config.json").write_text(json.dumps(acfg))
    return root, tok


@pytest.fixture(autouse=True)
def _forget_registered_suites():
    yield
    register_suites(Manifest(name="none"), ".")


def _greedy(model, tok, prompts):
    stops = [tok.eos_token_id]
    out = []
    for p in prompts:
        text = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        assert DEFAULT_SYSTEM in text  # the template's own default system prompt
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=stops,
                                 pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
        cut = next((i for i, t in enumerate(gen) if t in stops), len(gen))
        out.append(tok.decode(gen[:cut], skip_special_tokens=False).strip())
    return out


def test_real_architecture_through_the_verbs(real_arch, tmp_path, cli):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, tok = real_arch
    run = tmp_path / "run"
    code, _, err = cli("init", "--run", str(run), f"base={root / 'base'}", f"stage-1={root / 'stage-1'}",
                       "--domain", "stage-1=chat", "--phase", "stage-1=sft")
    assert code == 0, err
    code, _, err = cli("init", "--run", str(run), "--add", f"lora-2={root / 'adapter'}", "--domain", "lora-2=chat",
                       "--phase", "lora-2=rl")
    assert code == 0, err
    spec = load_manifest(run).resolve("lora-2")
    assert spec.on == "stage-1" and spec.parent == "stage-1"
    code, out, err = cli("checkpoints", "--run", str(run), "--strict", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["checkpoints"]}
    assert rows["base"]["architecture"] == "LlamaForCausalLM" and rows["base"]["tokenizer"] == rows["stage-1"]["tokenizer"]

    # displacement of the adapter is its own update, s*B*A, not the distance to the stage before it
    stage = AutoModelForCausalLM.from_pretrained(root / "stage-1", dtype=torch.float32)
    before = {k: v.clone() for k, v in stage.state_dict().items()}
    merged = PeftModel.from_pretrained(stage, root / "adapter").merge_and_unload()
    true_norm = float(torch.sqrt(sum(((merged.state_dict()[k] - v) ** 2).sum() for k, v in before.items())))
    assert true_norm > 0
    code, out, err = cli("displacement", "--run", str(run), "--json")
    assert code == 0, err
    disp = json.loads(out)
    (update,) = [u for u in disp["updates"] if u["checkpoint"] == "lora-2"]
    assert update["parent"] == "stage-1" and update["norm"] == pytest.approx(true_norm, rel=1e-4)

    # a JSONL suite of the stage's own plain-transformers replies: 1.0 for it, the adapter's share where they agree
    tok2 = AutoTokenizer.from_pretrained(root / "stage-1")
    mine = _greedy(AutoModelForCausalLM.from_pretrained(root / "stage-1", dtype=torch.float32).eval(), tok2, PROMPTS)
    theirs = _greedy(merged.eval(), tok2, PROMPTS)
    assert len(set(mine)) > 1
    tasks = tmp_path / "replies.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "messages": [{"role": "user", "content": p}], "answer": a}) + "\n"
                             for i, (p, a) in enumerate(zip(PROMPTS, mine, strict=True))))
    code, _, err = cli("init", "--run", str(run), "--add", "--suite", f"replies={tasks}", "--suite-domain",
                       "replies=chat", "--suite-scorer", "replies=exact")
    assert code == 0, err
    toml = run / "aclarena.toml"
    toml.write_text(toml.read_text() + f"max_new_tokens = {MAX_NEW}\n")
    code, out, err = cli("eval", "--run", str(run), "--samples", "0", "--json")
    assert code == 0, err
    cells = {c["checkpoint"]: c for c in json.loads(out)["cells"]}
    assert cells["stage-1"]["mean"] == 1.0
    agree = sum(a == b for a, b in zip(mine, theirs, strict=True)) / len(PROMPTS)
    assert cells["lora-2"]["mean"] == pytest.approx(agree)

    # probe and tokens on the stage's replies to the same prompts (messages lines: its chat template)
    code, _, err = cli("probe", "--run", str(run), "--ref", "stage-1", "--prompts", str(tasks), "--max-new-tokens", "8")
    assert code == 0, err
    code, out, err = cli("tokens", "--run", str(run), "--ref", "stage-1", "--json")
    assert code == 0, err
    assert "lora-2" in out
