"""Chance-adjusted sample-wise forgetting in ``forgetting`` and in the paired flip counts (general: 4 options)."""

from __future__ import annotations

import json

import pytest
from consolidation_helpers import write_cells

from aclarena.diagnostics.cl_metrics import chance_adjusted


def test_forgetting_and_paired_counts_adjust_for_chance(fixture_run, cli):
    # 20 general items: seq-math -> seq-search forgets 6, gains 2, both wrong on 8
    before = [1.0] * 10 + [0.0] * 10
    after = [0.0] * 6 + [1.0] * 4 + [1.0] * 2 + [0.0] * 8
    write_cells(fixture_run, {
        "base": {"math/id": [0, 0, 0, 0], "general": before},
        "seq-math": {"math/id": [1, 1, 0, 0], "search/id": [0, 0, 0, 0], "general": before},
        "seq-search": {"math/id": [1, 0, 0, 0], "search/id": [1, 1, 0, 0], "general": after},
    })
    code, out, err = cli("forgetting", "--run", str(fixture_run), "--json")
    assert code == 0, err
    general = next(s for s in json.loads(out)["along_chain"] if s["suite"] == "general")
    assert general["chance"] == 0.25
    last = general["transitions"][-1]
    assert (last["from"], last["to"], last["n"], last["forgotten"], last["gained"]) == ("seq-math", "seq-search",
                                                                                          20, 6, 2)
    f, b = chance_adjusted(6, 2, 8, 20, 0.25)
    assert last["sample_forgetting"] == pytest.approx(6 / 20)
    assert last["sample_forgetting_chance_adjusted"] == pytest.approx(f)
    assert f == pytest.approx((0.3 * 0.75 - 0.25 * 0.4) / 0.75**2)
    assert last["sample_backward_transfer_chance_adjusted"] == pytest.approx(b)
    # the base -> seq-math pair changed nothing
    first = general["transitions"][0]
    assert first["forgotten"] == first["gained"] == 0
    # suites a guess cannot solve get no adjustment rows
    math = next(s for s in json.loads(out)["along_chain"] if s["suite"] == "math/id")
    assert math["chance"] == 0 and math["transitions"] == []
    code, out, _ = cli("forgetting", "--run", str(fixture_run))
    assert code == 0 and "chance-adjusted" in out

    from aclarena.analysis.paired import paired_change

    got = paired_change(fixture_run, "seq-math", "seq-search", ["general", "math/id"])
    assert (got["general"]["lost"], got["general"]["gained"], got["general"]["n"]) == (6, 2, 20)
    assert got["general"]["lost_chance_adjusted"] == pytest.approx(f * 20)
    assert "lost_chance_adjusted" not in got["math/id"]
