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
    "CheckpointsResult": "aclarena.analysis.checkpoints",
    "ProbeSet": "aclarena.probes.probe_set",
    "Manifest": "aclarena.store.manifest",
    "CheckpointSpec": "aclarena.store.manifest",
    "ResultsStore": "aclarena.store.results",
    "AclarenaError": "aclarena.errors",
}

__all__ = [
    "AclarenaError",
    "CheckpointSpec",
    "CheckpointsResult",
    "CompareResult",
    "DisplacementResult",
    "FlipSettings",
    "FlipsResult",
    "ForgettingResult",
    "Manifest",
    "ModelDrift",
    "ProbeSet",
    "ResultsStore",
    "Run",
    "TokenDrift",
    "VectorsResult",
    "__version__",
    "task_vector_cosines",
    "token_drift",
]

if TYPE_CHECKING:
    from aclarena.analysis.checkpoints import CheckpointsResult
    from aclarena.analysis.compare import CompareResult
    from aclarena.analysis.displacement import DisplacementResult
    from aclarena.analysis.flips import FlipSettings, FlipsResult
    from aclarena.analysis.forgetting import ForgettingResult
    from aclarena.analysis.in_memory import ModelDrift, token_drift
    from aclarena.analysis.run import Run
    from aclarena.analysis.tokens import TokenDrift
    from aclarena.analysis.vectors import VectorsResult, task_vector_cosines
    from aclarena.errors import AclarenaError
    from aclarena.probes.probe_set import ProbeSet
    from aclarena.store.manifest import CheckpointSpec, Manifest
    from aclarena.store.results import ResultsStore


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aclarena' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
