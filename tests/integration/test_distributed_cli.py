"""Data-parallel `probe`, `tokens` and `eval`: 2 processes under torchrun (gloo, CPU) store exactly
what one process stores (bit for bit), and only rank 0 prints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from distributed_helpers import aclarena, assert_same_contents, store_contents

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def token_template(tmp_path_factory, tokenizer) -> tuple[Path, Path]:
    from tokens_helpers import PROMPTS, add_token_checkpoints, write_jsonl

    root = tmp_path_factory.mktemp("dist") / "run"
    add_token_checkpoints(root, tokenizer, name="dist")
    # outside the run folders: the probe records the prompts file's path
    prompts = write_jsonl(root.parent / "prompts.jsonl", PROMPTS * 2)
    return root, prompts


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_probe_and_tokens_on_two_processes_equal_one(token_template, tmp_path):
    template, prompts = token_template
    runs = {n: _copy(template, tmp_path / f"p{n}") for n in (1, 2)}
    outs = {}
    for n, run in runs.items():
        # batch size 2 on 10 prompts: 5 batches, so the ranks get 3 and 2 (an uneven split)
        probe = aclarena("probe", "--run", str(run), "--ref", "seq-math", "--prompts", str(prompts),
                         "--max-new-tokens", "12", "--batch-size", "2", "--json", nproc=n)
        assert probe.returncode == 0, probe.stderr
        tokens = aclarena("tokens", "--run", str(run), "--ref", "seq-math", "--batch-size", "3", "--json", nproc=n)
        assert tokens.returncode == 0, tokens.stderr
        outs[n] = (probe.stdout, tokens.stdout)
    one, two = store_contents(runs[1]), store_contents(runs[2])
    assert any(k.startswith("tokens/seq-math/scores") for k in one)
    assert_same_contents(two, one)
    # rank 0 alone prints: one JSON document, the same numbers
    for a, b in zip(outs[1], outs[2], strict=True):
        ja, jb = json.loads(a), json.loads(b)
        ja.pop("digest", None), jb.pop("digest", None)
        assert jb == ja
    # a rerun on two processes finds every checkpoint finished
    again = aclarena("tokens", "--run", str(runs[2]), "--ref", "seq-math", "--batch-size", "3", "--json", nproc=2)
    assert again.returncode == 0, again.stderr
    assert {r["status"] for r in json.loads(again.stdout)["checkpoints"]} == {"cached"}


def test_eval_on_two_processes_equals_one(fixture_run, tmp_path):
    runs = {1: fixture_run, 2: _copy(fixture_run, tmp_path / "e2")}
    outs = {}
    for n, run in runs.items():
        # 3 tasks, batch size 1: 3 greedy and 3 sampled batches, split 2/1 between the ranks
        res = aclarena("eval", "--run", str(run), "--checkpoints", "seq-math", "--suites", "math/id", "-n", "3",
                       "--samples", "1", "--batch-size", "1", "--json", nproc=n)
        assert res.returncode == 0, res.stderr
        outs[n] = json.loads(res.stdout)
    one, two = store_contents(runs[1]), store_contents(runs[2])
    assert any(k.startswith("capability") or "greedy" in k for k in one), sorted(one)[:5]
    assert_same_contents(two, one)
    assert [c["mean"] for c in outs[2]["cells"]] == [c["mean"] for c in outs[1]["cells"]]


def test_bad_input_on_two_processes_is_one_line_and_exit_1(token_template, tmp_path):
    template, _ = token_template
    run = _copy(template, tmp_path / "bad")
    res = aclarena("tokens", "--run", str(run), "--ref", "seq-mth", nproc=2)
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("aclarena-diag")]
    # each rank checks the name; only rank 0 prints it
    assert len(lines) == 1 and "did you mean 'seq-math'" in lines[0], res.stderr
    assert not (run / "results.h5").exists()


def test_verbs_that_do_not_shard_refuse_several_processes(token_template, tmp_path):
    template, _ = token_template
    res = aclarena("vectors", "--run", str(template), nproc=2)
    assert res.returncode == 1
    assert "does not run data-parallel" in res.stderr
    assert not (template / "results.h5").exists()
