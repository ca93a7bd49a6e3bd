"""A plan's fingerprints and seeds are pinned: finished phases are found again by them (a resumed run, a study
resuming from its checkpoints), so moving the planning code must not change a single one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from aclarena.train.config import load_config
from aclarena.train.plan import plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# sha256 of [[name, fingerprint, seed, parent, same_as], ...] of each example's plan with two replicates
PINNED = {
    "mini.toml": "89dfa60ae8145222",  # the shipped base: depends on its recorded fingerprint too
    "tiny.toml": "b306de979fedbb08",
    "paper.toml": "a45a773289d04ae0",
    "quick.toml": "8070d8f77c7803e9",
    "mini-fast.toml": "e325a56aa46a62af",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_plan_fingerprints_are_pinned(name):
    jobs = plan(load_config(EXAMPLES / name), seeds=2)
    rows = [[j.name, j.fingerprint, j.seed, j.parent, j.same_as] for j in jobs]
    assert hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16] == PINNED[name]


def test_tiny_plan_names_its_fingerprints():
    by = {j.name: j for j in plan(load_config(EXAMPLES / "tiny.toml"), seeds=2)}
    assert by["base"].fingerprint == "ae7224d8bfb39a24"
    assert (by["seq-math-sft"].fingerprint, by["seq-math-sft"].seed) == ("ae32adff31a4b56a", 10)
    assert (by["seq-if"].fingerprint, by["seq-if"].seed) == ("963d6e8410bca243", 41)
    assert (by["oracle-search-s1"].fingerprint, by["oracle-search-s1"].seed) == ("372c19899942727e", 1021)
    assert by["oracle-math"].same_as == "seq-math"


def test_mini_fast_differs_from_mini_in_the_ecom_stage_only():
    """The afternoon study's recipe (issue 42) is the mini recipe with a shorter e-commerce SFT phase: every job
    before that phase, and every oracle but e-commerce's, is the mini recipe's to the fingerprint."""
    mini = {j.name: j.fingerprint for j in plan(load_config(EXAMPLES / "mini.toml"), seeds=2)}
    fast = {j.name: j.fingerprint for j in plan(load_config(EXAMPLES / "mini-fast.toml"), seeds=2)}
    assert set(mini) == set(fast)
    changed = {n for n in mini if mini[n] != fast[n]}
    stems = {"seq-ecom-sft", "seq-ecom", "seq-if-sft", "seq-if", "oracle-ecom-sft", "oracle-ecom"}
    assert changed == stems | {f"{n}-s1" for n in stems}
