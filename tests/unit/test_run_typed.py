"""`Run` is typed (issue 48): every public method names the result it returns, and the names resolve to the
analyses' own result classes, so an editor and mypy see what `run.tokens(...)` gives."""

from __future__ import annotations

import inspect
import typing

import pandas as pd

import aclarena.analysis.run as run_module
from aclarena.analysis.consolidate import ConsolidateOptions, ConsolidateResult
from aclarena.analysis.displacement import DisplacementResult
from aclarena.analysis.eval import EvalResult
from aclarena.analysis.flips import FlipSettings, FlipsResult
from aclarena.analysis.repair import RepairRunResult
from aclarena.analysis.signatures import SignaturesResult
from aclarena.analysis.tokens import TokenDrift
from aclarena.analysis.vectors import VectorsResult

NAMES = {"pd": pd, "ConsolidateOptions": ConsolidateOptions, "ConsolidateResult": ConsolidateResult,
         "DisplacementResult": DisplacementResult, "EvalResult": EvalResult, "FlipSettings": FlipSettings,
         "FlipsResult": FlipsResult, "RepairRunResult": RepairRunResult, "SignaturesResult": SignaturesResult,
         "TokenDrift": TokenDrift, "VectorsResult": VectorsResult}

EXPECTED = {"checkpoints": pd.DataFrame, "tokens": TokenDrift, "signatures": SignaturesResult,
            "vectors": VectorsResult, "displacement": DisplacementResult, "eval": EvalResult,
            "consolidate": ConsolidateResult, "flips": FlipsResult, "repair": RepairRunResult}


def test_every_analysis_method_names_its_result():
    methods = {n: f for n, f in inspect.getmembers(run_module.Run, inspect.isfunction) if not n.startswith("_")}
    assert set(EXPECTED) <= set(methods)
    for name, method in methods.items():
        hints = typing.get_type_hints(method, globalns={**vars(run_module), **NAMES})
        assert "return" in hints and hints["return"] is not typing.Any, name
        if name in EXPECTED:
            assert hints["return"] is EXPECTED[name], (name, hints["return"])
