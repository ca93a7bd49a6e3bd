"""aclarena: forgetting diagnostics for multi-stage LLM post-training.

The import is cheap on purpose: no torch, transformers or dash is imported here, so that
``aclarena-diag --help`` answers at once. Subpackages import what they need.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
