"""`aclarena-diag eval` end to end on the tiny fixture run: the matrix lands in the store, reruns skip it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from aclarena.results.capability import load_matrix, read_cells, read_items
from aclarena.store import CheckpointSpec, ResultsStore, load_manifest, write_manifest

SMALL = ("--suites", "math/id,search/id,ecom/id,general", "-n", "2", "--samples", "2", "--seeds", "0,1")


@pytest.mark.slow
def test_eval_end_to_end_then_rerun_skips(fixture_run, cli):
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "base,seq-math,lora-ecom", *SMALL, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["skipped"] == 0 and len(rep["cells"]) == 12 and all(c["computed"] for c in rep["cells"])
    # general is multiple choice: its guessing score rides along, with whether the interval holds it
    for c in rep["cells"]:
        assert c["chance"] == (0.25 if c["suite"] == "general" else 0.0)
        assert (c["at_chance"] == (c["ci95"][0] <= 0.25 <= c["ci95"][1])) if c["suite"] == "general" else (
            c["at_chance"] is None)
    assert ("general is at chance" in err) == any(c["at_chance"] for c in rep["cells"])
    with ResultsStore(fixture_run).reader() as r:
        cells = read_cells(r)
        assert len(cells) == 12 and all(c.ok for c in cells)
        c = next(c for c in cells if c.checkpoint == "seq-math" and c.suite == "search/id")
        assert (c.n_seeds, c.n_items, c.samples) == (2, 2, 2) and c.domain == "search" and c.role == "id"
        assert 0.0 <= c.mean <= 1.0 and np.isfinite(c.std) and np.isfinite(c.avg_k_mean)
        assert r.read(f"{c.key}/samples").shape == (2, 2, 2)
        assert r.read(f"{c.key}/seed_scores").shape == (2,)
        assert set(r.read(f"{c.key}/metrics")) == {"em", "f1", "searches"}
        assert len(r.read(f"{c.key}/transcripts")) == 4 and len(r.read(f"{c.key}/end_reasons")) == 4
        ids, scores = read_items(r, c)
        assert scores.shape == (2, 2) and len(ids) == 4 and ids[0].startswith("search/id/")
        # the same tasks for every checkpoint: per-item outcomes line up along the chain
        other = next(x for x in cells if x.checkpoint == "base" and x.suite == "search/id")
        assert read_items(r, other)[0] == ids
        general = next(x for x in cells if x.suite == "general")
        assert general.role == "general" and general.domain == "general"
        written = {x.key: r.attrs(x.key)["computed_at"] for x in cells}
        matrix = load_matrix(r, load_manifest(fixture_run))
    assert matrix.checkpoints == ["base", "seq-math", "lora-ecom"]
    assert matrix.suites == ["math/id", "search/id", "ecom/id", "general"]
    assert matrix.array(matrix.checkpoints, matrix.suites).shape == (3, 4)
    # an untrained model does not solve the arena (doing nothing is never rewarded)
    assert matrix.value("base", "ecom/id") == 0.0

    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "base,seq-math,lora-ecom", *SMALL, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["skipped"] == 12 and not any(c["computed"] for c in rep["cells"])
    with ResultsStore(fixture_run).reader() as r:
        assert {x.key: r.attrs(x.key)["computed_at"] for x in read_cells(r)} == written

    # other settings are other cells; the table form prints the matrix
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "base", "--suites", "math/id", "-n", "1",
                         "--samples", "0")
    assert code == 0, err
    assert "capability matrix" in out and "math/id" in out
    with ResultsStore(fixture_run).reader() as r:
        assert len(read_cells(r)) == 13


def test_failing_checkpoint_becomes_an_error_cell(fixture_run, cli, monkeypatch):
    # a checkpoint whose weights are truncated cannot be loaded
    broken = fixture_run / "checkpoints" / "broken"
    shutil.copytree(fixture_run / "checkpoints" / "seq-math", broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    m = load_manifest(fixture_run)
    m.add(CheckpointSpec("broken", "checkpoints/broken", kind="stage", domain="search", parent="seq-math"))
    write_manifest(m, fixture_run)
    # and generation fails for seq-math (e.g. out of memory)
    import aclarena.envs.evaluation as evaluation

    real = evaluation.evaluate_suite

    def flaky(model, tokenizer, suite, settings, *, checkpoint, on_progress=None):
        if checkpoint == "seq-math":
            raise RuntimeError("CUDA out of memory\nsecond line")
        return real(model, tokenizer, suite, settings, checkpoint=checkpoint, on_progress=on_progress)

    monkeypatch.setattr(evaluation, "evaluate_suite", flaky)
    args = ("eval", "--run", str(fixture_run), "--checkpoints", "base,broken,seq-math", "--suites", "math/id,general",
            "-n", "2", "--samples", "0")
    code, out, err = cli(*args, "--json")
    assert code == 1
    assert "cell(s) failed" in err and "rerun to retry" in err and "Traceback" not in err
    rep = json.loads(out)
    status = {(c["checkpoint"], c["suite"]): c for c in rep["cells"]}
    assert len(status) == 6
    assert status[("base", "math/id")]["status"] == "ok" and status[("base", "general")]["status"] == "ok"
    assert status[("broken", "math/id")]["status"] == "error" and "broken" in status[("broken", "math/id")]["error"]
    assert status[("seq-math", "general")]["error"] == "RuntimeError: CUDA out of memory"
    # fixed: the rerun retries the error cells only
    monkeypatch.setattr(evaluation, "evaluate_suite", real)
    code, out, err = cli(*args, "--json")
    rep = json.loads(out)
    computed = {(c["checkpoint"], c["suite"]) for c in rep["cells"] if c["computed"]}
    assert computed == {("broken", "math/id"), ("broken", "general"), ("seq-math", "math/id"), ("seq-math", "general")}
    assert code == 1  # the broken weights are still broken
    assert all(c["status"] == "ok" for c in rep["cells"] if c["checkpoint"] == "seq-math")


def test_interrupted_eval_resumes(fixture_run, cli, monkeypatch):
    import aclarena.envs.evaluation as evaluation

    real = evaluation.evaluate_suite
    calls = []

    def interrupted(model, tokenizer, suite, settings, *, checkpoint, on_progress=None):
        calls.append((checkpoint, suite))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(model, tokenizer, suite, settings, checkpoint=checkpoint, on_progress=on_progress)

    monkeypatch.setattr(evaluation, "evaluate_suite", interrupted)
    args = ("eval", "--run", str(fixture_run), "--checkpoints", "base,seq-math", "--suites", "math/id,general",
            "-n", "1", "--samples", "0", "--json")
    code, _, err = cli(*args)
    assert code == 130 and "rerun to resume" in err
    with ResultsStore(fixture_run).reader() as r:
        assert len(read_cells(r)) == 2
    monkeypatch.setattr(evaluation, "evaluate_suite", real)
    code, out, _ = cli(*args)
    assert code == 0
    rep = json.loads(out)
    assert rep["skipped"] == 2 and sum(c["computed"] for c in rep["cells"]) == 2


@pytest.mark.parametrize("argv, fragment", [
    (("--suites", "math/idd"), "did you mean 'math/id'"),
    (("--suites", "maths"), "did you mean 'math'"),
    (("--checkpoints", "seq-mat"), "did you mean 'seq-math'"),
    (("--seeds", "a,b"), "comma-separated integers"),
    (("-n", "0"), "-n must be a positive"),
    (("--samples", "-1"), "--samples must be >= 0"),
])
def test_eval_bad_inputs(fixture_run, cli, argv, fragment):
    code, _, err = cli("eval", "--run", str(fixture_run), *argv)
    assert code == 1 and fragment in err and "Traceback" not in err


def test_forgetting_after_eval(fixture_run, cli):
    code, _, err = cli("eval", "--run", str(fixture_run), "--suites", "math/id,search/id", "-n", "2", "--samples", "0")
    assert code == 0, err
    code, out, err = cli("forgetting", "--run", str(fixture_run), "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["chain"] == ["base", "seq-math", "seq-search"] and rep["tasks"] == ["math", "search"]
    assert np.array(rep["R"]).shape == (2, 2)
    assert rep["domains"][0]["oracle"] == "oracle-math"
    assert [c["checkpoint"] for c in rep["consolidated"]] == ["lora-ecom"]
