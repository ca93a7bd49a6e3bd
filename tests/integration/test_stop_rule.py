"""One stop rule for every generation path (issue 49): the tokenizer's eos, the generation config's, and the
chat template's end of turn. On Gemma 3 `probe` stopped only at eos, so a reply ran on past `<end_of_turn>`
for turn after turn and `tokens` scored 128 positions where the model had answered in 3."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    from gemma_helpers import gemma_style_run

    return gemma_style_run(tmp_path_factory.mktemp("gemma-style"))


def test_the_stop_set_holds_the_end_of_turn_that_is_not_the_eos(gemma):
    from gemma_helpers import end_of_turn_model

    from aclarena.models.chat import end_of_turn, stop_token_ids

    _, tok = gemma
    eot, eos = tok.convert_tokens_to_ids("<end_of_turn>"), tok.convert_tokens_to_ids("<eos>")
    model = end_of_turn_model(tok)
    assert model.generation_config.eos_token_id == [eos] and tok.eos_token_id == eos  # neither names the end of turn
    assert end_of_turn(tok) == ("<end_of_turn>\n", eot)
    assert stop_token_ids(model, tok) == sorted({eos, eot})


def test_probe_generation_stops_at_the_end_of_turn(gemma):
    from gemma_helpers import end_of_turn_model

    from aclarena.envs.rollout import model_policy
    from aclarena.probes.generation import GenerationSettings, generate_probe_set

    _, tok = gemma
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    model = end_of_turn_model(tok)
    prompts = [{"messages": [{"role": "user", "content": "what is 12 + 3"}]},
               {"messages": [{"role": "user", "content": "name the capital city"}]}]
    probe = generate_probe_set(model, tok, prompts, name="p", reference="base",
                               settings=GenerationSettings(max_new_tokens=12, batch_size=2))
    for ids, scored in zip(probe.ids, probe.scored, strict=True):
        assert int(scored.sum()) == 1 and int(ids[-1]) == eot  # the reply is the end of turn, then stop
    # eval's policy (the rollout) stops at the same token: an empty reply, not twelve end-of-turn tokens
    assert model_policy(model, tok, max_new_tokens=12)([(p["messages"], None) for p in prompts]) == ["", ""]


def test_the_probe_verb_scores_one_position_per_reply(gemma, tmp_path, cli):
    root, _ = gemma
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": t}]})
                                 for t in ("what is 12 + 3", "name the capital city", "how many tools")) + "\n")
    code, out, err = cli("probe", "--run", str(root), "--ref", "base", "--prompts", str(prompts),
                         "--max-new-tokens", "16", "--force", "--json")
    assert code == 0, err
    row = json.loads(out)
    assert row["sequences"] == 3 and row["scored"] == 3  # was 48: sixteen <end_of_turn> tokens each


def test_plain_prompt_lines_are_warned_when_the_model_has_a_template(gemma, tmp_path, cli):
    """Issue 49: `probe --prompts` with {"prompt": ...} lines probed raw text while eval renders the chat
    template, and said nothing."""
    root, _ = gemma
    prompts = tmp_path / "raw.jsonl"
    prompts.write_text(json.dumps({"prompt": "what is 12 + 3"}) + "\n" + json.dumps(
        {"messages": [{"role": "user", "content": "name the capital city"}]}) + "\n")
    code, out, err = cli("probe", "--run", str(root), "--ref", "base", "--prompts", str(prompts), "--name", "raw",
                         "--max-new-tokens", "4", "--force")
    assert code == 0, err
    (line,) = [ln for ln in err.splitlines() if "warning" in ln]
    assert "1 of 2 prompts are plain" in line and "without the chat template" in line


def test_expert_serving_stops_at_the_end_of_turn(gemma, tmp_path):
    """MLE serving (PeftExpertServer) generated with the model's eos only; it takes the same stop set."""
    from fixtures import make_lora
    from gemma_helpers import end_of_turn_model

    from aclarena.consolidate.routers import RuleRouter
    from aclarena.consolidate.serving import PeftExpertServer

    _, tok = gemma
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    base = end_of_turn_model(tok)
    server = PeftExpertServer(end_of_turn_model(tok), tok, {"math": make_lora(base, tmp_path / "math", seed=1)},
                              RuleRouter(("math",)))
    seen = []
    generate = server.model.generate

    def spy(**kw):
        out = generate(**kw)
        seen.append((kw["eos_token_id"], out.shape[1] - kw["input_ids"].shape[1]))
        return out

    server.model.generate = spy
    server.generate([{"role": "user", "content": "what is 12 + 3"}], max_new_tokens=16)
    ((stops, n_new),) = seen
    assert eot in stops and n_new == 1  # was 16 <end_of_turn> tokens
