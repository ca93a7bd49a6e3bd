"""Checkpoint names are built in one place (aclarena/train/naming.py, issue 48): the curriculum's
phase names, the study's and the demo's lookups agree because they call the same functions."""

from __future__ import annotations

import re
from pathlib import Path

from aclarena.train.naming import (
    consolidated_name,
    continued_name,
    expert_name,
    lambda_name,
    oracle_name,
    order_node_name,
    phase_names,
    repair_name,
    replicate_groups,
    seed0_name,
    seq_name,
)

ROOT = Path(__file__).resolve().parents[2] / "aclarena"
NAMING = ROOT / "train" / "naming.py"
# a string that spells a checkpoint name of the run: f"seq-{d}...", f"oracle-{d}...", "ord-" + ..., the
# replicate's suffix f"-s{r}", the demo's repair f"repair-{stage}", a retrained phase f"cont-{phase}"
BUILT = re.compile(r"""f["'](?:seq|oracle|ord|repair|cont)-\{|["'](?:seq|oracle|ord)-["'] *\+|f["'][^"']*-s\{""")


class _Phase:
    def __init__(self, kind: str) -> None:
        self.kind = kind


class _Stage:
    def __init__(self, domain: str, kinds: list[str]) -> None:
        self.domain, self.phases = domain, [_Phase(k) for k in kinds]


def test_names_of_phases_replicates_and_oracles():
    assert seq_name("math") == "seq-math"
    assert seq_name("math", 0, "sft") == "seq-math-sft"
    assert seq_name("ecom", 2) == "seq-ecom-s2"
    assert oracle_name("if", 2, "sft") == "oracle-if-sft-s2"
    stage = _Stage("search", ["sft", "rl"])
    assert phase_names("seq", stage, 1) == [seq_name("search", 1, "sft"), seq_name("search", 1)]
    assert phase_names("oracle", _Stage("math", ["rl"])) == [oracle_name("math")]
    groups = replicate_groups([seq_name("math", r) for r in range(3)])
    assert groups == {"seq-math": ["seq-math", "seq-math-s1", "seq-math-s2"]}
    assert seed0_name("merge-uniform-s1", 1) == seed0_name("merge-uniform", 0) == "merge-uniform"
    assert seed0_name("mix-s1", 2) == "mix-s1"  # only its own replicate's suffix is dropped
    assert consolidated_name("sdft", "-s1") == "sdft-s1" and lambda_name("merge-ta", 0.5) == "merge-ta-l0.5"
    assert expert_name("mle", "math", "-s2") == "mle-math-s2"
    assert order_node_name(()) == "base" and order_node_name((), 2) == "base"
    assert order_node_name(("math", "search")) == "ord-math-search"
    assert order_node_name(("math", "search"), 1, "sft") == "ord-math-search-sft-s1"
    assert repair_name("seq-search") == "repair-seq-search" and continued_name("seq-ecom-sft") == "cont-seq-ecom-sft"


def test_no_checkpoint_name_is_built_outside_naming():
    """Issue 48: "no string-built checkpoint name outside train/naming.py", over the whole package."""
    found = [f"{p.relative_to(ROOT.parent)}:{i}" for p in sorted(ROOT.rglob("*.py")) if p != NAMING
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if BUILT.search(line)]
    assert found == [], f"build the name with aclarena.train.naming: {found}"


def test_the_name_pattern_finds_what_it_forbids():
    """The check above would catch the builders it forbids (so an empty list means something)."""
    built = ['f"seq-{d}"', "f'oracle-{domain}-sft'", '"ord-" + "-".join(p)', 'name + f"-s{replicate}"',
             'f"repair-{new}"', 'f"cont-{n}"']
    assert all(BUILT.search(s) for s in built)
    assert not any(BUILT.search(s) for s in ['f"{prefix}-{domain}"', '"seq-math"', 'f"fig-{name}"'])


def test_consolidation_methods_name_their_outputs_through_naming():
    """The methods' output names (sdft-s1, merge-ta-l0.5, mle-math) come from aclarena.train.naming too."""
    suffixed = re.compile(r"""(f["'][^"']*\{[^}]*suffix\}|\+ *job\.lineage\.suffix)""")
    found = [f"{p.relative_to(ROOT.parent)}:{i}" for p in sorted((ROOT / "consolidate").rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if suffixed.search(line)]
    assert found == [], f"build the name with aclarena.train.naming: {found}"
