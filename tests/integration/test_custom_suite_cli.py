"""A bring-your-own JSONL suite end to end (issue 32): `init --suite`, `eval` scores it with the model's own
chat template, `forgetting` finds it by domain, `flips` replays its items."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from suite_helpers import MAX_NEW, PROMPTS, add_reply_suite

from aclarena.envs.custom import register_suites
from aclarena.store.manifest import Manifest, load_manifest


@pytest.fixture(autouse=True)
def _forget_registered_suites():
    yield
    register_suites(Manifest(name="none"), ".")  # `eval` registered the run's suites in this process


def _plain_greedy(folder, prompts):
    """seq-math's replies generated with transformers alone: its chat template, greedy, cut at the end of turn."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    stops = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")} - {None})
    out = []
    for p in prompts:
        text = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=stops,
                                 pad_token_id=stops[0])[0, ids.shape[1]:].tolist()
        cut = next((i for i, t in enumerate(gen) if t in stops), len(gen))
        out.append(tok.decode(gen[:cut], skip_special_tokens=False))
    return out


def _diverse_pair(run) -> None:
    """seq-math and seq-search rewritten so that their greedy replies vary by prompt (the fixture's
    near-random weights answer every prompt with new lines) and seq-search keeps only a few of seq-math's."""
    from fixtures import perturb
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aclarena.models.tiny import save_checkpoint

    ck = run / "checkpoints"
    tok = AutoTokenizer.from_pretrained(ck / "base")
    e = perturb(AutoModelForCausalLM.from_pretrained(ck / "base", dtype=torch.float32), 0.1, seed=11)
    save_checkpoint(e, tok, ck / "seq-math")
    save_checkpoint(perturb(e, 0.003, seed=12), tok, ck / "seq-search")


def test_custom_suite_eval_forgetting_flips(fixture_run, tmp_path, cli):
    _diverse_pair(fixture_run)
    replies = _plain_greedy(fixture_run / "checkpoints" / "seq-math", PROMPTS)
    later = _plain_greedy(fixture_run / "checkpoints" / "seq-search", PROMPTS)
    kept = [a.strip() == b.strip() for a, b in zip(replies, later, strict=True)]
    assert len(set(replies)) > len(PROMPTS) // 2 and 0 < sum(kept) < len(PROMPTS)  # the test can tell
    tasks = tmp_path / "mine.jsonl"
    add_reply_suite(cli, fixture_run, tasks, PROMPTS, replies)
    assert load_manifest(fixture_run).suites["mine"].max_new_tokens == MAX_NEW

    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "base,seq-math,seq-search",
                         "--samples", "0", "--json")  # no --suites: the manifest's own suites
    assert code == 0, err
    data = json.loads(out)
    assert data["suites"] == ["mine"]
    cells = {c["checkpoint"]: c for c in data["cells"]}
    assert cells["seq-math"]["mean"] == 1.0 and cells["seq-math"]["n_items"] == len(PROMPTS)  # its own replies
    # the later checkpoint solves exactly the items where its plain-transformers reply is seq-math's
    assert cells["seq-search"]["mean"] == pytest.approx(sum(kept) / len(PROMPTS)), cells

    code, out, err = cli("forgetting", "--run", str(fixture_run), "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["suites"][0] == "mine" and rep["domains"][0]["after_own_stage"] == 1.0

    code, out, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--suite",
                         "mine", "--max-items", "2", "--budgets", "50", "--no-reverse", "--json")
    assert code == 0, err
    res = json.loads(out)
    forgot = [it for it in res["items"] if it["direction"] == "forgot"]
    assert forgot and all(it["item_id"].startswith("mine/") for it in forgot)
    assert all(it["reproduced"] for it in forgot), forgot  # the replays give the matrix's outcomes

    # an edited task file is a new cell, never the old one
    first = json.loads(tasks.read_text().splitlines()[0])
    tasks.write_text("\n".join([json.dumps(first | {"answer": "nothing like it"}), *tasks.read_text().splitlines()[1:]]))
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "seq-math", "--samples", "0", "--json")
    assert code == 0, err
    (cell,) = json.loads(out)["cells"]
    assert cell["computed"] and cell["mean"] == pytest.approx(1 - 1 / len(PROMPTS))


def test_flips_on_lm_eval_per_sample_imports(fixture_run, cli):
    """Imported per-sample scores pair by document: seq-math solves docs 0, 1, 3 (strict-match), seq-search 0, 3."""
    data = Path(__file__).resolve().parents[1] / "data" / "lm_eval"
    for name in ("seq-math", "seq-search"):
        (results,) = (data / name).glob("results_*.json")
        code, _, err = cli("eval", "--run", str(fixture_run), "--import-lm-eval", f"{name}={results}",
                           "--lm-eval-task", "gsm8k=math/id")
        assert code == 0, err
    code, out, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--suite",
                         "lm-eval/gsm8k", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["replayed"] is False and res["n"] == 6
    assert res["lost_items"] == ["1"] and res["gained_items"] == [] and res["lost"] == 1
    assert res["p_drop"] == pytest.approx(0.5)  # one discordant pair, one-sided exact McNemar
    code, out, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--suite",
                         "lm-eval/gsm8k")
    assert code == 0 and "not replayed" in out and "lost: 1" in out, out + err


def test_init_sets_a_suites_fewshot_reply_budget_and_prompt_format(fixture_run, tmp_path, cli):
    """`init --suite` takes the fields a real suite needs from the command line (before: only by editing the
    manifest): the few-shot file (written relative to the run folder), how many of its lines, the reply budget,
    the prompt format; each checked before the manifest is written."""
    from aclarena.store import load_manifest

    tasks, shots = tmp_path / "tasks.jsonl", tmp_path / "shots.jsonl"
    tasks.write_text('{"prompt": "1+1?", "answer": "2"}\n{"prompt": "2+2?", "answer": "4"}\n')
    shots.write_text('{"prompt": "3+3?", "answer": "6"}\n{"prompt": "1+2?", "answer": "3"}\n')
    before = (fixture_run / "aclarena.toml").read_text()
    base = ["init", "--run", str(fixture_run), "--add", "--suite", f"sums={tasks}", "--suite-domain", "sums=math"]
    for extra, needle in ((["--suite-num-fewshot", "sums=two"], "--suite-num-fewshot sums=two: 'two' is not an integer"),
                          (["--suite-num-fewshot", "sums=1"], "`num_fewshot` must be an integer >= 0 and goes with"),
                          (["--suite-fewshot", f"sums={shots}", "--suite-num-fewshot", "sums=5"], "num_fewshot = 5"),
                          (["--suite-prompt-format", "sums=xml"], "prompt_format"),
                          (["--suite-max-new-tokens", "other=8"], "'other' is not among the suites being added")):
        code, _, err = cli(*base, *extra)
        assert code == 1 and needle in err and len(err.strip().splitlines()) == 1, (extra, err)
        assert (fixture_run / "aclarena.toml").read_text() == before  # nothing written
    code, _, err = cli(*base, "--suite-fewshot", f"sums={shots}", "--suite-num-fewshot", "sums=1",
                       "--suite-max-new-tokens", "sums=8", "--suite-prompt-format", "sums=plain")
    assert code == 0, err
    suite = load_manifest(fixture_run).suites["sums"]
    assert (suite.num_fewshot, suite.max_new_tokens, suite.prompt_format) == (1, 8, "plain")
    assert (fixture_run / suite.fewshot).resolve() == shots.resolve() if not Path(suite.fewshot).is_absolute() \
        else Path(suite.fewshot) == shots.resolve()
