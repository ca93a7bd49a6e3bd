"""Probe sets, teacher-forced scoring and the `probe` / `tokens` verbs on tiny models."""

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli
from tokens_helpers import (
    PROMPTS,
    TRACE,
    add_checkpoint,
    copy_checkpoint,
    file_state,
    peaked_untied_model,
    write_jsonl,
)

from aclarena.diagnostics.token_drift import pair_stats
from aclarena.models.loading import load_model
from aclarena.probes.probe_set import tokenize_conversation
from aclarena.probes.teacher_forcing import STATUS_BEYOND_CONTEXT, STATUS_NONFINITE, reference_outputs, score
from aclarena.results.probes import read_probe_set
from aclarena.results.tokens import reference_key, scores_key, summary_key
from aclarena.store import Ragged, ResultsStore
from aclarena.store.manifest import CheckpointSpec, Manifest, load_manifest, write_manifest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probed_template(_run_template, tmp_path_factory):
    run = tmp_path_factory.mktemp("probed") / "run"
    shutil.copytree(_run_template, run)
    write_jsonl(run / "prompts.jsonl", PROMPTS)
    code, _, err = run_cli("probe", "--run", str(run), "--ref", "seq-math", "--prompts", str(run / "prompts.jsonl"),
                           "--max-new-tokens", "12", "--json")
    assert code == 0, err
    return run


@pytest.fixture()
def probed_run(probed_template, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(probed_template, dst)
    return dst


def read_all(run: Path, prefix: str) -> dict[str, np.ndarray]:
    """Every array stored under ``prefix`` (Ragged values and offsets), keyed by path."""
    out = {}
    with ResultsStore(run).reader() as r:
        keys = r.results(prefix) + ([prefix] if "result-type" in r.attrs(prefix) else [])
        for key in keys:
            for name in r.keys(key):
                value = r.read(f"{key}/{name}")
                if isinstance(value, Ragged):
                    out[f"{key}/{name}/values"] = np.asarray(value.values)
                    out[f"{key}/{name}/offsets"] = np.asarray(value.offsets)
                else:
                    out[f"{key}/{name}"] = value
    return out


def one_line_error(code, err, needle):
    assert code == 1, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert needle in lines[0], lines[0]


# --- probe sets ---------------------------------------------------------------------------------


def test_probe_from_prompts_scores_generated_tokens_only(probed_run, tokenizer):
    probe = read_probe_set(ResultsStore(probed_run), "seq-math")
    assert probe.reference == "seq-math" and probe.n_sequences == len(PROMPTS)
    gen = probe.settings["generation"]
    assert gen["greedy"] and gen["max_new_tokens"] == 12 and probe.settings["source"] == "prompts"
    eos = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")}
    for i, prompt in enumerate(PROMPTS):
        ids, mask = np.asarray(probe.ids[i]), np.asarray(probe.scored[i])
        if "messages" in prompt:
            want = tokenizer.apply_chat_template(prompt["messages"], tools=prompt.get("tools"),
                                                 add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        else:
            want = tokenizer(prompt["prompt"])["input_ids"]
        n = len(want)
        assert ids[:n].tolist() == list(want)
        assert not mask[:n].any() and mask[n:].all()
        assert 1 <= mask.sum() <= 12
        if mask.sum() < 12:
            assert int(ids[-1]) in eos
        assert "".join(probe.token_text[i]) == probe.texts[i] == tokenizer.decode(ids.tolist())
    assert len(probe.vocab) == len(tokenizer) and probe.vocab[100] == tokenizer.decode([100])


def test_traces_score_assistant_tokens_only(fixture_run, tokenizer, cli):
    traces = write_jsonl(fixture_run / "traces.jsonl", [TRACE])
    code, out, err = cli("probe", "--run", str(fixture_run), "--ref", "seq-math", "--from-traces", str(traces),
                         "--name", "shop", "--json")
    assert code == 0, err
    assert json.loads(out)["scored"] > 0
    probe = read_probe_set(ResultsStore(fixture_run), "shop")
    ids, mask = np.asarray(probe.ids[0]), np.asarray(probe.scored[0])
    # contiguous scored runs are exactly the three assistant turns (tool call included)
    runs, cur = [], []
    for t, m in zip(ids.tolist(), mask.tolist(), strict=True):
        if m:
            cur.append(t)
        elif cur:
            runs.append(tokenizer.decode(cur))
            cur = []
    assert runs == ['<tool_call>{"name": "cancel", "arguments": {"order": "12"}}</tool_call><|im_end|>',
                    "the order is cancelled<|im_end|>", "done<|im_end|>"]
    unscored = tokenizer.decode(ids[~mask].tolist())
    assert "refund policy" in unscored and "thank you" in unscored and "cancel order 12" in unscored
    # a template without {% generation %} markers locates the same tokens by rendering prefixes
    plain = copy.copy(tokenizer)
    plain.chat_template = tokenizer.chat_template.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    ids2, mask2 = tokenize_conversation(plain, TRACE["messages"], TRACE["tools"])
    assert ids2.tolist() == ids.tolist() and mask2.tolist() == mask.tolist()


# --- teacher-forced scoring against naive full forward passes ----------------------------------


def naive_scores(ref_model, model, probe):
    """Full logits of both models per sequence, the measures in float64 at every scored position."""
    out = {k: [] for k in ("kl", "js", "entropy", "logprob", "top5")}
    for ids, mask in zip(probe.ids, probe.scored, strict=True):
        x = torch.as_tensor(np.asarray(ids, dtype=np.int64)).view(1, -1)
        with torch.no_grad():
            lr = ref_model(input_ids=x).logits[0].double().log_softmax(-1)
            lc = model(input_ids=x).logits[0].double().log_softmax(-1)
        t = np.flatnonzero(mask)
        lr, lc = lr[t - 1], lc[t - 1]
        pr, pc = lr.exp(), lc.exp()
        lm = (0.5 * (pr + pc)).log()
        out["kl"].append((pr * (lr - lc)).sum(-1))
        out["js"].append(0.5 * (pr * (lr - lm)).sum(-1) + 0.5 * (pc * (lc - lm)).sum(-1))
        out["entropy"].append(-(pc * lc).sum(-1))
        out["logprob"].append(lc.gather(-1, x[0, t].view(-1, 1)).view(-1))
        out["top5"].append(lc.topk(5, -1).values)
    return {k: torch.cat(v).numpy() for k, v in out.items()}


def test_score_matches_naive_forward_and_is_padding_invariant(probed_run):
    manifest = load_manifest(probed_run)
    probe = read_probe_set(ResultsStore(probed_run), "seq-math")
    ref = load_model("seq-math", manifest, probed_run)
    ckpt = load_model("seq-search", manifest, probed_run)
    want = naive_scores(ref, ckpt, probe)
    got = score(ckpt, ref, probe, batch_size=2, chunk_size=7, topk=5)
    assert got.kl.dtype == np.float32 and (got.status == 0).all()
    for key, value in (("kl", got.kl), ("js", got.js), ("entropy", got.entropy), ("logprob", got.logprob),
                       ("top5", got.topk_logprobs)):
        np.testing.assert_allclose(value, want[key], atol=2e-5, rtol=1e-4, err_msg=key)
    assert got.kl.max() > 1e-3  # the two checkpoints do differ
    left = score(ckpt, ref, probe, batch_size=3, padding_side="left")
    single = score(ckpt, ref, probe, batch_size=1, chunk_size=1000)
    for other in (left, single):
        np.testing.assert_allclose(other.kl, got.kl, atol=2e-6, rtol=1e-4)
        np.testing.assert_allclose(other.entropy, got.entropy, atol=2e-6)
        np.testing.assert_array_equal(other.top1, got.top1)
    # a cached reference gives the same numbers as running the reference alongside
    cache = reference_outputs(ref, probe, batch_size=2, chunk_size=7, topk=5)
    cached = score(ckpt, cache, probe)
    np.testing.assert_array_equal(cached.kl, got.kl)
    np.testing.assert_array_equal(cached.ref.entropy, got.ref.entropy)
    # scoring the live reference against its own cache: exactly zero, even in training mode
    ref.train()
    same = score(ref, cache, probe)
    assert ref.training
    assert np.count_nonzero(same.kl) == 0 and np.count_nonzero(same.js) == 0 and not same.flips.any()


def test_bf16_models_accumulate_in_float32(probed_run):
    manifest = load_manifest(probed_run)
    probe = read_probe_set(ResultsStore(probed_run), "seq-math")
    ref = load_model("seq-math", manifest, probed_run).to(torch.bfloat16)
    ckpt = load_model("seq-search", manifest, probed_run).to(torch.bfloat16)
    got = score(ckpt, ref, probe, batch_size=2, chunk_size=5)
    assert got.kl.dtype == np.float32
    # the reference point: the models' own bf16 logits, every measure in float32 or better
    kls, ents = [], []
    for ids, mask in zip(probe.ids, probe.scored, strict=True):
        x = torch.as_tensor(np.asarray(ids, dtype=np.int64)).view(1, -1)
        t = torch.as_tensor(np.flatnonzero(mask))
        with torch.no_grad():
            zr, zc = ref(input_ids=x).logits[0, t - 1], ckpt(input_ids=x).logits[0, t - 1]
        assert zr.dtype == torch.bfloat16
        ps = pair_stats(zr, zc)
        kls.append(ps.kl)
        ents.append(ps.ckpt.entropy)
    # batched bf16 attention differs from unbatched by bf16 rounding; the statistics must not add more
    np.testing.assert_allclose(got.kl, torch.cat(kls).numpy(), atol=5e-3, rtol=5e-2)
    np.testing.assert_allclose(got.entropy, torch.cat(ents).numpy(), atol=5e-2, rtol=1e-2)


# --- the verb on the fixture run ----------------------------------------------------------------


def test_tokens_identical_checkpoint_gives_exact_zero(probed_run, cli):
    copy_checkpoint(probed_run, "seq-math", "seq-math-copy", parent="seq-math")
    code, out, err = cli("tokens", "--run", str(probed_run), "--ref", "seq-math", "--against", "seq-math-copy", "--json")
    assert code == 0, err
    row = json.loads(out)["checkpoints"][0]
    assert row["checkpoint"] == "seq-math-copy" and row["status"] == "scored"
    assert row["kl_mean"] == 0 and row["flip_rate"] == 0 and row["barely_moved"] == 1
    data = read_all(probed_run, scores_key("seq-math", "seq-math-copy"))
    base = scores_key("seq-math", "seq-math-copy")
    assert np.count_nonzero(data[f"{base}/kl/values"]) == 0
    assert np.count_nonzero(data[f"{base}/js/values"]) == 0
    with ResultsStore(probed_run).reader() as r:
        ref_top1 = r.ragged(f"{reference_key('seq-math')}/top1").all()
        ref_h = r.ragged(f"{reference_key('seq-math')}/entropy").all()
    np.testing.assert_array_equal(data[f"{base}/top1/values"], ref_top1)
    np.testing.assert_array_equal(data[f"{base}/entropy/values"], ref_h)


def test_tokens_default_table_skip_and_resummarize(probed_run, cli):
    code, out, err = cli("tokens", "--run", str(probed_run), "--ref", "seq-math")
    assert code == 0, err
    assert "seq-search" in out and "lora-ecom" in out and "scored" in out and "KL share high" in out
    store = ResultsStore(probed_run)
    ids = {c: store.attrs(scores_key("seq-math", c))["scores_id"] for c in ("seq-search", "lora-ecom")}
    code, out, err = cli("tokens", "--run", str(probed_run), "--ref", "seq-math", "--high", "nats=0.5", "--json")
    assert code == 0, err
    rows = {r["checkpoint"]: r for r in json.loads(out)["checkpoints"]}
    assert {r["status"] for r in rows.values()} == {"cached"}
    assert {c: store.attrs(scores_key("seq-math", c))["scores_id"] for c in ids} == ids  # not rescored
    summary = store.read(f"{summary_key('seq-math', 'seq-search')}/summary")
    assert summary["high"] == "nats=0.5" and rows["seq-search"]["high"] == "nats=0.5"
    with store.reader() as r:
        h = r.ragged(f"{reference_key('seq-math')}/entropy").all()
    assert summary["n_high"] == int((h > 0.5).sum())
    code, out, err = cli("tokens", "--run", str(probed_run), "--ref", "seq-math", "--force", "--json")
    assert code == 0 and {r["status"] for r in json.loads(out)["checkpoints"]} == {"scored"}
    assert store.attrs(scores_key("seq-math", "seq-search"))["scores_id"] != ids["seq-search"]


def test_tokens_perturbed_output_row_drifts_only_where_that_token_matters(tmp_path, tokenizer, cli):
    run = tmp_path / "run"
    run.mkdir()
    write_manifest(Manifest(name="row"), run)
    ref = peaked_untied_model(tokenizer, seed=1)
    add_checkpoint(run, "ref", ref, tokenizer, parent=None, kind="base")
    write_jsonl(run / "prompts.jsonl", PROMPTS)
    code, _, err = run_cli("probe", "--run", str(run), "--ref", "ref", "--prompts", str(run / "prompts.jsonl"),
                           "--max-new-tokens", "16")
    assert code == 0, err
    probe = read_probe_set(ResultsStore(run), "ref")
    gen = np.concatenate([np.asarray(i)[np.asarray(m)] for i, m in zip(probe.ids, probe.scored, strict=True)])
    x = Counter(gen.tolist()).most_common(1)[0][0]  # greedy: the reference's top-1 wherever it was generated
    ckpt = copy.deepcopy(ref)
    with torch.no_grad():
        ckpt.lm_head.weight[x] = 0.0
    add_checkpoint(run, "row", ckpt, tokenizer, parent="ref")
    code, out, err = cli("tokens", "--run", str(run), "--ref", "ref", "--json")
    assert code == 0, err
    with ResultsStore(run).reader() as r:
        kl = r.ragged(f"{scores_key('ref', 'row')}/kl").all()
        top1 = r.ragged(f"{scores_key('ref', 'row')}/top1").all()
        ref_top1 = r.ragged(f"{reference_key('ref')}/top1").all()
    # where the token mattered, and where it did not, by the models' own probabilities
    p_ref, p_ckpt = [], []
    for ids, mask in zip(probe.ids, probe.scored, strict=True):
        xx = torch.as_tensor(np.asarray(ids, dtype=np.int64)).view(1, -1)
        t = np.flatnonzero(mask)
        with torch.no_grad():
            p_ref.append(ref(input_ids=xx).logits[0, t - 1].double().softmax(-1)[:, x])
            p_ckpt.append(ckpt(input_ids=xx).logits[0, t - 1].double().softmax(-1)[:, x])
    p_ref, p_ckpt = torch.cat(p_ref).numpy(), torch.cat(p_ckpt).numpy()
    mattered = p_ref > 0.5
    untouched = (p_ref < 1e-7) & (p_ckpt < 1e-7)
    assert mattered.sum() >= 2 and untouched.sum() >= 10, (mattered.sum(), untouched.sum())
    assert (kl[mattered] > 0.5).all()
    assert (top1[mattered] != ref_top1[mattered]).all()
    assert (kl[untouched] < 1e-5).all()
    assert (top1[untouched] == ref_top1[untouched]).all()
    row = json.loads(out)["checkpoints"][0]
    assert row["kl_mean"] > 0 and row["flip_rate"] == pytest.approx(float((top1 != ref_top1).mean()))


def _poison_token(model, y):
    """NaN logits from finite weights (as a half-precision overflow gives them at run time): the
    embedding output of token ``y`` is made NaN by a forward hook, so only sequences holding ``y`` go bad."""

    def hook(module, args, out):
        return out.masked_fill((args[0] == y).unsqueeze(-1), float("nan"))

    model.get_input_embeddings().register_forward_hook(hook)
    return model


def test_tokens_nan_logits_are_flagged_and_kept_out(tmp_path, tokenizer, cli, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    write_manifest(Manifest(name="nan"), run)
    ref = peaked_untied_model(tokenizer, seed=2, scale=1.0)
    add_checkpoint(run, "ref", ref, tokenizer, parent=None, kind="base")
    traces = [{"messages": [{"role": "user", "content": f"what is the {w} of the city?"},
                            {"role": "assistant", "content": f"the {w} is {n} and that is the answer"}]}
              for w, n in (("name", 3), ("population", 41), ("river", 7))]
    write_jsonl(run / "traces.jsonl", traces)
    code, _, err = run_cli("probe", "--run", str(run), "--ref", "ref", "--from-traces", str(run / "traces.jsonl"))
    assert code == 0, err
    probe = read_probe_set(ResultsStore(run), "ref")
    y = tokenizer.convert_tokens_to_ids("4")  # the digit of "41": in the second sequence only
    assert y in probe.ids[1].tolist() and y not in probe.ids[0].tolist() and y not in probe.ids[2].tolist()
    bad = copy.deepcopy(ref)
    with torch.no_grad():
        bad.model.embed_tokens.weight[y] += 0.5  # finite weights (NaN weights are refused at load)
    add_checkpoint(run, "bad", bad, tokenizer, parent="ref")
    import aclarena.models.loading as loading

    real_load = loading.load_model
    monkeypatch.setattr(loading, "load_model", lambda spec, *a, **k: _poison_token(real_load(spec, *a, **k), y)
                        if getattr(spec, "name", spec) == "bad" else real_load(spec, *a, **k))
    code, out, err = cli("tokens", "--run", str(run), "--ref", "ref", "--json")
    bad = _poison_token(bad, y)
    one_line_error(code, err, "NaN or infinite logits in 'bad'")
    row = json.loads(out)["checkpoints"][0]
    # the expected flags: where the checkpoint's own forward pass gives non-finite logits
    expected = []
    for ids, mask in zip(probe.ids, probe.scored, strict=True):
        x = torch.as_tensor(np.asarray(ids, dtype=np.int64)).view(1, -1)
        with torch.no_grad():
            logits = bad(input_ids=x).logits[0, np.flatnonzero(mask) - 1]
        expected.append(~torch.isfinite(logits).all(-1).numpy())
    assert not expected[0].any() and not expected[2].any() and expected[1].any()
    n_bad = int(sum(e.sum() for e in expected))
    assert row["n_invalid"] == n_bad == row["n_nonfinite"]
    assert row["n_valid"] == probe.n_scored - n_bad
    assert row["kl_mean"] is not None and np.isfinite(row["kl_mean"])
    with ResultsStore(run).reader() as r:
        status = r.ragged(f"{scores_key('ref', 'bad')}/status")
        kl = r.ragged(f"{scores_key('ref', 'bad')}/kl")
        for i in range(3):
            assert (status.row(i) == STATUS_NONFINITE).tolist() == expected[i].tolist()
            assert np.isnan(kl.row(i)[expected[i]]).all() and np.isfinite(kl.row(i)[~expected[i]]).all()
    before = file_state(run / "results.h5")
    # a rerun keeps reporting it (exit 1) without rescoring
    code, _, err = cli("tokens", "--run", str(run), "--ref", "ref")
    one_line_error(code, err, "flagged")
    assert file_state(run / "results.h5") == before


def test_truncation_is_recorded(tmp_path, tokenizer, cli):
    run = tmp_path / "run"
    run.mkdir()
    write_manifest(Manifest(name="short"), run)
    ref = peaked_untied_model(tokenizer, seed=3, scale=1.0, max_positions=120)
    add_checkpoint(run, "ref", ref, tokenizer, parent=None, kind="base")
    write_jsonl(run / "traces.jsonl", [TRACE, {"messages": TRACE["messages"][:3], "tools": TRACE["tools"]}])
    code, out, err = cli("probe", "--run", str(run), "--ref", "ref", "--from-traces", str(run / "traces.jsonl"), "--json")
    assert code == 0, err
    assert "truncated from 156 to 120" in err
    probe = read_probe_set(ResultsStore(run), "ref")
    assert [len(x) for x in probe.ids] == [120, 108] and any("truncated" in w for w in probe.warnings)
    short = copy.deepcopy(ref)
    short.config.max_position_embeddings = 100
    add_checkpoint(run, "short", short, tokenizer, parent="ref")
    code, out, err = cli("tokens", "--run", str(run), "--ref", "ref", "--json")
    assert code == 0, err
    assert "beyond its maximum positions" in err
    beyond = sum(int((probe.positions(i) > 100).sum()) for i in range(probe.n_sequences))
    row = json.loads(out)["checkpoints"][0]
    assert beyond > 0 and row["n_beyond_context"] == beyond and row["n_invalid"] == beyond
    with ResultsStore(run).reader() as r:
        status = r.ragged(f"{scores_key('ref', 'short')}/status").all()
    assert int((status == STATUS_BEYOND_CONTEXT).sum()) == beyond


# --- bad input: one line, exit 1, store unchanged -----------------------------------------------


@pytest.mark.parametrize(("argv", "needle"), [
    (["--ref", "seq-mth"], "did you mean 'seq-math'"),
    (["--ref", "oracle-math"], "no later checkpoints"),
    (["--ref", "seq-math", "--high", "q=2"], "--high"),
    (["--ref", "seq-math", "--probe", "seq-mat"], "unknown probe set 'seq-mat'"),
    (["--ref", "seq-math", "--against", "seq-serch"], "did you mean 'seq-search'"),
    (["--ref", "seq-math", "--batch-size", "0"], "--batch-size"),
])
def test_tokens_bad_input(probed_run, cli, argv, needle):
    before = file_state(probed_run / "results.h5")
    code, _, err = cli("tokens", "--run", str(probed_run), *argv)
    one_line_error(code, err, needle)
    assert file_state(probed_run / "results.h5") == before


def test_tokens_refuses_differing_tokenizers(probed_run, cli):
    from fixtures import make_tokenizer

    from aclarena.models.tiny import build_model, tiny_config

    other = make_tokenizer(vocab_size=300)
    add_checkpoint(probed_run, "other-tok", build_model(tiny_config(other)), other, parent="seq-math")
    before = file_state(probed_run / "results.h5")
    code, _, err = cli("tokens", "--run", str(probed_run), "--ref", "seq-math")
    one_line_error(code, err, "tokenizers differ")
    assert file_state(probed_run / "results.h5") == before


def test_tokens_without_probe_or_envs(fixture_run, cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "aclarena.envs", None)  # as on an install without the mini arena
    code, _, err = cli("tokens", "--run", str(fixture_run), "--ref", "seq-math")
    one_line_error(code, err, "mini-arena environments")
    assert not (fixture_run / "results.h5").exists()
    code, _, err = cli("probe", "--run", str(fixture_run), "--ref", "seq-math", "--domain", "math")
    one_line_error(code, err, "mini-arena environments")
    m = load_manifest(fixture_run)
    m.add(CheckpointSpec("nodomain", "checkpoints/seq-search", parent="base"))
    write_manifest(m, fixture_run)
    code, _, err = cli("tokens", "--run", str(fixture_run), "--ref", "base", "--against", "nodomain")
    one_line_error(code, err, "no probe set and no domain")


@pytest.mark.parametrize(("content", "needle"), [
    ("", "is empty"),
    ("\n  \n", "is empty"),
    ('{"prompt": "ok"}\n{"prompt": "broken"\n', "line 2"),
    ('{"prompt": "ok"}\n\n["not", "an", "object"]\n', "line 3"),
    ('{"question": "what"}\n', "line 1"),
    ('{"messages": [{"role": "robot", "content": "hi"}]}\n', "line 1"),
    ('{"messages": []}\n', "line 1"),
])
def test_probe_bad_prompt_files(probed_run, cli, content, needle):
    bad = probed_run / "bad.jsonl"
    bad.write_text(content, encoding="utf-8")
    before = file_state(probed_run / "results.h5")
    code, _, err = cli("probe", "--run", str(probed_run), "--ref", "seq-math", "--prompts", str(bad), "--name", "x")
    one_line_error(code, err, needle)
    assert file_state(probed_run / "results.h5") == before


def test_probe_bad_traces_and_existing_name(probed_run, cli):
    no_assistant = write_jsonl(probed_run / "t.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    code, _, err = cli("probe", "--run", str(probed_run), "--ref", "seq-math", "--from-traces", str(no_assistant),
                       "--name", "t")
    one_line_error(code, err, "no assistant message")
    before = file_state(probed_run / "results.h5")
    code, _, err = cli("probe", "--run", str(probed_run), "--ref", "seq-math", "--prompts",
                       str(probed_run / "prompts.jsonl"))
    one_line_error(code, err, "already exists")
    assert file_state(probed_run / "results.h5") == before
    code, _, err = cli("probe", "--run", str(probed_run), "--ref", "seq-math", "--prompts", str(probed_run / "nope.jsonl"),
                       "--name", "nope")
    one_line_error(code, err, "does not exist")


def test_probe_force_replaces_and_drops_scores(probed_run, cli):
    assert run_cli("tokens", "--run", str(probed_run), "--ref", "seq-math", "--against", "seq-search")[0] == 0
    store = ResultsStore(probed_run)
    assert store.has(scores_key("seq-math", "seq-search"))
    write_jsonl(probed_run / "p2.jsonl", PROMPTS[:2])
    code, out, err = cli("probe", "--run", str(probed_run), "--ref", "seq-math", "--prompts",
                         str(probed_run / "p2.jsonl"), "--force", "--json")
    assert code == 0, err
    assert json.loads(out)["sequences"] == 2
    assert not store.has("tokens/seq-math")


# --- kill and resume ------------------------------------------------------------------------------


def _score_keys(run: Path) -> list[str]:
    from aclarena.errors import StoreError

    try:
        return ResultsStore(run).keys(scores_key("seq-math"))
    except StoreError:
        return []


@pytest.mark.slow
def test_sigkill_during_tokens_then_rerun_equals_uninterrupted(probed_template, tmp_path, tokenizer):
    from fixtures import perturb

    template = tmp_path / "template"
    shutil.copytree(probed_template, template)
    manifest = load_manifest(template)
    base = load_model("seq-search", manifest, template)
    for k in range(4):  # more checkpoints: a wider window to land the kill between two of them
        add_checkpoint(template, f"extra-{k}", perturb(base, 0.01, seed=10 + k), tokenizer, parent="seq-search")
    targets = load_manifest(template).descendants("seq-math")
    whole = tmp_path / "whole"
    shutil.copytree(template, whole)
    assert run_cli("tokens", "--run", str(whole), "--ref", "seq-math")[0] == 0
    want = read_all(whole, "tokens/seq-math")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for attempt in range(4):
        run = tmp_path / f"killed-{attempt}"
        shutil.copytree(template, run)
        proc = subprocess.Popen([sys.executable, "-m", "aclarena", "tokens", "--run", str(run), "--ref", "seq-math",
                                 "--json"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while proc.poll() is None and not _score_keys(run) and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = _score_keys(run)
        if 0 < len(done) < len(targets):
            break
    else:
        pytest.fail("could not land a SIGKILL between two checkpoints in 4 attempts")
    code, out, err = run_cli("tokens", "--run", str(run), "--ref", "seq-math", "--json")
    assert code == 0, err
    statuses = {r["checkpoint"]: r["status"] for r in json.loads(out)["checkpoints"]}
    assert {c for c, s in statuses.items() if s == "cached"} == set(done)
    got = read_all(run, "tokens/seq-math")
    assert set(got) == set(want)
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[key], value, err_msg=key)
        elif key.endswith("/summary"):
            assert got[key] == value, key
    assert not list(run.glob(".results.h5.*.tmp"))


def test_scoring_refuses_logits_it_cannot_reproduce(probed_run):
    """A config asking for soft-capping that the architecture does not apply: chunked logits
    would differ from the model's forward pass, so scoring refuses with one line."""
    from aclarena.errors import AclarenaError

    manifest = load_manifest(probed_run)
    probe = read_probe_set(ResultsStore(probed_run), "seq-math", with_text=False)
    ref = load_model("seq-math", manifest, probed_run)
    odd = load_model("seq-search", manifest, probed_run)
    odd.config.final_logit_softcapping = 0.5  # Qwen3 ignores it; aclarena's head would apply it
    with pytest.raises(AclarenaError, match="differ from its forward pass"):
        score(odd, ref, probe, name="odd")


def test_probe_from_arena_domain_and_default_probe(fixture_run, cli):
    code, out, err = cli("probe", "--run", str(fixture_run), "--ref", "seq-math", "--domain", "math", "-n", "3",
                         "--max-new-tokens", "6", "--json")
    assert code == 0, err
    probe = read_probe_set(ResultsStore(fixture_run), "seq-math")
    assert probe.n_sequences == 3 and probe.settings["source"] == "domain" and probe.settings["domain"] == "math"
    assert all(s["domain"] == "math" and s["messages"][-1]["role"] == "user" for s in probe.sources)
    assert all(1 <= m.sum() <= 6 for m in probe.scored)
    code, _, err = cli("probe", "--run", str(fixture_run), "--ref", "seq-math", "--domain", "mth", "--name", "x")
    one_line_error(code, err, "did you mean 'math'")
    # no probe set for seq-search yet: `tokens` makes one from its domain (search) with defaults
    code, out, err = cli("tokens", "--run", str(fixture_run), "--ref", "seq-search", "--json")
    assert code == 0, err
    made = read_probe_set(ResultsStore(fixture_run), "seq-search", with_text=False)
    assert made.settings["domain"] == "search" and made.n_sequences == 32
    assert made.settings["generation"]["max_new_tokens"] == 128 and made.settings["generation"]["greedy"]
    assert [r["checkpoint"] for r in json.loads(out)["checkpoints"]] == ["lora-ecom"]
