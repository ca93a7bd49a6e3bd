"""Where probe sets live in results.h5 (docs/store-format.md): ``probes/<probe>`` (``probe-set``: token ids,
scored mask, texts, vocabulary).

The token results scored on a probe set (``tokens/<probe>/...``) are owned by :mod:`aclarena.results.tokens`.
Plain string helpers (no torch, no h5py), shared by the verbs, the dashboard and export.
"""

from __future__ import annotations

PROBES = "probes"


def probe_key(probe: str) -> str:
    return f"{PROBES}/{probe}"
