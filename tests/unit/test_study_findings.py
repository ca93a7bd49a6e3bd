"""The study's findings rows from per-seed measurements (pure), and their strict-JSON file."""

from __future__ import annotations

import json
import math

import pytest

from aclarena.analysis.study import StudyResult, findings, mean_spread, write_findings


def test_mean_spread_is_the_sample_std_over_finite_values():
    m, s = mean_spread([0.2, None, 0.4, float("nan")])
    assert m == pytest.approx(0.3) and s == pytest.approx(math.sqrt(0.02))
    assert mean_spread([0.5]) == (0.5, None)
    assert mean_spread([None]) == (None, None)


def test_findings_rows_pair_each_seed_with_its_own_checkpoints():
    stages = ["math", "search", "ecom", "if"]
    cells = {("seq-search", "math/id"): 0.5, ("seq-ecom", "math/id"): 0.1,
             ("seq-search-s1", "math/id"): 0.7, ("seq-ecom-s1", "math/id"): 0.3,
             ("seq-search", "search/id"): 0.4, ("seq-ecom", "search/id"): 0.2,
             ("seq-math", "math/id"): 0.6, ("oracle-math", "math/id"): 0.6, ("oracle-math-s1", "math/id"): 0.8}
    updates = [{"checkpoint": "seq-math-sft", "kind": "stage", "norm": 30.0},
               {"checkpoint": "seq-math", "kind": "stage", "norm": 6.0},
               {"checkpoint": "seq-math-sft-s1", "kind": "stage", "norm": 20.0},
               {"checkpoint": "seq-math-s1", "kind": "stage", "norm": 5.0},
               {"checkpoint": "seq-search-sft", "kind": "stage", "norm": 4.0},
               {"checkpoint": "seq-search", "kind": "stage", "norm": 0.0},  # GRPO without reward: no update
               {"checkpoint": "oracle-math-sft", "kind": "oracle", "norm": 99.0}]
    drift = {0: {"kl_share_high": 0.09, "barely_moved_low": 0.23}, 1: {"kl_share_high": 0.11, "barely_moved_low": None}}
    rows = findings([0, 1], stages, cells, updates, drift)
    by = {r["quantity"]: r for r in rows}
    before = by["math/id before the ecom stage (seq-search)"]
    after = by["math/id after the ecom stage (seq-ecom)"]
    assert before["values"] == [0.5, 0.7] and before["mean"] == pytest.approx(0.6)
    assert after["values"] == [0.1, 0.3] and after["spread"] == pytest.approx(math.sqrt(0.02))
    assert after["study"] == "AIME 23.3 -> 6.0" and before["study"] is None
    assert by["search/id after the ecom stage (seq-ecom)"]["values"] == [0.2, None]
    ratio = by["math: ||dθ|| SFT / ||dθ|| RL"]
    assert ratio["values"] == [5.0, 4.0] and ratio["mean"] == pytest.approx(4.5)
    assert by["search: ||dθ|| SFT / ||dθ|| RL"]["values"] == [None, None]  # undefined, not infinite
    share = next(r for r in rows if r["quantity"].startswith("share of KL"))
    assert share["values"] == [0.09, 0.11] and share["mean"] == pytest.approx(0.10)
    barely = next(r for r in rows if r["quantity"].startswith("low-entropy"))
    assert barely["values"] == [0.23, None] and barely["spread"] is None
    assert by["math/id of its oracle (oracle-math)"]["values"] == [0.6, 0.8]


def test_findings_json_is_strict(tmp_path):
    rows = findings([0, 1], ["math"], {("seq-math", "math/id"): float("nan")}, [], {})
    path = write_findings(StudyResult(out=tmp_path, seeds=[0, 1], rows=rows, part_times={"train": 1.0}),
                          command="aclarena-diag study --seeds 2")
    text = path.read_text()
    assert "NaN" not in text
    data = json.loads(text)
    df = StudyResult(out=tmp_path, seeds=[0, 1], rows=rows, part_times={}).to_pandas()
    assert list(df["quantity"]) == [r["quantity"] for r in rows]
    assert data["made_by"]["command"] == "aclarena-diag study --seeds 2"
    assert data["rows"][0]["values"] == [None, None]
