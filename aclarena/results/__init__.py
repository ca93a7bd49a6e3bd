"""Stored results, one module per result type: its key pattern, (type, version), typed payload,
write and read, and the upgrades from every older version it reads (docs/store-format.md,
"Result types"). Between :mod:`aclarena.store` (bytes, encodings, locks, atomic writes) and the
analyses that make results and the figures, dashboard and ``export`` that read them; what is computed
from stored results for them lives here too (:mod:`~aclarena.results.comparison`, the capability matrix
and chain of stages of :mod:`~aclarena.results.capability`). Torch-free.
"""

# every result type registers itself when its module is imported: importing the package registers them all
from aclarena.results import (
    capability,
    consolidation,
    demo,
    displacement,
    flips,
    lead_time,
    monitor_series,
    orders,
    probes,
    routing,
    signatures,
    tokens,
    train_log,
    vectors,
)
from aclarena.results.registry import ResultType, Stored, read, register, registered, write

__all__ = ["ResultType", "Stored", "capability", "consolidation", "demo", "displacement", "flips", "lead_time",
           "monitor_series", "orders", "probes", "read", "register", "registered", "routing", "signatures", "tokens",
           "train_log", "vectors", "write"]
