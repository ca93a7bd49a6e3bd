"""Training settings of the consolidation methods, scaled to the run they consolidate.

A run trained by ``aclarena-diag train`` keeps its curriculum config (``curriculum.toml``);
the training methods read it so that their sizes fit the run (toy steps for a ``tiny``
curriculum, the demo's for ``mini``) and MLE's experts train with the RL recipe of their
domain's stage. Without that file (checkpoints trained elsewhere) the ``mini`` defaults apply.
Command-line options override everything (``--steps``, ``--n``, ``--lr``, ``--trl FIELD=VALUE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.errors import AclarenaError

CONFIG_COPY = "curriculum.toml"


@dataclass(frozen=True)
class Sizes:
    """Per-method defaults: data per domain, optimizer steps, batch, learning rate, generation length."""

    n: int
    steps: int
    batch: int
    lr: float
    k: int = 2
    minimum: int = 16
    max_new_tokens: int = 64
    extra: Mapping[str, Any] = field(default_factory=dict)


# mini: the demo's sizes (hidden 256, 4 layers); tiny: toy sizes for tests
DEFAULTS: dict[str, dict[str, Sizes]] = {
    "mini": {
        "sdft": Sizes(n=48, steps=120, batch=8, lr=5e-4, k=2, minimum=32),
        "mmopd": Sizes(n=24, steps=24, batch=8, lr=1e-4, max_new_tokens=48),
        "mle": Sizes(n=64, steps=20, batch=8, lr=5e-4),
    },
    "tiny": {
        "sdft": Sizes(n=4, steps=4, batch=4, lr=5e-4, k=1, minimum=4),
        "mmopd": Sizes(n=4, steps=2, batch=4, lr=1e-4, max_new_tokens=12),
        "mle": Sizes(n=4, steps=2, batch=4, lr=5e-4, max_new_tokens=24, extra={"entropy_coef": 0.01}),
    },
}


def curriculum(run_dir: str | Path) -> Any | None:
    """The run's curriculum config (``curriculum.toml``), or None for runs trained elsewhere."""
    path = Path(run_dir) / CONFIG_COPY
    if not path.is_file():
        return None
    from aclarena.train.config import load_config

    return load_config(path)


def preset(cfg: Any | None) -> str:
    if cfg is not None and getattr(cfg.base, "preset", None) == "tiny":
        return "tiny"
    return "mini"


def sizes(method: str, run_dir: str | Path, options: Mapping[str, Any]) -> Sizes:
    """The method's sizes for this run, with ``--n``, ``--steps``, ``--batch`` and ``--lr`` applied."""
    base = DEFAULTS[preset(curriculum(run_dir))][method]
    changes = {k: options[k] for k in ("n", "steps", "batch", "lr") if options.get(k) is not None}
    for k, v in changes.items():
        if v <= 0:
            raise AclarenaError(f"--{k} must be positive, got {v}")
    from dataclasses import replace

    return replace(base, **changes)


def parse_trl(items: list[str] | None) -> dict[str, Any]:
    """``FIELD=VALUE`` pairs (values read as TOML: numbers, booleans, strings)."""
    import tomllib

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise AclarenaError(f"--trl {item!r} must be FIELD=VALUE, e.g. --trl learning_rate=1e-4")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        out[key.strip()] = value
    return out
