"""aclarena: forgetting diagnostics for multi-stage LLM post-training.

The curated API (docs/python-api.md)::

    import aclarena as acl
    run = acl.Run("runs/demo")                       # manifest + store
    run.checkpoints()                                # DataFrame: lineage, sizes, loadable
    drift = run.tokens(ref="seq-math")               # scores (cached) -> TokenDrift
    drift.summary()                                  # DataFrame, one row per checkpoint
    run.vectors().cosines()                          # DataFrame
    run.forgetting().metrics                         # ACC, BWT, FWT, ...
    acl.token_drift(model_a, model_b, probe)         # in-memory models, no run folder
    acl.task_vector_cosines(["ckpt/a", "ckpt/b"], base="ckpt/base")
    cfg = acl.load_config("examples/mini.toml")      # a CurriculumConfig (StageSpec, PhaseSpec, ...)
    acl.run_curriculum(cfg, "runs/mini")             # train it; then run.eval(), run.consolidate("mle")
    monitor = acl.DriftMonitorCallback([probe], run_dir="runs/x")   # callbacks=[monitor], any HF or trl trainer

The import is cheap on purpose: every name above is imported on first use (PEP 562), so
``import aclarena`` loads no torch, transformers or dash and ``aclarena-diag --help`` answers at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aclarena._version import __version__

# name -> the module that defines it
_LAZY = {
    "Run": "aclarena.analysis.run",
    "token_drift": "aclarena.analysis.in_memory",
    "ModelDrift": "aclarena.analysis.in_memory",
    "task_vector_cosines": "aclarena.analysis.vectors",
    "TokenDrift": "aclarena.analysis.tokens",
    "VectorsResult": "aclarena.analysis.vectors",
    "DisplacementResult": "aclarena.analysis.displacement",
    "ForgettingResult": "aclarena.analysis.forgetting",
    "CompareResult": "aclarena.analysis.compare",
    "FlipsResult": "aclarena.analysis.flips",
    "FlipSettings": "aclarena.analysis.flips",
    "SignaturesResult": "aclarena.analysis.signatures",
    "CheckpointsResult": "aclarena.analysis.checkpoints",
    "EvalResult": "aclarena.analysis.eval",
    "ConsolidateOptions": "aclarena.consolidate.options",
    "ConsolidateResult": "aclarena.analysis.consolidate",
    "CurriculumConfig": "aclarena.train.config",
    "BaseSpec": "aclarena.train.config",
    "StageSpec": "aclarena.train.config",
    "PhaseSpec": "aclarena.train.config",
    "MonitorSpec": "aclarena.train.monitor_spec",
    "load_config": "aclarena.train.config",
    "parse_config": "aclarena.train.config",
    "run_curriculum": "aclarena.train.curriculum",
    "DriftMonitorCallback": "aclarena.train.callbacks",
    "MetricRule": "aclarena.diagnostics.early_warning",
    "read_probe_set": "aclarena.results.probes",
    "ProbeSet": "aclarena.results.probes",
    "Manifest": "aclarena.store.manifest",
    "CheckpointSpec": "aclarena.store.manifest",
    "ResultsStore": "aclarena.store.results",
    "AclarenaError": "aclarena.errors",
}

__all__ = [
    "AclarenaError",
    "BaseSpec",
    "CheckpointSpec",
    "CheckpointsResult",
    "CompareResult",
    "ConsolidateOptions",
    "ConsolidateResult",
    "CurriculumConfig",
    "DisplacementResult",
    "DriftMonitorCallback",
    "EvalResult",
    "FlipSettings",
    "FlipsResult",
    "ForgettingResult",
    "Manifest",
    "MetricRule",
    "ModelDrift",
    "MonitorSpec",
    "PhaseSpec",
    "ProbeSet",
    "ResultsStore",
    "Run",
    "SignaturesResult",
    "StageSpec",
    "TokenDrift",
    "VectorsResult",
    "__version__",
    "load_config",
    "parse_config",
    "read_probe_set",
    "run_curriculum",
    "task_vector_cosines",
    "token_drift",
]

if TYPE_CHECKING:
    from aclarena.analysis.checkpoints import CheckpointsResult
    from aclarena.analysis.compare import CompareResult
    from aclarena.analysis.consolidate import ConsolidateResult
    from aclarena.analysis.displacement import DisplacementResult
    from aclarena.analysis.eval import EvalResult
    from aclarena.analysis.flips import FlipSettings, FlipsResult
    from aclarena.analysis.forgetting import ForgettingResult
    from aclarena.analysis.in_memory import ModelDrift, token_drift
    from aclarena.analysis.run import Run
    from aclarena.analysis.signatures import SignaturesResult
    from aclarena.analysis.tokens import TokenDrift
    from aclarena.analysis.vectors import VectorsResult, task_vector_cosines
    from aclarena.consolidate.options import ConsolidateOptions
    from aclarena.diagnostics.early_warning import MetricRule
    from aclarena.errors import AclarenaError
    from aclarena.results.probes import ProbeSet, read_probe_set
    from aclarena.store.manifest import CheckpointSpec, Manifest
    from aclarena.store.results import ResultsStore
    from aclarena.train.callbacks import DriftMonitorCallback
    from aclarena.train.config import (
        BaseSpec,
        CurriculumConfig,
        PhaseSpec,
        StageSpec,
        load_config,
        parse_config,
    )
    from aclarena.train.curriculum import run_curriculum
    from aclarena.train.monitor_spec import MonitorSpec


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aclarena' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
