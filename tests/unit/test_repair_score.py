"""The four-part repair score on hand-made outcomes whose parts are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aclarena.diagnostics.repair_score import SuiteOutcomes, partition, repair_score


def _items(n: int, ones: int) -> np.ndarray:
    a = np.zeros(n)
    a[:ones] = 1.0
    return a


def test_parts_equal_their_definitions():
    n = 100
    suites = [
        # damaged: 0.8 -> 0.2, repair 0.5: healing (0.5 - 0.2) / (0.8 - 0.2) = 0.5
        SuiteOutcomes("math/id", "held-out", _items(n, 80), _items(n, 20), _items(n, 50)),
        # damaged too, pooled: (0.3 - 0.1) / (0.6 - 0.1); the pooled healing is (0.3 + 0.2) / (0.6 + 0.5)
        SuiteOutcomes("search/id", "held-out", _items(n, 60), _items(n, 10), _items(n, 30)),
        # improved: 0.1 -> 0.7, repair 0.4: preservation (0.4 - 0.1) / (0.7 - 0.1) = 0.5
        SuiteOutcomes("if/id", "held-out", _items(n, 10), _items(n, 70), _items(n, 40)),
        # unchanged (identical outcomes): non-damage 0.3 / 0.5
        SuiteOutcomes("general", "held-out", _items(n, 50), _items(n, 50), _items(n, 30)),
        # target: 0 -> 0.9, repair 0.6: retention 0.6 / 0.9
        SuiteOutcomes("ecom/id", "target", _items(n, 0), _items(n, 90), _items(n, 60)),
    ]
    s = repair_score(suites, n_boot=400)
    assert s.partition == {"math/id": "damaged", "search/id": "damaged", "if/id": "improved", "general": "unchanged",
                           "ecom/id": "target"}
    assert s.healing.value == pytest.approx(0.5 / 1.1)
    assert s.preservation.value == pytest.approx(0.5)
    assert s.non_damage.value == pytest.approx(0.6)
    assert s.target_retention.value == pytest.approx(0.6 / 0.9)
    for p in (s.healing, s.preservation, s.non_damage, s.target_retention):
        lo, hi = p.ci
        assert lo <= p.value <= hi and hi - lo < 0.5
    assert s.healing.suites == ("math/id", "search/id")
    assert s.n_items["general"] == n


def test_empty_partition_is_nan_and_a_target_that_did_not_improve_too():
    n = 40
    s = repair_score([SuiteOutcomes("ecom/id", "target", _items(n, 20), _items(n, 20), _items(n, 30)),
                      SuiteOutcomes("general", "held-out", _items(n, 10), _items(n, 10), _items(n, 10))], n_boot=100)
    assert math.isnan(s.healing.value) and math.isnan(s.healing.ci[0]) and s.healing.suites == ()
    assert math.isnan(s.target_retention.value)
    assert s.non_damage.value == pytest.approx(1.0)


def test_partition_needs_evidence():
    rng = np.random.default_rng(0)
    a = (rng.random(100) < 0.5).astype(float)
    b = a.copy()
    b[:3] = 1 - b[:3]  # three flips: within what 100 items explain
    assert partition(a, b)[0] == "unchanged"
    assert partition(_items(100, 90), _items(100, 10))[0] == "damaged"
    assert partition(_items(100, 10), _items(100, 90))[0] == "improved"


def test_bad_input():
    with pytest.raises(ValueError, match="same non-zero number"):
        SuiteOutcomes("x", "held-out", np.ones(3), np.ones(2), np.ones(3))
    with pytest.raises(ValueError, match="role"):
        SuiteOutcomes("x", "forgotten", np.ones(3), np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="no suites"):
        repair_score([])
