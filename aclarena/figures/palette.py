"""One plotly template and one colour map for every figure (the dashboard's pages and ``export``).

* :data:`TEMPLATE`: the template every figure names;
* :data:`PHASE_COLORS`: SFT and RL (and updates without a phase), wherever phases are compared;
* :data:`KIND_COLORS`: checkpoint kinds (base, stage, oracle, consolidated) and update kinds;
* :data:`SERIES`: the qualitative sequence for anything else drawn one colour per series;
* :func:`domain_colours`: one colour per domain, the same on every page (an oracle is drawn in its
  domain's colour, so four oracles are four colours).
"""

from __future__ import annotations

from collections.abc import Iterable

TEMPLATE = "plotly_white"
SERIES = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
          "#7f7f7f")
PHASE_COLORS: dict[str | None, str] = {"sft": "#1f77b4", "rl": "#d62728", None: "#7f7f7f"}
KIND_COLORS = {"base": "#4c4c4c", "stage": "#1f77b4", "oracle": "#2ca02c", "consolidated": "#9467bd",
               "sft": PHASE_COLORS["sft"], "rl": PHASE_COLORS["rl"], "consolidation": "#9467bd", "update": "#8c564b"}
#: domain colours: none of them is SFT's blue or RL's red, so a domain never reads as a phase
DOMAIN_SERIES = ("#2ca02c", "#ff7f0e", "#17becf", "#e377c2", "#bcbd22", "#8c564b", "#9467bd", "#7f7f7f")
FADED = "rgba(120, 120, 120, 0.25)"


def domain_colours(domains: Iterable[str | None]) -> dict[str, str]:
    """A colour per domain, in sorted order (stable across pages and runs with the same domains)."""
    names = sorted({d for d in domains if d})
    return {d: DOMAIN_SERIES[i % len(DOMAIN_SERIES)] for i, d in enumerate(names)}
