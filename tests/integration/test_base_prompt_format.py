"""Base checkpoints without a chat template (issue 45 item 1): prompted as plain text, detected from the
tokenizer and said in one line, overridable per checkpoint or suite, through eval, probe and flips; a chat
format asked for a tokenizer without a template is one line and writes nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from suite_helpers import MAX_NEW, PROMPTS, add_reply_suite

from aclarena.envs.custom import register_suites
from aclarena.models.chat import (
    PLAIN_STOPS,
    bos_text,
    choose_prompt_format,
    cut_reply,
    plain_text,
    render_prompt,
    reply_end,
    reply_stopping,
)
from aclarena.store.manifest import Manifest, load_manifest


@pytest.fixture(autouse=True)
def _forget_registered_suites():
    yield
    register_suites(Manifest(name="none"), ".")  # `eval` registered the run's suites in this process


def _no_template(tok):
    t = copy.deepcopy(tok)
    t.chat_template = None
    return t


def _independent_reply(text: str) -> str:
    """The documented end of a plain reply, written out here: the first blank line or labelled turn after
    the reply's leading white space."""
    start = len(text) - len(text.lstrip())
    ends = [at for at in (text.find(s, start) for s in ("\n\n", "\nUser:", "\nAssistant:", "\nTool:", "\nSystem:"))
            if at >= 0]
    return text[:min(ends)] if ends else text


def _plain_greedy(folder, prompts):
    """Replies generated with transformers alone: the prompt's raw text (special tokens as the tokenizer adds
    them), greedy, cut at the tokenizer's and the model's end-of-sequence tokens and where the plain reply ends."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    assert not tok.chat_template
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    named = [tok.eos_token_id, model.config.eos_token_id, model.generation_config.eos_token_id]
    stops = sorted({i for x in named if x is not None for i in (x if isinstance(x, list) else [x])})
    out = []
    for p in prompts:
        ids = tok(p, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=stops,
                                 pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
        cut = next((i for i, t in enumerate(gen) if t in stops), len(gen))
        out.append(_independent_reply(tok.decode(gen[:cut], skip_special_tokens=False)))
    return out


def _base_run(run: Path, tokenizer) -> None:
    """base, seq-math and seq-search rewritten with a tokenizer without a chat template (a pretrained base and two
    continued-pretraining stages); seq-math's greedy replies vary by prompt and seq-search keeps a few of them."""
    from fixtures import perturb
    from transformers import AutoModelForCausalLM

    from aclarena.models.tiny import save_checkpoint

    ck = run / "checkpoints"
    tok = _no_template(tokenizer)
    base = AutoModelForCausalLM.from_pretrained(ck / "base", dtype=torch.float32)
    e = perturb(base, 0.1, seed=11)
    for name, model in (("base", base), ("seq-math", e), ("seq-search", perturb(e, 0.001, seed=12))):
        for f in (ck / name).iterdir():
            f.unlink()
        save_checkpoint(model, tok, ck / name)
        assert not (ck / name / "chat_template.jinja").exists()


# --- the rendering rule ----------------------------------------------------------------------------


def test_plain_text_is_the_prompt_itself_or_labelled_turns_with_tools(tokenizer):
    assert plain_text([{"role": "user", "content": "Q: 2+2?\nA:"}]) == "Q: 2+2?\nA:"
    assert plain_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]) == \
        "Be brief.\n\nhi"
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    text = plain_text([{"role": "system", "content": "S"}, {"role": "user", "content": "find x"},
                       {"role": "assistant", "content": '<tool_call>{"name": "search"}</tool_call>'},
                       {"role": "tool", "content": "x is 3"}], tools)
    assert text.startswith("S\n\nTools: ") and json.dumps(tools[0], sort_keys=True) in text
    assert text.endswith('User: find x\nAssistant: <tool_call>{"name": "search"}</tool_call>\nTool: x is 3\nAssistant:')
    # a tokenizer that adds no special tokens gets none; the rendered text tokenizes as the prompt does
    assert bos_text(tokenizer) == ""
    tok = _no_template(tokenizer)
    assert render_prompt(tok, [{"role": "user", "content": "hello"}], prompt_format="plain") == "hello"
    with pytest.raises(ValueError):
        render_prompt(tok, [{"role": "user", "content": "hello"}], prompt_format="jinja")


def test_bos_text_is_what_the_tokenizer_puts_first(tokenizer):
    from tokenizers import processors

    tok = _no_template(tokenizer)
    bos = "<|im_start|>"
    tok.bos_token = bos
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tok.convert_tokens_to_ids(bos))])
    assert tok("hello")["input_ids"][0] == tok.convert_tokens_to_ids(bos)
    text = render_prompt(tok, [{"role": "user", "content": "hello"}], prompt_format="plain")
    assert text == bos + "hello"
    assert tok(text, add_special_tokens=False)["input_ids"] == tok("hello")["input_ids"]


def test_a_plain_reply_ends_at_a_blank_line_or_another_turn(tokenizer):
    assert reply_end("  Paris\n\nQ: next", "plain") == 7
    assert reply_end("Paris\nUser: and", "plain") == 5
    assert reply_end("\n\nParis", "plain") is None  # leading white space is not the end
    assert reply_end("a\n\nb", "chat") is None
    ids = tokenizer("Paris is big\n\nQ: next", add_special_tokens=False)["input_ids"]
    kept, text = cut_reply(tokenizer, ids, "plain")
    assert text == "Paris is big" and 0 < len(kept) < len(ids)
    assert "\n\n" in tokenizer.decode(kept) and "\n\n" not in tokenizer.decode(kept[:-1])  # through the ending token
    assert cut_reply(tokenizer, ids, "chat") == (ids, tokenizer.decode(ids))
    # the generate() criterion stops a row where its reply ends, and only the rows it is asked to
    width = 3
    rows = [[5, 6, 7, *ids], [5, 6, 7, *tokenizer("no end here", add_special_tokens=False)["input_ids"]]]
    n = max(len(r) for r in rows)
    batch = torch.tensor([r + [0] * (n - len(r)) for r in rows])
    assert reply_stopping(tokenizer, width, "chat") is None
    assert reply_stopping(tokenizer, width, "plain")[0](batch, None).tolist() == [True, False]
    assert reply_stopping(tokenizer, width, "plain", [False, True])[0](batch, None).tolist() == [False, False]
    assert set(PLAIN_STOPS) >= {"\n\n", "\nUser:", "\nAssistant:", "\nTool:"}


def test_the_format_is_detected_said_and_overridable():
    assert choose_prompt_format(None, True, checkpoint="it") == ("chat", None)
    assert choose_prompt_format(None, None, checkpoint="hub") == ("chat", None)  # not known: as before
    fmt, note = choose_prompt_format(None, False, checkpoint="base")
    assert fmt == "plain" and "'base'" in note and "no chat template" in note and "\n" not in note
    assert choose_prompt_format("plain", True, checkpoint="it") == ("plain", None)
    assert choose_prompt_format("plain", False, checkpoint="base") == ("plain", None)
    from aclarena.errors import AclarenaError

    with pytest.raises(AclarenaError, match="'base' has no chat template"):
        choose_prompt_format("chat", False, checkpoint="base", where="[checkpoints.base] prompt_format")


def test_the_manifest_takes_prompt_format_per_checkpoint_and_suite(tmp_path):
    from aclarena.errors import ManifestError
    from aclarena.store.manifest import parse_manifest

    text = ('[run]\nname = "r"\n[checkpoints.base]\npath = "b"\nkind = "base"\nprompt_format = "plain"\n'
            '[suites.qa]\npath = "qa.jsonl"\ndomain = "geo"\nprompt_format = "chat"\n')
    m = parse_manifest(text)
    assert m.resolve("base").prompt_format == "plain" and m.suites["qa"].prompt_format == "chat"
    assert parse_manifest(m.to_toml()).resolve("base").prompt_format == "plain"  # written back
    with pytest.raises(ManifestError, match="prompt_format 'plian'.*did you mean 'plain'"):
        parse_manifest(text.replace('prompt_format = "plain"', 'prompt_format = "plian"'))


# --- the arena's tool domains: text turns ------------------------------------------------------------


def test_a_tool_domain_is_played_as_text_turns_without_a_template(tokenizer):
    from aclarena.envs import sample_tasks
    from aclarena.envs.rollout import generate_trajectories, prompt_lengths
    from aclarena.models.tiny import build_model, tiny_config

    tok = _no_template(tokenizer)
    model = build_model(tiny_config(tok), seed=0).eval()
    tasks = sample_tasks("search/id", 2, seed=0, split="eval")
    assert tasks[0].tool_list
    text = render_prompt(tok, tasks[0].messages, tasks[0].tool_list, prompt_format="plain")
    assert "Tools: " in text and f"User: {tasks[0].prompt}" in text and text.endswith("\nAssistant:")
    assert prompt_lengths(tok, tasks, "plain") == [len(tok(render_prompt(tok, t.messages, t.tool_list,
                                                                          prompt_format="plain"))["input_ids"])
                                                   for t in tasks]
    with pytest.raises(ValueError):  # the chat format needs the template it does not have
        generate_trajectories(model, tok, tasks, max_new_tokens=4, max_turns=2)
    trajs = generate_trajectories(model, tok, tasks, max_new_tokens=4, max_turns=2, prompt_format="plain")
    assert all(t is not None and t.steps for t in trajs)


# --- eval, flips and probe on a run whose checkpoints have no chat template --------------------------


def test_a_base_without_a_template_goes_through_eval_flips_and_probe(fixture_run, tokenizer, tmp_path, cli):
    from aclarena.results.probes import read_probe_set
    from aclarena.store import ResultsStore

    _base_run(fixture_run, tokenizer)
    ck = fixture_run / "checkpoints"
    replies = _plain_greedy(ck / "seq-math", PROMPTS)
    later = _plain_greedy(ck / "seq-search", PROMPTS)
    kept = [a.strip() == b.strip() for a, b in zip(replies, later, strict=True)]
    assert len(set(replies)) > len(PROMPTS) // 2 and 0 < sum(kept) < len(PROMPTS)  # the test can tell
    add_reply_suite(cli, fixture_run, tmp_path / "mine.jsonl", PROMPTS, replies)

    code, out, err = cli("checkpoints", "--run", str(fixture_run), "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["checkpoints"]}
    assert rows["base"]["chat_template"] is False and rows["base"]["prompt_format"] == "plain"
    assert rows["oracle-math"]["chat_template"] is True and rows["oracle-math"]["prompt_format"] == "chat"

    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "base,seq-math,seq-search",
                         "--samples", "0", "--json")
    assert code == 0, err
    data = json.loads(out)
    notes = [line for line in err.splitlines() if "note:" in line]
    assert len(notes) == 3 and all("no chat template" in n and "plain text" in n for n in notes), err
    assert data["notes"] and all(c["status"] == "ok" for c in data["cells"]), data["cells"]
    cells = {c["checkpoint"]: c for c in data["cells"]}
    assert all(c["prompt_format"] == "plain" for c in cells.values())
    assert cells["seq-math"]["mean"] == 1.0  # its own plain-transformers replies
    assert cells["seq-search"]["mean"] == pytest.approx(sum(kept) / len(PROMPTS)), cells

    code, out, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--suite",
                         "mine", "--max-items", "2", "--budgets", "50", "--no-reverse", "--json")
    assert code == 0, err
    forgot = [it for it in json.loads(out)["items"] if it["direction"] == "forgot"]
    assert forgot and all(it["reproduced"] for it in forgot), forgot  # replayed in the format eval played

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n" for p in PROMPTS[:4]))
    code, out, err = cli("probe", "--run", str(fixture_run), "--ref", "seq-math", "--prompts", str(prompts),
                         "--max-new-tokens", str(MAX_NEW), "--json")
    assert code == 0, err
    assert json.loads(out)["prompt_format"] == "plain" and "no chat template" in err
    probe = read_probe_set(ResultsStore(fixture_run), "seq-math")
    assert probe.settings["prompt_format"] == "plain"
    for seq, mask, p, reply in zip(probe.ids, probe.scored, PROMPTS, replies, strict=False):
        prompt_ids = tokenizer(p)["input_ids"]
        assert seq[:len(prompt_ids)].tolist() == prompt_ids and not mask[:len(prompt_ids)].any()
        assert tokenizer.decode(seq[len(prompt_ids):].tolist()).startswith(reply)
    code, out, err = cli("tokens", "--run", str(fixture_run), "--ref", "seq-math", "--against", "seq-search", "--json")
    assert code == 0, err  # teacher-forced on the plain probe set
    code, out, err = cli("signatures", "--run", str(fixture_run), "--updates", "seq-math", "-n", "8",
                         "--max-new-tokens", "8", "--n-boot", "100", "--json")
    assert code == 0, err  # seq-math signed on base's plain generations
    assert read_probe_set(ResultsStore(fixture_run), "base.math").settings["prompt_format"] == "plain"


def test_chat_asked_for_a_tokenizer_without_a_template_is_one_line_and_writes_nothing(fixture_run, tokenizer, cli):
    from aclarena.store import ResultsStore

    _base_run(fixture_run, tokenizer)
    toml = fixture_run / "aclarena.toml"
    text = toml.read_text()
    toml.write_text(text.replace('kind = "base"\n', 'kind = "base"\nprompt_format = "chat"\n', 1))
    store = ResultsStore(fixture_run)
    before = store.path.read_bytes() if store.path.exists() else None
    for argv in (("eval", "--checkpoints", "base,seq-math", "--suites", "math/id", "-n", "1", "--samples", "0"),
                 ("probe", "--ref", "base", "--domain", "math", "-n", "1")):
        code, out, err = cli(argv[0], "--run", str(fixture_run), *argv[1:])
        assert code == 1, out + err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "'base' has no chat template" in lines[0] and "prompt_format" in lines[0], err
        assert (store.path.read_bytes() if store.path.exists() else None) == before
    code, out, err = cli("checkpoints", "--run", str(fixture_run))
    assert code == 0 and "chat (no template)" in out, out + err  # the listing shows it, without failing


def test_a_suite_asks_for_plain_prompts_of_a_chat_checkpoint(fixture_run, tmp_path, cli):
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": p, "answer": "x"}) + "\n" for i, p in enumerate(PROMPTS[:2])))
    code, _, err = cli("init", "--run", str(fixture_run), "--add", "--suite", f"qa={tasks}", "--suite-domain", "qa=math")
    assert code == 0, err
    toml = fixture_run / "aclarena.toml"
    toml.write_text(toml.read_text() + 'max_new_tokens = 4\nprompt_format = "plain"\n')
    assert load_manifest(fixture_run).suites["qa"].prompt_format == "plain"
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "oracle-math", "--samples", "0", "--json")
    assert code == 0, err
    (cell,) = json.loads(out)["cells"]
    assert cell["prompt_format"] == "plain" and cell["status"] == "ok" and "note:" not in err
    # the checkpoint's own field comes first
    toml.write_text(toml.read_text().replace('kind = "oracle"\n', 'kind = "oracle"\nprompt_format = "chat"\n', 1))
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "oracle-math", "--samples", "0", "--json")
    assert code == 0, err
    (cell,) = json.loads(out)["cells"]
    assert cell["prompt_format"] == "chat" and cell["computed"]


def test_the_monitor_probes_a_checkpoint_without_a_template_as_plain_text(tokenizer, tmp_path, caplog):
    import logging

    from aclarena.envs import sample_prompts
    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
    from aclarena.train.monitor import domain_probe

    tok = _no_template(tokenizer)
    folder = save_checkpoint(build_model(tiny_config(tok), seed=0), tok, tmp_path / "base")
    run = tmp_path / "run"
    run.mkdir()
    with caplog.at_level(logging.INFO, logger="aclarena.monitor"):
        probe = domain_probe(run, "base", folder, "math", name="monitor.math", n=2, max_new_tokens=4)
    assert probe.settings["prompt_format"] == "plain"
    assert any("no chat template" in r.getMessage() for r in caplog.records)
    for seq, p in zip(probe.ids, sample_prompts("math", 2, 0, split="eval", suite="id"), strict=True):
        want = tok(render_prompt(tok, p["messages"], p.get("tools"), prompt_format="plain"),
                   add_special_tokens=False)["input_ids"]
        assert seq[:len(want)].tolist() == want


# --- few-shot examples from the suite's own fewshot split ------------------------------------------------


def test_fewshot_examples_come_before_the_prompt():
    shots = [{"role": "user", "content": "Q: 1+1?\nA:", "fewshot": True}, {"role": "assistant", "content": "2", "fewshot": True},
             {"role": "user", "content": "Q: 2+3?\nA:", "fewshot": True}, {"role": "assistant", "content": "5", "fewshot": True}]
    assert plain_text([{"role": "system", "content": "Add."}, *shots, {"role": "user", "content": "Q: 4+4?\nA:"}]) == \
        "Add.\n\nQ: 1+1?\nA: 2\n\nQ: 2+3?\nA: 5\n\nQ: 4+4?\nA:"


def test_a_fewshot_suite_on_a_base_and_on_a_chat_checkpoint(fixture_run, tokenizer, tmp_path, cli):
    from aclarena.envs import sample_tasks

    ck = fixture_run / "checkpoints"
    chat_tok = copy.deepcopy(tokenizer)  # oracle-math keeps its chat template
    _base_run(fixture_run, tokenizer)
    shots = [("what is the capital of the river", "tower"), ("what is the price of the city", "year")]
    fewshot = tmp_path / "mine.fewshot.jsonl"
    fewshot.write_text("".join(json.dumps({"prompt": q, "answer": a}) + "\n" for q, a in [*shots, ("unused", "x")]))
    prefix = "".join(f"{q} {a}\n\n" for q, a in shots)
    replies = _plain_greedy(ck / "seq-math", [prefix + p for p in PROMPTS[:4]])
    add_reply_suite(cli, fixture_run, tmp_path / "mine.jsonl", PROMPTS, replies,
                    f'fewshot = "{fewshot}"\nnum_fewshot = 2\n')
    toml = fixture_run / "aclarena.toml"
    text = toml.read_text()
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "seq-math", "--samples", "0", "--json")
    assert code == 0, err
    (cell,) = json.loads(out)["cells"]
    assert cell["prompt_format"] == "plain" and cell["mean"] == 1.0, cell  # the examples were in its prompts

    # a chat checkpoint sees them as earlier user/assistant turns
    register_suites(load_manifest(fixture_run), fixture_run)
    task = sample_tasks("mine", 1, seed=0)[0]
    rendered = render_prompt(chat_tok, task.messages, prompt_format="chat")
    assert rendered == chat_tok.apply_chat_template(
        [m for q, a in shots for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
        + [{"role": "user", "content": task.prompt}], add_generation_prompt=True, tokenize=False)

    # more examples asked than the file holds: one line, nothing written
    toml.write_text(text.replace("num_fewshot = 2", "num_fewshot = 5"))
    before = (fixture_run / "results.h5").read_bytes()
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "seq-math", "--samples", "0", "--force")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "num_fewshot = 5" in err and "3 examples" in err, err
    assert (fixture_run / "results.h5").read_bytes() == before


def test_flips_refuses_a_pair_evaluated_in_two_formats(fixture_run, tmp_path, cli):
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": p, "answer": "x"}) + "\n" for i, p in enumerate(PROMPTS[:2])))
    code, _, err = cli("init", "--run", str(fixture_run), "--add", "--suite", f"qa={tasks}", "--suite-domain", "qa=math")
    assert code == 0, err
    toml = fixture_run / "aclarena.toml"
    toml.write_text(toml.read_text().replace('phase = "sft"\n', 'phase = "sft"\nprompt_format = "plain"\n', 1)
                    + "max_new_tokens = 4\n")
    assert load_manifest(fixture_run).resolve("seq-search").prompt_format == "plain"
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "seq-math,seq-search", "--samples", "0",
                         "--json")
    assert code == 0, err
    assert {c["checkpoint"]: c["prompt_format"] for c in json.loads(out)["cells"]} == {"seq-math": "chat",
                                                                                     "seq-search": "plain"}
    code, out, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--suite", "qa")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "chat prompt format" in err and "plain" in err and "prompt_format" in err


def test_token_drift_in_memory_renders_chats_as_plain_text_without_a_template(tokenizer):
    import aclarena as acl
    from aclarena.models.tiny import build_model, tiny_config

    tok = _no_template(tokenizer)
    ref = build_model(tiny_config(tok), seed=0).eval()
    chat = [{"messages": [{"role": "user", "content": "what is the total"}]}]
    mem = acl.token_drift(ref, ref, chat, tokenizer=tok, max_new_tokens=4)
    want = tok("what is the total", add_special_tokens=False)["input_ids"]
    assert mem.probe.ids[0][:len(want)].tolist() == want and mem.probe.settings["prompt_format"] == "plain"
