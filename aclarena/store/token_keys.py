"""Where probe sets and token-level results live in results.h5 (docs/store-format.md).

=================================== ================== =========================================
key                                 result-type        holds
=================================== ================== =========================================
``probes/<probe>``                  ``probe-set``      token ids, scored mask, texts, vocabulary
``tokens/<probe>/reference``        ``token-reference`` the reference's entropy, log-probs, top-k
``tokens/<probe>/scores/<ckpt>``    ``token-scores``   one checkpoint's per-position arrays
``tokens/<probe>/summary/<ckpt>``   ``token-summary``  its summary and concentration curve
=================================== ================== =========================================

Plain string helpers (no torch, no h5py), shared by the verbs, the dashboard and export.
"""

from __future__ import annotations

PROBES = "probes"
TOKENS = "tokens"


def probe_key(probe: str) -> str:
    return f"{PROBES}/{probe}"


def tokens_key(probe: str) -> str:
    return f"{TOKENS}/{probe}"


def reference_key(probe: str) -> str:
    return f"{TOKENS}/{probe}/reference"


def scores_key(probe: str, checkpoint: str | None = None) -> str:
    base = f"{TOKENS}/{probe}/scores"
    return base if checkpoint is None else f"{base}/{checkpoint}"


def summary_key(probe: str, checkpoint: str | None = None) -> str:
    base = f"{TOKENS}/{probe}/summary"
    return base if checkpoint is None else f"{base}/{checkpoint}"
