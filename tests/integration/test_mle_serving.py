"""peft multi-adapter serving: the routed expert is the one that answers; no expert -> the backbone."""

from __future__ import annotations

import copy

import pytest
import torch

from aclarena.consolidate.routers import NoExpertError, RuleRouter
from aclarena.consolidate.serving import PeftExpertServer, VllmExpertServer, expert_parameters
from aclarena.errors import AclarenaError


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tokenizer):
    from fixtures import make_lora

    from aclarena.models.tiny import build_model, tiny_config

    root = tmp_path_factory.mktemp("serving")
    base = build_model(tiny_config(tokenizer), seed=0)
    experts = {"math": make_lora(base, root / "math", seed=1, r=4), "search": make_lora(base, root / "search", seed=2, r=2)}
    return base, experts


def _reference(base, folder, tokenizer, messages, tools):
    from peft import PeftModel

    model = PeftModel.from_pretrained(copy.deepcopy(base), str(folder)) if folder is not None else copy.deepcopy(base)
    enc = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def test_each_request_gets_its_expert_or_the_backbone(setup, tokenizer):
    from aclarena.envs import sample_prompts

    base, experts = setup
    server = PeftExpertServer(copy.deepcopy(base), tokenizer, experts, RuleRouter(("math", "search")))
    search = sample_prompts("search", 1, 0)[0]
    math = sample_prompts("math", 1, 0)[0]
    general = sample_prompts("general", 1, 0)[0]
    got = {}
    for name, p in (("search", search), ("math", math), ("general", general)):
        got[name] = server.generate(p["messages"], p["tools"], max_new_tokens=8)
    assert got["search"].adapter == "search" and got["math"].adapter == "math"
    assert got["general"].adapter is None and got["general"].route.expert is None
    # what each request got equals what that expert alone (or the bare backbone) generates
    for name, p in (("search", search), ("math", math)):
        assert got[name].text == _reference(base, experts[name], tokenizer, p["messages"], p["tools"])
    assert got["general"].text == _reference(base, None, tokenizer, general["messages"], general["tools"])
    assert got["math"].text != got["general"].text or got["search"].text != got["general"].text


def test_parameter_counts_and_refuse_policy(setup, tokenizer):
    base, experts = setup
    server = PeftExpertServer(copy.deepcopy(base), tokenizer, experts, RuleRouter(("math", "search")), fallback="refuse")
    counts = server.parameters()
    cfg = base.config
    h, kv = cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim
    per_layer = lambda r: r * (h + h) + r * (h + kv)  # noqa: E731 (q_proj and v_proj, A and B)
    assert counts["math"] == cfg.num_hidden_layers * per_layer(4) == expert_parameters(experts["math"])
    assert counts["search"] == cfg.num_hidden_layers * per_layer(2)
    assert counts["backbone"] == sum(p.numel() for p in base.parameters())
    with pytest.raises(NoExpertError):
        server.generate([{"role": "system", "content": "Translate to French."}, {"role": "user", "content": "hi"}])


def test_server_refuses_a_router_expert_without_adapter(setup, tokenizer):
    base, experts = setup
    with pytest.raises(AclarenaError, match="ecom, which has no adapter"):
        PeftExpertServer(copy.deepcopy(base), tokenizer, {"math": experts["math"]}, RuleRouter(("math", "ecom")))


def test_vllm_path_is_guarded(setup):
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(AclarenaError, match="vLLM is not installed"):
            VllmExpertServer("backbone", setup[1], RuleRouter(("math", "search")))
    else:  # pragma: no cover - GPU machines
        pytest.skip("vLLM installed: the GPU path is exercised on GPU machines")
