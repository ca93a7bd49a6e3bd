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
