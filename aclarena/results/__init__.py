"""Stored results, one module per result type: its key pattern, (type, version), typed payload,
write and read, and the upgrades from every older version it reads (docs/store-format.md,
"Result types"). Between :mod:`aclarena.store` (bytes, encodings, locks, atomic writes) and the
analyses that make results and the figures, dashboard and ``export`` that read them. Torch-free.
"""

# every result type registers itself when its module is imported: importing the package registers them all
from aclarena.results import consolidation, displacement, flips, orders, routing, signatures, vectors
from aclarena.results.registry import ResultType, Stored, read, register, registered, write

__all__ = ["ResultType", "consolidation", "displacement", "flips", "orders", "Stored", "read", "register", "registered", "routing", "signatures", "vectors", "write"]
