"""`aclarena-diag flips` on the fixture run: a full run through the command line, and bad input
(one line each, exit 1, store unchanged)."""

from __future__ import annotations

import json

import pytest
from flips_helpers import write_cells
from tokens_helpers import file_state

from aclarena.envs import sample_tasks
from aclarena.store import ResultsStore


def test_flips_verb_runs_stores_and_reads_back(fixture_run, cli):
    write_cells(fixture_run)
    argv = ["flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--suite", "math/id",
            "--budgets", "1,10", "--batch-size", "4"]
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    res = json.loads(out)
    ids = [t.id for t in sample_tasks("math/id", 4, seed=0)]
    assert (res["n_items"], res["n_forgot"], res["n_gained"]) == (4, 1, 1)
    assert [(i["item_id"], i["direction"]) for i in res["items"]] == [(ids[0], "forgot"), (ids[2], "gained")]
    assert res["relation"] == "seq-search descends from seq-math"
    # tiny random models solve nothing: the replays do not reproduce the matrix's 1s, so nothing is swapped
    assert [i["reproduced"] for i in res["items"]] == [False, False]
    assert res["forward"] is None and res["cached"] is False
    assert all(i["n_positions"] > 0 for i in res["items"])
    store = ResultsStore(fixture_run)
    assert store.has("flips/seq-math/seq-search/math-id")
    assert store.attrs("flips/seq-math/seq-search/math-id")["result-version"] == "0.1.0"
    before = file_state(fixture_run / "results.h5")
    code, out, err = cli(*argv)  # same settings: read back, store untouched
    assert code == 0, err
    assert "(stored result)" in out and "nothing to swap" in out
    assert file_state(fixture_run / "results.h5") == before
    write_cells(fixture_run)  # the matrix was evaluated again: the stored result no longer applies
    code, out, err = cli(*argv)
    assert code == 0, err
    assert "(stored result)" not in out and "seq-math -> seq-search on math/id: 1 forgotten" in out


def test_pairs_that_are_not_ancestor_and_descendant_are_compared_and_said_so(fixture_run, cli):
    write_cells(fixture_run, {"seq-math": [1, 0, 0, 0], "oracle-math": [0, 0, 0, 0]})
    code, out, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "oracle-math",
                         "--suite", "math/id", "--no-swap", "--json")
    assert code == 0, err
    assert json.loads(out)["relation"] == "seq-math and oracle-math are not ancestor and descendant (compared all the same)"


@pytest.mark.parametrize("case,argv,needle", [
    ("unknown", ["--from", "seq-maht", "--to", "seq-search"], "did you mean"),
    ("same", ["--from", "seq-math", "--to", "seq-math"], "both 'seq-math'"),
    ("no cell", ["--from", "seq-math", "--to", "seq-search", "--suite", "search/id"], "no capability cell"),
    ("no flips", ["--from", "seq-math", "--to", "oracle-math"], "nothing flipped"),
    ("budgets", ["--from", "seq-math", "--to", "seq-search", "--budgets", "0,5"], "--budgets"),
    ("budgets text", ["--from", "seq-math", "--to", "seq-search", "--budgets", "1,x"], "--budgets"),
    ("top", ["--from", "seq-math", "--to", "seq-search", "--top", "1.5"], "--top"),
])
def test_bad_input_one_line_exit_1(fixture_run, cli, case, argv, needle):
    write_cells(fixture_run)
    before = file_state(fixture_run / "results.h5")
    full = ["flips", "--run", str(fixture_run), *argv]
    if "--suite" not in argv:
        full += ["--suite", "math/id"]
    code, out, err = cli(*full)
    assert code == 1, (case, out, err)
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert file_state(fixture_run / "results.h5") == before


def test_suite_without_per_item_outcomes(fixture_run, cli):
    write_cells(fixture_run, per_item=False)
    code, _, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search",
                       "--suite", "math/id")
    assert code == 1 and "no per-item outcomes" in err and len(err.strip().splitlines()) == 1


def test_non_arena_suite(fixture_run, cli):
    """Imported cells are paired by item, not replayed (issue 32); seq-math [1,1,0,0] -> seq-search [0,1,1,0]."""
    write_cells(fixture_run, source="lm-eval")
    code, out, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search",
                         "--suite", "math/id", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["replayed"] is False and (res["lost"], res["gained"], res["n"]) == (1, 1, 4)


def test_different_tokenizers(fixture_run, cli):
    from fixtures import make_tokenizer
    from tokens_helpers import add_checkpoint

    from aclarena.models.tiny import build_model, tiny_config

    other = make_tokenizer(vocab_size=400)
    add_checkpoint(fixture_run, "other-tok", build_model(tiny_config(other), seed=9), other, parent="seq-math")
    write_cells(fixture_run, {"seq-math": [1, 1, 0, 0], "other-tok": [0, 1, 0, 0]})
    before = file_state(fixture_run / "results.h5")
    code, _, err = cli("flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "other-tok",
                       "--suite", "math/id")
    assert code == 1 and "tokenizers differ" in err and len(err.strip().splitlines()) == 1
    assert file_state(fixture_run / "results.h5") == before


def test_counts_are_totals_and_the_cap_is_stated(fixture_run, cli):
    """Issue 49: `--max-items 4` reported "4 forgotten of 20" where the matrix shows 20 forgotten; the counts
    are the matrix's totals, the number analysed beside them, in the CLI, its JSON, the store and the page."""
    from aclarena.dashboard.pages.flips import on_result

    write_cells(fixture_run, {"seq-math": [1, 1, 1, 0], "seq-search": [0, 0, 0, 1]})
    argv = ["flips", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--suite", "math/id",
            "--max-items", "1", "--no-swap", "--batch-size", "4"]
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    res = json.loads(out)
    assert (res["n_forgot"], res["n_gained"], res["n_forgot_analysed"], res["n_gained_analysed"]) == (3, 1, 1, 1)
    assert res["max_items"] == 1 and len(res["items"]) == 2
    code, out, err = cli(*argv)  # the stored result, read back
    assert code == 0, err
    assert ("seq-math -> seq-search on math/id: 3 forgotten (1 -> 0), 1 gained (0 -> 1) of 4 items; "
            "1 forgotten and 1 gained analysed (--max-items 1 per direction)") in out
    key = "flips/seq-math/seq-search/math-id"
    attrs = ResultsStore(fixture_run).attrs(key)
    assert (int(attrs["n_forgot"]), int(attrs["n_forgot_analysed"])) == (3, 1)
    _, _, lines, _, _ = on_result(fixture_run, key)
    assert "3 forgotten" in lines[0].children and "1 forgotten and 1 gained analysed" in lines[0].children
