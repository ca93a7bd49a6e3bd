"""The demo's and the study's steps read typed results: the views of the results kept as rows (signatures,
consolidations, repairs) and the capability matrix's scores (no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aclarena.analysis._common import Made
from aclarena.analysis.consolidate import ConsolidateResult
from aclarena.analysis.eval import EvalResult
from aclarena.analysis.repair import RepairOutput, RepairRunResult
from aclarena.analysis.signatures import SignaturesResult
from aclarena.analysis.steps import pair_arg
from aclarena.diagnostics.signatures import DriftSignature


def test_eval_scores_keep_ok_cells_with_a_finite_mean_and_their_intervals():
    cells = [{"checkpoint": "a", "suite": "math/id", "status": "ok", "mean": 0.5, "ci95": (0.25, 0.75)},
             {"checkpoint": "a", "suite": "search/id", "status": "ok", "mean": float("nan"), "ci95": None},
             {"checkpoint": "b", "suite": "math/id", "status": "error", "mean": None, "ci95": None},
             {"checkpoint": "c", "suite": "math/id", "status": "ok", "mean": 0.0, "ci95": None}]
    result = EvalResult(settings={}, settings_id="s", checkpoints=["a", "b", "c"], suites=["math/id"], skipped=0,
                        cells=cells)
    assert result.scores() == {("a", "math/id"): 0.5, ("c", "math/id"): 0.0}
    assert result.intervals() == {("a", "math/id"): [0.25, 0.75]}


def test_signed_updates_carry_their_signature_by_update_and_domain():
    sig = DriftSignature(values={"kl_share_high": 0.3}, low={"kl_share_high": 0.2}, high={"kl_share_high": float("nan")},
                         high_share=0.06, first_k_share=0.5, n_sequences=8, n_positions=90, n_valid=90, n_high=6,
                         n_first_k=40)
    row = {"update": "a..b", "kind": "stage", "parent": "a", "child": "b", "domain": "math", "kl_share_high": 0.3}
    result = SignaturesResult(run_dir=Path("run"), settings={}, rows=(row,), signatures={("a..b", "math"): sig})
    (s,) = result.signed()
    assert (s.update, s.kind, s.parent, s.child, s.domain) == ("a..b", "stage", "a", "b", "math")
    assert s.value("kl_share_high") == pytest.approx(0.3) and s.interval("kl_share_high") == (0.2, None)
    assert s.value("barely_moved_low") is None  # not measured


def test_outputs_of_consolidations_and_repairs():
    result = ConsolidateResult("mle", outputs=[{"checkpoint": "mle-math-s1", "method": "mle", "replicate": 1,
                                                "domain": "math"},
                                               {"checkpoint": "mle-if", "method": "mle", "replicate": 0, "domain": "if"}])
    assert result.made() == [Made("mle-math-s1", "mle", 1, "math"), Made("mle-if", "mle", 0, "if")]
    out = RepairOutput(checkpoint="repair-x", method="repair-svd-restore", old="a", new="b", parameters={},
                       n_repaired=1, n_tensors=2, energy_removed=0.1, directions_kept=None, layers=[], seconds=1.0,
                       reused=False)
    assert RepairRunResult([out]).made() == [Made("repair-x", "repair-svd-restore")]
    assert pair_arg((("a", "base"), ("b", "a"))) == "a - base:b - a"
