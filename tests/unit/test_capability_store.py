"""Capability cells in the store, the `forgetting` verb on a hand-made matrix, and lm-eval import."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from aclarena.results.capability import (
    at_chance,
    cell_ci95,
    cell_key,
    cell_payload,
    chain_data,
    error_payload,
    load_matrix,
    pick_chain,
    read_cells,
    read_items,
    stage_chains,
    write_cells,
)
from aclarena.results.lm_eval import choose_metric, parse_tag, read_results
from aclarena.store import CheckpointSpec, Manifest, ResultsStore, write_manifest

DATA = Path(__file__).resolve().parents[1] / "data" / "lm_eval"

# stage -> suite -> per-item outcomes (4 items): means give the matrix of the docstring below
ITEMS = {
    "base": {"math/id": [0, 0, 0, 0], "search/id": [1, 0, 0, 0], "if/id": [0, 0, 0, 0]},
    "s1": {"math/id": [1, 1, 0, 0], "search/id": [1, 0, 0, 0], "if/id": [0, 0, 0, 0]},
    "s2": {"math/id": [1, 1, 1, 1], "search/id": [1, 1, 1, 0], "if/id": [1, 0, 0, 0]},
    "s3": {"math/id": [0, 1, 0, 0], "search/id": [1, 0, 1, 0], "if/id": [1, 1, 1, 1]},
    "oracle-math": {"math/id": [1, 1, 1, 1]},
    "merge": {"math/id": [1, 1, 1, 0], "search/id": [1, 1, 1, 0], "if/id": [1, 1, 0, 0]},
}
# R (stages s1..s3 x tasks math, search, if):
#   s1: 0.50 0.25 0.00 ; s2: 1.00 0.75 0.25 ; s3: 0.25 0.50 1.00 ; base: 0.00 0.25 0.00


def _run(tmp_path: Path) -> Path:
    m = Manifest(name="hand", base="base")
    m.add(CheckpointSpec("base", "ck/base", kind="base"))
    m.add(CheckpointSpec("s1", "ck/s1", kind="stage", domain="math", phase="sft", parent="base"))
    m.add(CheckpointSpec("s2", "ck/s2", kind="stage", domain="search", phase="rl", parent="s1"))
    m.add(CheckpointSpec("s3", "ck/s3", kind="stage", domain="if", phase="rl", parent="s2"))
    m.add(CheckpointSpec("oracle-math", "ck/om", kind="oracle", domain="math", parent="base"))
    m.add(CheckpointSpec("merge", "ck/merge", kind="consolidated", method="merge-uniform", parent="s3"))
    run = tmp_path / "run"
    run.mkdir()
    write_manifest(m, run)
    settings = {"n": 4, "seeds": [0]}
    items = []
    for ck, suites in ITEMS.items():
        for suite, outcomes in suites.items():
            domain, role = suite.split("/")
            items.append(cell_payload(checkpoint=ck, suite=suite, domain=domain, role=role, source="arena",
                                      settings=settings, greedy=np.array([outcomes], dtype=float),
                                      item_ids=[f"{suite}-{i}" for i in range(4)]))
    write_cells(run, items, overwrite=False)
    return run


def test_cells_round_trip(tmp_path):
    run = _run(tmp_path)
    with ResultsStore(run).reader() as r:
        cells = read_cells(r)
        assert len(cells) == sum(len(v) for v in ITEMS.values())
        c = next(c for c in cells if c.checkpoint == "s2" and c.suite == "search/id")
        assert c.ok and c.mean == pytest.approx(0.75) and c.std == 0.0 and c.n_items == 4 and c.n_seeds == 1
        assert c.domain == "search" and c.role == "id" and c.settings == {"n": 4, "seeds": [0]}
        ids, scores = read_items(r, c)
        assert ids == [f"search/id-{i}" for i in range(4)] and scores.tolist() == [[1, 1, 1, 0]]
        m = load_matrix(r)
    assert m.suites == ["math/id", "search/id", "if/id"]
    np.testing.assert_allclose(m.array(["s1", "s2", "s3"], m.suites), [[0.5, 0.25, 0], [1, 0.75, 0.25], [0.25, 0.5, 1]])
    assert np.isnan(m.value("oracle-math", "if/id"))


def test_cell_interval_is_the_bootstrap_over_items(tmp_path):
    from aclarena.diagnostics.bootstrap import bootstrap_mean_ci

    run = _run(tmp_path)
    with ResultsStore(run).reader() as r:
        cells = {(c.checkpoint, c.suite): c for c in read_cells(r)}
        lo, hi = cell_ci95(r, cells[("s2", "search/id")])
        assert [lo, hi] == list(bootstrap_mean_ci(np.array([1.0, 1.0, 1.0, 0.0])))
        assert 0.0 <= lo < 0.75 < hi <= 1.0  # around the mean, inside [0, 1]
        assert cell_ci95(r, cells[("s2", "math/id")]) == [1.0, 1.0]  # every item solved: no spread
    settings = {"n": 2, "seeds": [0, 1]}  # two seeds: the interval is over items of the per-item mean
    key, = write_cells(run, [cell_payload(checkpoint="s1", suite="if/id", domain="if", role="id", source="arena",
                                          settings=settings, greedy=np.array([[1.0, 0.0], [1.0, 1.0]]))])
    assert key == cell_key("s1", "if/id", settings)
    with ResultsStore(run).reader() as r:
        assert cell_ci95(r, key) == list(bootstrap_mean_ci(np.array([1.0, 0.5])))


def test_chain_and_forgetting_report_by_hand(tmp_path, cli):
    run = _run(tmp_path)
    from aclarena.store import load_manifest

    manifest = load_manifest(run)
    assert [s.name for s in pick_chain(manifest)] == ["base", "s1", "s2", "s3"]
    code, out, err = cli("forgetting", "--run", str(run), "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["chain"] == ["base", "s1", "s2", "s3"] and rep["tasks"] == ["math", "search", "if"]
    s = rep["summary"]
    assert s["average_accuracy"] == pytest.approx((0.25 + 0.5 + 1.0) / 3)
    assert s["backward_transfer"] == pytest.approx(-0.25)
    assert s["forward_transfer"] == pytest.approx(0.125)
    assert s["forgetting_max"] == pytest.approx(0.5)  # (0.75 + 0.25) / 2
    assert s["forgetting_first_last"] == pytest.approx(0.25)  # the two definitions differ here
    assert s["retention_vs_oracle"] == pytest.approx(0.25)  # math only: 0.25 / 1.0
    assert s["average_incremental_accuracy"] == pytest.approx((0.5 + 0.875 + 1.75 / 3) / 3)
    assert s["sample_forgetting"] == pytest.approx(0.25)  # one item of four, for math and for search
    assert s["sample_backward_transfer"] == pytest.approx(0.0)
    math_row = rep["domains"][0]
    assert math_row["best_before_final"] == pytest.approx(1.0) and math_row["oracle"] == "oracle-math"
    assert rep["domains"][2]["best_before_final"] is None and rep["domains"][2]["forgetting_max"] is None
    merge = rep["consolidated"][0]
    assert merge["checkpoint"] == "merge" and merge["average_accuracy"] == pytest.approx(2 / 3)
    assert merge["backward_transfer"] == pytest.approx(0.125)
    along = {a["suite"]: a for a in rep["along_chain"]}
    assert along["math/id"]["peak_at"] == "s2" and along["math/id"]["peak_drop"] == pytest.approx(0.75)
    code, out, _ = cli("forgetting", "--run", str(run))
    assert code == 0 and "Chaudhry" in out and "first-minus-last" in out and "merge" in out


def test_forgetting_bad_inputs(tmp_path, cli):
    run = _run(tmp_path)
    code, _, err = cli("forgetting", "--run", str(run), "--chain", "s22")
    assert code == 1 and "did you mean 's2'" in err and "Traceback" not in err
    code, _, err = cli("forgetting", "--run", str(run), "--suite-of", "math=math/idd")
    assert code == 1 and "did you mean 'math/id'" in err
    code, _, err = cli("forgetting", "--run", str(run), "--suite-of", "math")
    assert code == 1 and "DOMAIN=SUITE" in err
    code, _, err = cli("forgetting", "--run", str(run), "--settings", "nosuchid")
    assert code == 1 and "no capability matrix with settings id 'nosuchid'" in err
    (run / "results.h5").unlink()
    for verb in ("forgetting", "compare"):  # one helper (results.capability.open_matrix) says it for both
        code, _, err = cli(verb, "--run", str(run))
        assert code == 1 and f"no results.h5 in {run}; run `aclarena-diag eval --run {run}` first" in err, err


def test_chain_of_a_shorter_branch_and_several_chains(tmp_path, cli):
    run = _run(tmp_path)
    from aclarena.store import load_manifest

    m = load_manifest(run)
    m.add(CheckpointSpec("alt", "ck/alt", kind="stage", domain="ecom", parent="s1"))
    write_manifest(m, run)
    assert len(stage_chains(m)) == 2
    code, _, err = cli("forgetting", "--run", str(run))
    assert code == 1 and "several chains" in err and "--chain" in err
    code, out, err = cli("forgetting", "--run", str(run), "--chain", "s2", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["chain"] == ["base", "s1", "s2"] and rep["summary"]["backward_transfer"] == pytest.approx(0.5)
    code, out, _ = cli("forgetting", "--run", str(run), "--chain", "alt", "--json")
    rep = json.loads(out)
    assert any("not evaluated" in n for n in rep["notes"])  # ecom/id was never scored


def test_error_cells_show_in_the_matrix_and_notes(tmp_path):
    run = _run(tmp_path)
    write_cells(run, [error_payload(checkpoint="s3", suite="math/id", domain="math", role="id", source="arena",
                                    settings={"n": 4}, error="CheckpointError: weights are truncated\nmore")])
    from aclarena.store import load_manifest

    with ResultsStore(run).reader() as r:
        m = load_matrix(r)
        assert not m.get("s3", "math/id").ok and m.get("s3", "math/id").error == "CheckpointError: weights are truncated"
        d = chain_data(m, load_manifest(run), r)
    assert np.isnan(d.R[2, 0])
    assert any("s3 on math/id: error: CheckpointError" in n for n in d.notes)


# --- lm-evaluation-harness import ---------------------------------------------------------------


def test_read_lm_eval_results_and_samples():
    res = {r.task: r for r in read_results(next((DATA / "seq-math").glob("results_*.json")))}
    assert set(res) == {"gsm8k", "nq_open", "mmlu", "ifeval"}
    assert res["gsm8k"].metric == "exact_match,strict-match" and res["gsm8k"].value == 0.5
    assert res["gsm8k"].stderr == pytest.approx(0.0137)
    assert res["gsm8k"].item_ids == [str(i) for i in range(6)]
    assert res["gsm8k"].item_scores.tolist() == [1, 1, 0, 1, 0, 0]  # the strict-match lines only
    assert res["ifeval"].metric == "prompt_level_strict_acc,none"
    assert res["mmlu"].metric == "acc,none" and res["mmlu"].item_scores is None
    assert res["nq_open"].metric == "exact_match,remove_whitespace"
    flex = read_results(next((DATA / "seq-math").glob("results_*.json")), metric={"gsm8k": "exact_match,flexible-extract"})
    assert next(r for r in flex if r.task == "gsm8k").item_scores.tolist() == [1, 1, 1, 1, 0, 0]


def test_lm_eval_versions_are_named_for_what_they_hold_and_old_stores_read_back(tmp_path):
    """The imported cell held the *task* version under `lm_eval_version` (issue 15): now `lm_eval_task_version`,
    beside the harness version; a cell written with the old name reads back the same task version."""
    import json

    from aclarena.results.capability import encode
    from aclarena.results.lm_eval import import_info, import_payloads
    from aclarena.store import ResultsStore

    path = next((DATA / "seq-math").glob("results_*.json"))
    doc = json.loads(path.read_text())
    payloads = {cell.suite: encode(cell)[1] for cell in import_payloads("seq-math", path)}
    attrs = payloads["lm-eval/gsm8k"]
    assert "lm_eval_version" not in attrs
    assert json.loads(attrs["lm_eval_task_version"]) == doc["versions"]["gsm8k"]
    assert attrs["lm_eval_harness_version"] == doc["lm_eval_version"] == "0.4.8"
    assert doc["versions"]["gsm8k"] != doc["lm_eval_version"]  # the two were conflated before
    new = import_info(attrs)
    assert (new["task_version"], new["harness_version"]) == (doc["versions"]["gsm8k"], "0.4.8")
    # a store written before the rename: the old attribute held the task version
    old = {k: v for k, v in attrs.items() if not k.startswith("lm_eval_") or k == "lm_eval_task"}
    old["lm_eval_version"] = json.dumps(doc["versions"]["gsm8k"])
    store = ResultsStore(tmp_path)
    store.write("capability/old-cell", {"x": np.arange(2)}, result_type="t", attrs=old)
    back = import_info(store.attrs("capability/old-cell"))
    assert back["task_version"] == doc["versions"]["gsm8k"] and back["harness_version"] == ""
    assert back["task"] == "gsm8k" and back["metric"] == new["metric"]


def test_choose_metric_and_tags():
    assert choose_metric("t", {"acc,none": 0.3, "acc_norm,none": 0.4, "alias": "t"}) == "acc,none"
    assert choose_metric("t", {"acc,none": 0.3, "acc_norm,none": 0.4}, "acc_norm") == "acc_norm,none"
    assert choose_metric("t", {"bleu,none": 3.0, "bleu_stderr,none": 0.1}) == "bleu,none"
    assert choose_metric("t", {"alias": "t", "sample_len": 3}) is None
    assert parse_tag("aime24=math/id") == ("aime24", ("math", "id"))
    assert parse_tag("mmlu_redux=general") == ("mmlu_redux", ("general", "general"))
    assert parse_tag("bfcl=ecom") == ("bfcl", ("ecom", "id"))


def _import_run(tmp_path):
    run = _run(tmp_path)
    # a store with only lm-eval cells: forget the arena cells
    (run / "results.h5").unlink()
    from aclarena.store import load_manifest

    m = load_manifest(run)
    return run, m


def test_import_cli_then_forgetting(tmp_path, cli):
    run, _ = _import_run(tmp_path)
    math_file = next((DATA / "seq-math").glob("results_*.json"))
    search_file = next((DATA / "seq-search").glob("results_*.json"))
    tags = ["--lm-eval-task", "gsm8k=math/id", "--lm-eval-task", "nq_open=search/id", "--lm-eval-task", "mmlu=general"]
    code, out, err = cli("eval", "--run", str(run), "--import-lm-eval", f"s1={math_file}",
                         "--import-lm-eval", f"s2={search_file}", *tags, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["imported"] == 8
    with ResultsStore(run).reader() as r:
        m = load_matrix(r)
        assert set(m.suites) == {"lm-eval/gsm8k", "lm-eval/nq_open", "lm-eval/mmlu", "lm-eval/ifeval"}
        c = m.get("s1", "lm-eval/gsm8k")
        assert c.mean == 0.5 and c.source == "lm-eval" and (c.domain, c.role) == ("math", "id") and c.n_items == 6
        assert m.get("s2", "lm-eval/mmlu").role == "general" and m.get("s2", "lm-eval/ifeval").role == "other"
        a = r.attrs(c.key)
        assert a["metric"] == "exact_match,strict-match" and a["stderr"] == pytest.approx(0.0137)
    # importing again changes nothing
    code, out, _ = cli("eval", "--run", str(run), "--import-lm-eval", f"s1={math_file}", *tags, "--json")
    assert code == 0 and json.loads(out)["imported"] == 0
    # the chain base -> s1 -> s2 -> s3: s3 and base have no scores; use the --chain s2 prefix
    code, out, err = cli("forgetting", "--run", str(run), "--chain", "s2", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["suites"] == ["lm-eval/gsm8k", "lm-eval/nq_open"]
    assert rep["summary"]["backward_transfer"] == pytest.approx(0.3333 - 0.5)
    assert rep["summary"]["sample_forgetting"] == pytest.approx(1 / 6)  # doc 1 went correct -> wrong


@pytest.mark.parametrize("content, fragment", [
    ("not json at all", "not JSON"),
    ("[1, 2]", 'no "results" object'),
    ('{"results": {}}', '"results" is empty'),
    ('{"results": {"gsm8k": 0.5}}', "are not an object"),
    ('{"results": {"gsm8k": {"alias": "gsm8k", "sample_len": 10}}}', "no numeric metric"),
    ('{"scores": {"gsm8k": 0.5}}', 'no "results" object'),
])
def test_import_unknown_shape_is_one_line(tmp_path, cli, content, fragment):
    run, _ = _import_run(tmp_path)
    bad = tmp_path / "results_bad.json"
    bad.write_text(content)
    code, out, err = cli("eval", "--run", str(run), "--import-lm-eval", f"s1={bad}")
    assert code == 1
    assert fragment in err and "lm-evaluation-harness" in err and len(err.strip().splitlines()) == 1


def test_import_bad_arguments(tmp_path, cli):
    run, _ = _import_run(tmp_path)
    f = next((DATA / "seq-math").glob("results_*.json"))
    code, _, err = cli("eval", "--run", str(run), "--import-lm-eval", f"s11={f}")
    assert code == 1 and "did you mean 's1'" in err
    code, _, err = cli("eval", "--run", str(run), "--import-lm-eval", str(f))
    assert code == 1 and "NAME=FILE" in err
    code, _, err = cli("eval", "--run", str(run), "--import-lm-eval", f"s1={f}", "--lm-eval-task", "gsm8kk=math/id")
    assert code == 1 and "did you mean 'gsm8k'" in err
    code, _, err = cli("eval", "--run", str(run), "--import-lm-eval", f"s1={f}", "--lm-eval-metric", "gsm8k=bleu")
    assert code == 1 and "no metric 'bleu'" in err
    code, _, err = cli("eval", "--run", str(run), "--import-lm-eval", f"s1={tmp_path / 'missing.json'}")
    assert code == 1 and "cannot read" in err
    code, _, err = cli("eval", "--run", str(run), "--lm-eval-task", "gsm8k=math")
    assert code == 1 and "--import-lm-eval" in err


def test_samples_file_with_a_broken_line(tmp_path, cli):
    run, _ = _import_run(tmp_path)
    folder = tmp_path / "lm"
    shutil.copytree(DATA / "seq-math", folder)
    sample = next(folder.glob("samples_*.jsonl"))
    sample.write_text(sample.read_text() + '{"doc_id": 7, "exact_ma')
    code, _, err = cli("eval", "--run", str(run), "--import-lm-eval", f"s1={next(folder.glob('results_*.json'))}")
    assert code == 1 and "not JSON" in err and "complete" in err


def test_at_chance_reads_the_interval_against_the_guessing_score():
    assert at_chance([0.17, 0.34], 0.25) is True
    assert at_chance([0.25, 0.40], 0.25) is True  # the bound itself counts: not distinguishable
    assert at_chance([0.30, 0.48], 0.25) is False
    assert at_chance([0.0, 0.04], 0.25) is False  # below chance is a measured (format) failure, not a guess
    assert at_chance([0.17, 0.34], 0.0) is None and at_chance(None, 0.25) is None


def test_forgetting_names_a_general_score_at_chance(tmp_path, cli):
    run = _run(tmp_path)
    settings = {"n": 4, "seeds": [0]}
    items = []
    # 40 four-option questions: base guesses (10 right), s1 lost the format (0), s2 knows (30)
    for ck, right in (("base", 10), ("s1", 0), ("s2", 30), ("s3", 0)):
        outcomes = np.array([[1.0] * right + [0.0] * (40 - right)])
        items.append(cell_payload(checkpoint=ck, suite="general", domain="general", role="general", source="arena",
                                  settings=settings, greedy=outcomes, item_ids=[f"general-{i}" for i in range(40)]))
    write_cells(run, items, overwrite=False)
    code, out, err = cli("forgetting", "--run", str(run), "--json")
    assert code == 0, err
    rep = json.loads(out)
    along = {a["suite"]: a for a in rep["along_chain"]}
    assert along["general"]["at_chance"] == ["base"] and along["math/id"]["at_chance"] == []
    assert along["general"]["peak_at"] == "s2"  # a score above chance is read as before
    assert any(n.startswith("general is at chance (0.25") and "on base:" in n for n in rep["notes"])
    code, out, err = cli("forgetting", "--run", str(run))
    assert code == 0 and "note: general is at chance" in out


# --- a whole cell (the typed payload) -------------------------------------------------------------

ARCHIVED_CELLS = Path(__file__).resolve().parents[1] / "data" / "archives" / "results" / "capability-cell-0.1.0"


def test_a_whole_cell_holds_what_the_matrix_and_the_items_read(tmp_path):
    from aclarena.results.capability import read_cell

    run = tmp_path / "run"
    shutil.copytree(ARCHIVED_CELLS, run)
    with ResultsStore(run).reader() as r:
        cells = read_cells(r)
        whole = {c.key: read_cell(r, c.key) for c in cells}
        for c in cells:
            w = whole[c.key]
            assert (w.checkpoint, w.suite, w.status, w.n_items, w.n_seeds, w.samples) == (
                c.checkpoint, c.suite, c.status, c.n_items, c.n_seeds, c.samples)
            got = read_items(r, c)
            if got is None:
                assert w.greedy is None
            else:
                assert got[0] == w.item_ids and np.array_equal(got[1], w.greedy)
    kinds = {(w.source, w.status, w.sampled is not None) for w in whole.values()}
    assert kinds == {("arena", "ok", True), ("arena", "error", False), ("lm-eval", "ok", False)}
    sampled = next(w for w in whole.values() if w.sampled is not None)
    assert sampled.sampled.shape == (2, 2, 2) and sampled.avg_k_mean == pytest.approx(float(sampled.sampled.mean()))
    imported = next(w for w in whole.values() if w.source == "lm-eval" and w.greedy is not None)
    assert imported.extra["lm_eval_task"] == "gsm8k" and imported.domain == "math" and imported.role == "id"


@pytest.mark.parametrize("damage,what", [
    ("greedy", "greedy is not seeds x items"),
    ("role", "role is not one of"),
    ("settings", "the settings attribute is not a JSON object"),
])
def test_a_cell_that_does_not_fit_its_layout_is_one_line(tmp_path, damage, what):
    import h5py

    from aclarena.errors import StoreError
    from aclarena.results.capability import read_cell

    run = tmp_path / "run"
    shutil.copytree(ARCHIVED_CELLS, run)
    with ResultsStore(run).reader() as r:
        key = next(c.key for c in read_cells(r) if c.ok and c.source == "arena")
    with h5py.File(run / "results.h5", "r+") as f:
        g = f[key]
        if damage == "greedy":
            flat, enc = g["greedy"][()].reshape(-1), dict(g["greedy"].attrs)
            del g["greedy"]
            g.create_dataset("greedy", data=flat)
            g["greedy"].attrs.update(enc)
        elif damage == "role":
            g.attrs["role"] = "favourite"
        else:
            g.attrs["settings"] = "[1]"
    with ResultsStore(run).reader() as r, pytest.raises(StoreError) as e:
        read_cell(r, key)
    line = str(e.value)
    assert "\n" not in line and f"{run / 'results.h5'}:{key} is damaged" in line and what in line
