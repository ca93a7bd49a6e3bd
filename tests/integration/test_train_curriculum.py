"""The tiny curriculum end to end: every phase trains, every checkpoint is registered with its parent,
trainer logs land in the store, a rerun does nothing, and the demo runs its analyses on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from train_helpers import TINY, changed, marker_mtimes, weights

from aclarena.results.demo import read_demo_summary
from aclarena.results.train_log import read_train_logs
from aclarena.store import ResultsStore, load_manifest
from aclarena.train.config import load_config
from aclarena.train.curriculum import run_curriculum
from aclarena.train.plan import plan

pytestmark = pytest.mark.slow


@pytest.fixture()
def tiny_run(tiny_curriculum) -> tuple[Path, object]:
    return tiny_curriculum


def test_every_phase_trains_and_is_registered(tiny_run):
    out, result = tiny_run
    cfg = load_config(TINY)
    jobs = plan(cfg)
    assert [r.job.name for r in result.records] == [j.name for j in jobs]
    assert all(r.status in ("trained", "reused") for r in result.records)
    manifest = load_manifest(out)
    assert manifest.base == "base"
    assert [s.name for s in manifest] == [j.name for j in jobs]
    for job in jobs:
        spec = manifest.resolve(job.name)
        assert (spec.kind, spec.domain, spec.phase, spec.parent) == (job.kind, job.domain, job.phase, job.parent)
        if job.kind != "base":
            assert spec.seed == cfg.seed
    # the first stage starts from the base: its oracle is the same computation, registered with the stage's folder
    assert manifest.resolve("oracle-math").path == manifest.resolve("seq-math").path
    assert manifest.resolve("oracle-search").path == "checkpoints/oracle-search"
    assert manifest.resolve("seq-search-sft").parent == "seq-math"
    assert manifest.resolve("oracle-ecom-sft").parent == "base"

    # parameters changed in every trained phase, against its parent (and the base against its initialisation)
    for job in jobs:
        if job.same_as is not None or job.kind == "base":
            continue
        child = weights(out / manifest.resolve(job.name).path)
        parent = weights(out / manifest.resolve(job.parent).path)
        assert changed(child, parent), f"{job.name} did not move from {job.parent}"
    from aclarena.models.tiny import build_model, tiny_config
    from aclarena.train.base import TINY as TINY_SIZES
    from aclarena.train.phases import load_start

    _, tok = load_start(out / "checkpoints" / "base")
    init = build_model(tiny_config(tok, hidden_size=TINY_SIZES["hidden_size"], num_layers=TINY_SIZES["num_layers"],
                                   num_heads=TINY_SIZES["num_heads"], num_kv_heads=TINY_SIZES["num_kv_heads"],
                                   intermediate_size=TINY_SIZES["intermediate_size"], max_positions=1024), seed=0)
    base = weights(out / "checkpoints" / "base")
    init_sd = {k: v for k, v in init.state_dict().items() if k in base}
    assert set(init_sd) == set(base)
    assert changed(base, init_sd)
    # every checkpoint folder holds its tokenizer with the chat template, left-padded
    cfg_tok = json.loads((out / "checkpoints" / "seq-if" / "tokenizer_config.json").read_text())
    assert cfg_tok.get("padding_side") == "left"
    # trainer checkpoints are gone once a phase is finished
    assert not any((out / "work").glob("*/checkpoint-*"))


def test_train_logs_in_the_store(tiny_run):
    out, result = tiny_run
    with ResultsStore(out).reader() as r:
        logs = read_train_logs(r)
    trained = [r.job.name for r in result.records if r.status == "trained"]
    assert sorted(logs) == sorted(trained)
    for name in trained:
        stored, log = logs[name], logs[name].log
        rec = next(r for r in result.records if r.job.name == name)
        assert stored.steps == rec.result.steps > 0
        assert stored.time_s > 0
        assert stored.parent == (rec.job.parent or "")
        assert "loss" in log and len(log["step"]) == len(log["loss"]) > 0
        assert max(log["step"]) <= rec.result.steps
        if rec.job.phase == "rl":
            assert "reward" in log and "entropy" in log
            assert any(k.startswith("rewards.") for k in log)  # '/' in trl's names is stored as '.'


def test_rerun_does_nothing(tiny_run, tmp_path):
    out, _ = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    before = marker_mtimes(copy)
    manifest_before = (copy / "aclarena.toml").stat().st_mtime_ns
    store_before = (copy / "results.h5").stat().st_mtime_ns
    again = run_curriculum(load_config(TINY), copy, show_progress=False)
    assert {r.status for r in again.records} <= {"finished", "reused"}
    assert marker_mtimes(copy) == before
    assert (copy / "aclarena.toml").stat().st_mtime_ns == manifest_before
    assert (copy / "results.h5").stat().st_mtime_ns == store_before
    assert again.wall_s < 30


def test_demo_on_a_trained_tiny_run(tiny_run, tmp_path, cli):
    out, _ = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    before = marker_mtimes(copy)
    code, stdout, err = cli("demo", "--preset", "tiny", "--out", str(copy), "-n", "2", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    s = data["summary"]
    assert marker_mtimes(copy) == before  # nothing retrained
    assert [r["stage"] for r in s["stages"]] == ["seq-math", "seq-search", "seq-ecom", "seq-if"]
    assert [r["parent"] for r in s["stages"]] == ["base", "seq-math", "seq-search", "seq-ecom"]
    for r in s["stages"]:
        assert r["score"] is not None and r["parent_score"] is not None and 0 <= r["score"] <= 1
    assert s["ecom_effect"]["before"] == "seq-search" and s["ecom_effect"]["math/id"]["after"] is not None
    assert {r["stage"] for r in s["sft_rl"]} == {"math", "search", "ecom", "if"}
    assert all(r["ratio"] is not None and r["ratio"] > 0 for r in s["sft_rl"])
    assert len(s["phase_times"]) == len(plan(load_config(TINY)))
    assert set(s["step_times"]) >= {"train", "eval", "vectors", "displacement", "forgetting"}
    with ResultsStore(copy).reader() as r:
        stored = read_demo_summary(r)
    assert stored is not None and stored.to_json() == s
    # the same summary as strict JSON (no NaN), for copying numbers into a report
    on_disk = json.loads((copy / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert on_disk["stages"] == s["stages"] and on_disk["sft_rl"] == s["sft_rl"]
    assert not s["errors"], s["errors"]
    for r in s["stages"]:  # each score with its bootstrap interval over the n items
        lo, hi = r["score_ci95"]
        assert lo <= r["score"] + 1e-9 and r["score"] <= hi + 1e-9
    for suite in ("math/id", "search/id", "general"):  # the e-commerce stage's effect, paired item by item
        e = s["ecom_effect"][suite]
        assert e["n"] == 2 and e["lost"] + e["gained"] <= e["n"] and 0 < e["p_drop"] <= 1
        assert e["lost"] - e["gained"] == round((e["before"] - e["after"]) * e["n"])
    # a rerun reads everything back: nothing retrained, no step fails (the probe set is kept), the same numbers
    code, stdout, err = cli("demo", "--preset", "tiny", "--out", str(copy), "-n", "2", "--json")
    assert code == 0, err
    again = json.loads(stdout)["summary"]
    assert not again["errors"], again["errors"]
    assert again["stages"] == s["stages"] and again["ecom_effect"] == s["ecom_effect"]
