"""Helpers for the consolidation tests: hand-made capability cells, a run with consolidations."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aclarena.results import capability
from aclarena.results.capability import cell_payload

SETTINGS = {"n": 4, "seeds": [0], "samples": 0}


def write_cells(run: Path, scores: dict[str, dict[str, list[float]]]) -> None:
    """Capability cells with the given greedy outcomes (one seed) per checkpoint and suite."""
    items = []
    for ck, suites in scores.items():
        for suite, outcomes in suites.items():
            domain, _, variant = suite.partition("/")
            items.append(cell_payload(checkpoint=ck, suite=suite, domain=domain, role=variant or "general",
                                      source="arena", settings=SETTINGS, greedy=np.array([outcomes], dtype=float)))
    capability.write_cells(run, items)


def consolidated_run(run: Path) -> Path:
    """The fixture run with a uniform and a TIES merge, scored routers, and hand-made scores."""
    from aclarena.cli import main

    for argv in (["--method", "merge-uniform"], ["--method", "merge-ties"], ["--method", "mle", "--routers-only"]):
        assert main(["consolidate", "--run", str(run), "--json", *argv]) == 0
    write_cells(run, {
        "oracle-math": {"math/id": [1, 1, 1, 1], "search/id": [0, 0, 0, 0], "general": [1, 0, 0, 0]},
        "seq-search": {"math/id": [1, 0, 0, 0], "search/id": [1, 1, 0, 0], "general": [1, 0, 0, 0]},
        "merge-uniform": {"math/id": [1, 1, 0, 0], "search/id": [1, 0, 0, 0], "general": [1, 1, 1, 0]},
        "merge-ties": {"math/id": [1, 1, 1, 0], "search/id": [0, 0, 0, 0], "general": [1, 1, 0, 0]},
    })
    return run
