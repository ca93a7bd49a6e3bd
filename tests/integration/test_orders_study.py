"""`aclarena-diag study --orders` end to end at toy size: a shared prefix is trained once, a second design
in the same folder trains only its new stages, the budget refuses a design without --yes, orders.json is
strict JSON with a value per seed, the per-pair diagnostics are measured, and a three-stage order's pairwise
prediction reads the pairs another design trained."""

from __future__ import annotations

import json
import math

import pytest
from train_helpers import small_config

pytestmark = pytest.mark.slow


def _trained(out):
    """Phase folders with a completion marker (every phase trained in the run folder)."""
    from aclarena.train.phase_record import read_marker

    return {p.name for p in (out / "checkpoints").iterdir() if read_marker(p) is not None and p.name != "base"}


@pytest.mark.timeout(1800)
def test_orders_share_prefixes_and_report(tmp_path, cli):
    cfg = tmp_path / "small.toml"
    cfg.write_text(small_config(("math", "search", "if"), rl_steps=1))
    out = tmp_path / "orders"
    code, stdout, err = cli("study", "--orders", "math,search;math,if", "--config", str(cfg), "--run", str(out),
                            "--seeds", "1", "-n", "2", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    # math is trained once for both orders: 3 stages of 2 phases, not 4
    assert _trained(out) == {"ord-math-sft", "ord-math", "ord-math-search-sft", "ord-math-search",
                             "ord-math-if-sft", "ord-math-if"}
    assert data["plan"]["stages"] == 3 and data["plan"]["unshared_stages"] == 4
    assert data["plan"]["shared"] == [{"prefix": ["math"], "orders": [["math", "search"], ["math", "if"]]}]
    on_disk = json.loads((out / "orders.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert on_disk["findings"] == data["findings"] and on_disk["made_by"]["command"].startswith(
        "aclarena-diag study --orders 'math,search;math,if'")
    assert set(data["cells"]) == {"base", "ord-math", "ord-math-search", "ord-math-if"}
    assert all(len(v) == 1 and 0 <= v[0] <= 1 for c in data["cells"].values() for v in c.values())
    assert {(r["first"], r["second"]) for r in data["findings"]["matrix"]["pairs"]} == {("math", "search"),
                                                                                      ("math", "if")}
    # per ordered pair: the cosine of the two stage updates, b's SFT/RL ratio and its drift signature
    for row in data["pairs"]:
        assert -1 <= row["cos"][0] <= 1 and row["sft_rl"][0] > 0 and 0 <= row["kl_share_high"][0] <= 1
        assert row["p_drop"][0] is not None and 0 <= row["p_drop"][0] <= 1
    assert all(f["status"].startswith("too few pairs (2 < 4)") for f in data["predictors"]["features"].values())
    assert data["errors"] == {}
    # a second design into the same folder: only its new stages are left to train
    code, stdout, err = cli("study", "--orders", "pairs", "--config", str(cfg), "--run", str(out), "--seeds", "1",
                            "--dry-run", "--json")
    assert code == 0, err
    dry = json.loads(stdout)
    assert dry["stages"] == 9 and dry["todo_stages"] == 6 and dry["todo_steps"] == 6 * (3 + 1)
    # over the budget: one line with the number of stages, nothing trained
    before = _trained(out)
    code, _, err = cli("study", "--orders", "pairs", "--config", str(cfg), "--run", str(out), "--seeds", "1",
                       "--max-stages", "5")
    assert code == 1 and err.strip().count("\n") == 0
    assert "would train 6 stages (24 training steps), over the budget of 5" in err and "--yes" in err
    assert _trained(out) == before
    # a rerun of the first design trains nothing and gives the same accuracies
    code, stdout, err = cli("study", "--orders", "math,search;math,if", "--config", str(cfg), "--run", str(out),
                            "--seeds", "1", "-n", "2", "--json", "--no-diagnostics")
    assert code == 0, err
    again = json.loads(stdout)
    assert again["cells"] == data["cells"] and again["pairs"] == []
    bwt = [r["bwt"]["values"][0] for r in again["findings"]["orders"]["orders"]]
    assert all(v is not None and math.isfinite(v) for v in bwt)

    # a three-stage order's pairwise prediction needs (math, if) and (search, if), which it does not train: it
    # reads them where another design trained them into the folder, and says what is missing until then
    three_stages = ("study", "--orders", "math,search,if", "--config", str(cfg), "--run", str(out), "--seeds", "1",
                    "-n", "2", "--json", "--no-diagnostics")
    code, stdout, err = cli(*three_stages)
    assert code == 0, err
    pp = json.loads(stdout)["findings"]["pairwise_prediction"]
    assert pp["orders"][0]["predicted_bwt"]["values"] == [None] and "train --orders pairs" in pp["reason"]
    code, _, err = cli("study", "--orders", "search,if", "--config", str(cfg), "--run", str(out), "--seeds", "1",
                       "-n", "2", "--no-diagnostics")
    assert code == 0, err
    code, stdout, err = cli(*three_stages)
    assert code == 0, err
    three = json.loads(stdout)
    assert {"ord-math-if", "ord-search-if", "ord-math-search-if"} <= set(three["cells"])
    pred = three["findings"]["pairwise_prediction"]["orders"][0]["predicted_bwt"]["values"][0]
    c = three["cells"]
    inter = [c[f"ord-{a}"][a][0] - c[f"ord-{a}-{b}"][a][0] for a, b in (("math", "search"), ("math", "if"),
                                                                         ("search", "if"))]
    assert pred == pytest.approx(-sum(inter) / 2)
