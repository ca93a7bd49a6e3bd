"""The one binomial tail of the package: ``P(X >= k)`` for ``X ~ Binomial(n, p)``.

Both exact tests use it: the one-sided McNemar test of a benchmark drop
(:func:`aclarena.diagnostics.early_warning.mcnemar_drop_pvalue`, ``p = ½`` on the discordant
items) and the router-above-chance test (:mod:`aclarena.diagnostics.routing`). It is
``scipy.stats.binomtest(k, n, p, alternative="greater").pvalue``, which stays exact and finite
for any ``n`` (a sum of ``math.comb(n, i) / 2.0**n`` overflows a float past n = 1024).
"""

from __future__ import annotations

import math


def binomial_tail(k: int, n: int, p: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)``, exact (scipy's binomial test, one-sided "greater")."""
    if isinstance(k, bool) or isinstance(n, bool) or int(k) != k or int(n) != n:
        raise ValueError(f"k and n must be integers, got k={k!r}, n={n!r}")
    k, n = int(k), int(n)
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if not (isinstance(p, int | float) and math.isfinite(p) and 0.0 <= p <= 1.0):
        raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
    if k == 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(k, n, p, alternative="greater").pvalue)
