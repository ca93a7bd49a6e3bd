"""Conventions stated: `forgetting` reports the paper's chance-corrected estimator under its own name, beside
aclarena's.

The test failed on the code before its fix (issue 43, checked against its branch at 3c35d94)."""

from __future__ import annotations

import pytest


def test_forgetting_reports_the_papers_estimator_beside_aclarenas(fixture_run, cli):
    """arXiv 2510.17776's code computes max(0, p10 - (1-a0)(1-a1)/(k-1)); aclarena's F_true is another number.
    Both are reported, each under its own name (20 items, 6 forgotten, 2 gained, 8 wrong twice, k = 4)."""
    import json

    from consolidation_helpers import write_cells

    before = [1.0] * 10 + [0.0] * 10
    after = [0.0] * 6 + [1.0] * 4 + [1.0] * 2 + [0.0] * 8
    write_cells(fixture_run, {"base": {"math/id": [0, 0, 0, 0], "general": before},
                              "seq-math": {"math/id": [1, 1, 0, 0], "general": before},
                              "seq-search": {"math/id": [1, 0, 0, 0], "general": after}})
    code, out, err = cli("forgetting", "--run", str(fixture_run), "--json")
    assert code == 0, err
    general = next(s for s in json.loads(out)["along_chain"] if s["suite"] == "general")
    last = general["transitions"][-1]
    assert last["sample_forgetting_2510_17776"] == pytest.approx(max(0.0, 0.3 - 0.5 * 0.7 / 3))
    assert last["sample_forgetting_chance_adjusted"] == pytest.approx((0.3 * 0.75 - 0.25 * 0.4) / 0.75**2)
