"""A hand-made capability matrix for the fixture run (no model is run): known values to assert on."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aclarena.results.capability import cell_payload, error_payload, write_cells

SETTINGS = {"n": 4, "seeds": [0], "samples": 2}
# checkpoint -> suite -> greedy outcomes of 4 items; sampled outcomes are the greedy ones, then all wrong
OUTCOMES = {
    "base": {"math/id": [0, 0, 0, 0], "search/id": [0, 0, 0, 1], "general": [1, 0, 0, 0], "math/ood": [0, 0, 0, 0]},
    "seq-math": {"math/id": [1, 1, 1, 0], "search/id": [0, 0, 0, 0], "general": [1, 1, 0, 0], "math/ood": [1, 0, 0, 0]},
    "seq-search": {"math/id": [1, 0, 0, 0], "search/id": [1, 1, 0, 0], "general": [1, 0, 0, 0],
                   "math/ood": [0, 0, 0, 0]},
    "oracle-math": {"math/id": [1, 1, 1, 1]},
    "lora-ecom": {"math/id": [1, 1, 0, 0], "search/id": [1, 1, 1, 0], "general": [1, 1, 0, 0]},
}
# R = [[0.75, 0.00], [0.25, 0.50]] (seq-math, seq-search on math/id, search/id); base = [0, 0.25]
EXPECTED = {"average_accuracy": 0.375, "backward_transfer": -0.5, "forward_transfer": -0.25, "forgetting_max": 0.5,
            "forgetting_first_last": 0.5, "retention_vs_oracle": 0.25, "average_incremental_accuracy": 0.5625,
            "sample_forgetting": 0.5}


def write_fixture_matrix(run: Path) -> None:
    items = []
    for ck, suites in OUTCOMES.items():
        for suite, outcomes in suites.items():
            domain, _, variant = suite.partition("/")
            role = variant or "general"
            greedy = np.array([outcomes], dtype=float)
            samples = np.stack([greedy, np.zeros_like(greedy)], axis=-1)
            items.append(cell_payload(checkpoint=ck, suite=suite, domain=domain, role=role, source="arena",
                                      settings=SETTINGS, greedy=greedy, samples=samples,
                                      item_ids=[f"{suite}/{i}" for i in range(4)]))
    items.append(error_payload(checkpoint="lora-ecom", suite="math/ood", domain="math", role="ood", source="arena",
                               settings=SETTINGS, error="CheckpointError: adapter does not fit"))
    write_cells(run, items, overwrite=False)
