"""`aclarena-diag signatures` on the fixture run: every update signed on its parent's generations, stored,
read back on a rerun, in the Python API, and the bad inputs of issue 31 refused in one line."""

import json
import shutil

import pytest
from conftest import run_cli
from tokens_helpers import PROMPTS, write_jsonl

from aclarena.results.signatures import MEASURES, list_signatures
from aclarena.store import ResultsStore
from aclarena.store.manifest import CheckpointSpec, load_manifest, write_manifest

ARGS = ("-n", "10", "--max-new-tokens", "16", "--n-boot", "200", "--json")


@pytest.fixture(scope="module")
def signed(_run_template, tmp_path_factory):
    run = tmp_path_factory.mktemp("signed") / "run"
    shutil.copytree(_run_template, run)
    code, out, err = run_cli("signatures", "--run", str(run), *ARGS)
    assert code == 0, err
    return run, json.loads(out)


def test_every_update_is_signed_on_its_parents_generations(signed):
    run, data = signed
    got = {(r["update"], r["kind"], r["parent"], r["domain"], r["probe"]) for r in data["updates"]}
    # fixture: base -> seq-math (rl) -> seq-search (sft) -> lora-ecom (consolidated, ecom); oracles only on request
    assert got == {("seq-math", "rl", "base", "math", "base.math"),
                   ("seq-search", "sft", "seq-math", "search", "seq-math.search"),
                   ("lora-ecom", "consolidation", "seq-search", "ecom", "seq-search.ecom")}
    for r in data["updates"]:
        assert r["n_sequences"] >= 8 and r["status"] == "computed"
        for m in MEASURES:
            assert r[f"{m}_low"] <= r[m] <= r[f"{m}_high"], (r["update"], m)
        assert 0 < r["high_share"] < 0.2 and 0 < r["first_k_share"] <= 1
    with ResultsStore(run).reader() as rd:
        stored = {s.update: s for s in list_signatures(rd)}
        probes = set(rd.keys("probes"))
    assert {"base.math", "seq-math.search", "seq-search.ecom"} <= probes
    row = next(r for r in data["updates"] if r["update"] == "seq-math")
    assert stored["seq-math"].values["kl_share_high"] == row["kl_share_high"]
    assert stored["seq-math"].settings["first_k"] == 12


def test_rerun_reads_back_and_the_python_api_agrees(signed, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(signed[0], run)
    code, out, err = run_cli("signatures", "--run", str(run), *ARGS)
    assert code == 0, err
    again = json.loads(out)["updates"]
    assert {r["status"] for r in again} == {"cached"}
    first = {r["update"]: r for r in signed[1]["updates"]}
    assert all(r["kl_share_high"] == first[r["update"]]["kl_share_high"] for r in again)
    import aclarena as acl

    df = acl.Run(run).signatures(updates="seq-search", n=10, max_new_tokens=16, n_boot=200).to_pandas()
    assert list(df["update"]) == ["seq-search"] and df["concentration_area"][0] == first["seq-search"]["concentration_area"]
    code, out, err = run_cli("signatures", "--run", str(run), "--updates", "seq-search", "--first-k", "1", *ARGS)
    assert code == 0, err
    k1 = json.loads(out)["updates"][0]
    assert k1["status"] == "computed" and k1["first_k_share"] < first["seq-search"]["first_k_share"]


def test_named_pairs_and_bad_input(signed, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(signed[0], run)
    code, out, err = run_cli("signatures", "--run", str(run), "--updates", "base..seq-search", *ARGS)
    assert code == 0, err
    (r,) = json.loads(out)["updates"]
    assert (r["kind"], r["parent"], r["probe"]) == ("update", "base", "base.search")  # spans two stages
    code, _, err = run_cli("signatures", "--run", str(run), "--updates", "base", *ARGS)
    assert code == 1 and "has no parent" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("signatures", "--run", str(run), "--updates", "seq-search..seq-math", *ARGS)
    assert code == 1 and "does not descend" in err
    m = load_manifest(run)
    m.add(CheckpointSpec("seq-legal", "checkpoints/seq-search", kind="stage", domain="legal", phase="sft",
                         parent="seq-search"))
    write_manifest(m, run)
    code, _, err = run_cli("signatures", "--run", str(run), "--updates", "seq-legal", *ARGS)
    assert code == 1 and "no generations of domain 'legal'" in err and "--name seq-search.legal" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_too_few_sequences_is_one_line_and_nothing_else_is_lost(signed, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(signed[0], run)
    write_jsonl(run / "few.jsonl", PROMPTS[:3])
    code, _, err = run_cli("probe", "--run", str(run), "--ref", "seq-math", "--prompts", str(run / "few.jsonl"),
                           "--name", "seq-math.if", "--max-new-tokens", "8", "--json")
    assert code == 0, err
    m = load_manifest(run)
    m.add(CheckpointSpec("seq-if", "checkpoints/seq-search", kind="stage", domain="if", phase="rl", parent="seq-math"))
    write_manifest(m, run)
    code, out, err = run_cli("signatures", "--run", str(run), "--updates", "seq-if,oracle-math", *ARGS)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "seq-if on if (seq-math.if): 3 sequences with scored positions; an interval needs at least 8" in err
    with ResultsStore(run).reader() as rd:  # the update that could be signed was written
        assert "oracle-math" in {s.update for s in list_signatures(rd)}
    # the demo's and the study's way: the others kept, the one without a signature named, nothing raised
    from aclarena.analysis.signatures import signatures

    res = signatures(run, updates="seq-if,oracle-math", n=10, max_new_tokens=16, n_boot=200, strict=False)
    assert [r["update"] for r in res.rows] == ["oracle-math"]
    assert res.failed == ("seq-if on if (seq-math.if): 3 sequences with scored positions; an interval needs at "
                          "least 8",)
    assert res.to_dict()["failed"] == list(res.failed)


def test_tokens_page_shows_sft_and_rl_side_by_side(signed):
    from aclarena.dashboard.pages import tokens as page

    run, data = signed
    fig, table, note = page.on_signatures(run, ["sft", "rl"])
    bars = [t for t in fig.data if t.type == "bar"]
    assert {t.name for t in bars} == {"SFT", "RL"} and len(bars) == 8  # two kinds x four panels
    assert all(t.orientation == "h" for t in bars)  # labels on one shared axis, grouped by kind
    rl = next(t for t in bars if t.name == "RL" and t.xaxis == "x")
    want = next(r for r in data["updates"] if r["update"] == "seq-math")
    assert [list(level) for level in rl.y] == [["RL"], ["seq-math (math)"]] and rl.x[0] == want["kl_share_high"]
    assert rl.error_x.array[0] == pytest.approx(want["kl_share_high_high"] - want["kl_share_high"])
    rows = table.children[1:]
    # grouped SFT then RL (seq-search is this fixture's SFT update, seq-math its RL one)
    assert [r.children[0].children for r in rows] == ["seq-search", "seq-math"] and note == "2 of 3 signed updates shown"
    fig, table, note = page.on_signatures(run, ["stage"])
    assert fig == {} and "none of the kinds ticked" in note


def test_domain_prompts_come_from_the_runs_own_suites_first(signed, tmp_path):
    """Issue 49: a stage of domain `math` was probed on the mini arena's math prompts though the manifest had its
    own `math` suites; the run's suites come first (in-domain ones), and a note names the source."""
    from aclarena.results.probes import read_probe_set
    from aclarena.store.manifest import SuiteSpec

    assert "probe set base.math: base's generations on prompts from the mini arena's math/id tasks" in signed[1]["notes"]
    run = tmp_path / "run"
    shutil.copytree(signed[0], run, ignore=shutil.ignore_patterns("results.h5"))
    (run / "tasks").mkdir()
    write_jsonl(run / "tasks" / "arith.jsonl", [{"prompt": f"what is {a} plus {a + 1}", "answer": str(2 * a + 1)}
                                                for a in range(12)])
    write_jsonl(run / "tasks" / "far.jsonl", [{"prompt": f"far question {a}", "answer": "x"} for a in range(12)])
    m = load_manifest(run)
    m.suites["arith"] = SuiteSpec("arith", "tasks/arith.jsonl", domain="math", role="id", scorer="numeric")
    m.suites["far"] = SuiteSpec("far", "tasks/far.jsonl", domain="math", role="ood", scorer="exact")
    write_manifest(m, run)
    code, out, err = run_cli("signatures", "--run", str(run), "--updates", "seq-math", *ARGS)
    assert code == 0, err
    data = json.loads(out)
    assert data["notes"] == ["probe set base.math: base's generations on prompts from the run's suite arith (domain math)"]
    probe = read_probe_set(ResultsStore(run), "base.math")
    assert probe.settings["prompt_source"] == "the run's suite arith (domain math)"
    assert probe.n_sequences == 10 and all("plus" in t for t in probe.texts)
    code, out, err = run_cli("signatures", "--run", str(run), "--updates", "seq-math", *ARGS[:-1], "--force")
    assert code == 0, err  # the table's own output: the stored probe set is reused, so no note
    assert "note:" not in out
