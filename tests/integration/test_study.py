"""`aclarena-diag study` end to end on the tiny curriculum with 2 seeds: findings.json (strict JSON)
with a value per seed, mean and spread; a rerun resumes (trains nothing) and gives the same findings."""

from __future__ import annotations

import json

import pytest
from train_helpers import TINY, marker_mtimes

pytestmark = pytest.mark.slow


@pytest.mark.timeout(3600)  # two tiny curricula and their evaluation: minutes on a loaded 2-core machine
def test_study_two_seeds_end_to_end(tmp_path, cli):
    out = tmp_path / "study"
    code, stdout, err = cli("study", "--run", str(out), "--seeds", "2", "--config", str(TINY), "-n", "3", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    on_disk = json.loads((out / "findings.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert on_disk["rows"] == data["rows"] and on_disk["seeds"] == [0, 1]
    assert set(data["part_times"]) == {"train", "eval", "tokens", "displacement"}
    assert all(t > 0 for t in data["part_times"].values())
    assert data["errors"] == {}
    names = {p.name for p in (out / "checkpoints").iterdir()}
    assert {"seq-if", "seq-if-s1", "oracle-search-s1"} <= names
    by = {r["quantity"]: r for r in data["rows"]}
    ecom = by["math/id after the ecom stage (seq-ecom)"]
    assert len(ecom["values"]) == 2 and all(v is not None and 0 <= v <= 1 for v in ecom["values"])
    ratio = by["math: ||dθ|| SFT / ||dθ|| RL"]
    assert all(v is not None and v > 0 for v in ratio["values"])
    assert ratio["mean"] == pytest.approx(sum(ratio["values"]) / 2)
    assert ratio["spread"] == pytest.approx(abs(ratio["values"][0] - ratio["values"][1]) / 2 ** 0.5)
    share = next(r for r in data["rows"] if r["quantity"].startswith("share of KL"))
    assert all(v is not None and 0 <= v <= 1 for v in share["values"])
    assert on_disk["made_by"]["command"] == f"aclarena-diag study --run {out} --seeds 2 -n 3"
    # a rerun trains nothing and finds the same
    before = marker_mtimes(out)
    code, stdout, err = cli("study", "--run", str(out), "--seeds", "2", "--config", str(TINY), "-n", "3", "--json")
    assert code == 0, err
    assert marker_mtimes(out) == before
    assert json.loads(stdout)["rows"] == data["rows"]
