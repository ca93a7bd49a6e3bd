"""Training settings of the consolidation methods, scaled to the run they consolidate.

A run trained by ``aclarena-diag train`` keeps its curriculum config (``curriculum.toml``);
the training methods read it so that their sizes fit the run. The rule (docs/consolidation.md):

* a curriculum whose base is the ``mini`` or ``tiny`` preset: that preset's sizes below (the
  demo's for ``mini``, toy steps for ``tiny``);
* a curriculum with a real base (``[base] model = ...``, the paper config): the curriculum's own
  recipe: ``max_steps``, ``per_device_train_batch_size`` and ``learning_rate`` of
  ``[defaults.sft]`` (SDFT) or ``[defaults.rl]`` (MMOPD, MLE), and tasks per domain from the
  largest ``n`` of the stages' phases of that kind; never the mini arena's sizes;
* no curriculum (checkpoints trained elsewhere): nothing to inherit.

What is still missing after that must be given on the command line (``--n``, ``--steps``,
``--batch``, ``--lr``), or the method refuses with one line naming it. Command-line options
override everything (also ``--trl FIELD=VALUE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.consolidate.options import TrainingOptions
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


PRESETS = ("mini", "tiny")
#: which [defaults.*] table (and which phases' n) a method inherits on a real base
KIND = {"sdft": "sft", "mmopd": "rl", "mle": "rl"}
FLAGS = {"n": "--n", "steps": "--steps", "batch": "--batch", "lr": "--lr"}
TRL_FIELDS = {"steps": "max_steps", "batch": "per_device_train_batch_size", "lr": "learning_rate"}


def preset(cfg: Any | None) -> str | None:
    """The base preset of the run's curriculum (``mini`` or ``tiny``); None for a real base or no curriculum."""
    name = getattr(getattr(cfg, "base", None), "preset", None) if cfg is not None else None
    return name if name in PRESETS else None


def inherited(method: str, cfg: Any | None) -> dict[str, Any]:
    """``n``, ``steps``, ``batch``, ``lr`` a method takes from a real base's curriculum (those it sets)."""
    if cfg is None:
        return {}
    kind = KIND[method]
    table = dict(cfg.defaults.get(kind, {}))
    out: dict[str, Any] = {k: table[f] for k, f in TRL_FIELDS.items() if table.get(f) is not None}
    ns = [ph.n for st in cfg.stages for ph in st.phases if ph.kind == kind and ph.n > 0]
    if ns:
        out["n"] = max(ns)
    return out


def sizes(method: str, run_dir: str | Path, options: TrainingOptions) -> Sizes:
    """The method's sizes for this run (the rule in the module docstring), with ``--n``, ``--steps``,
    ``--batch`` and ``--lr`` applied."""
    changes = options.sizes()  # checked positive by the options
    from dataclasses import replace

    cfg = curriculum(run_dir)
    name = preset(cfg)
    if name is not None:
        return replace(DEFAULTS[name][method], **changes)
    settings = inherited(method, cfg) | changes
    missing = [FLAGS[k] for k in FLAGS if k not in settings]
    if missing:
        where = (f"the curriculum's base is not a mini or tiny preset and [defaults.{KIND[method]}] / its "
                 f"{KIND[method]} phases do not set them" if cfg is not None
                 else "the run has no curriculum.toml (trained elsewhere)")
        raise AclarenaError(f"{method} on this run needs {', '.join(missing)}: {where}, and the mini arena's sizes "
                            f"would not fit its model; give e.g. {' '.join(f'{f} N' for f in missing)}")
    bad = {k: v for k, v in settings.items() if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0}
    if bad:
        k, v = next(iter(bad.items()))
        raise AclarenaError(f"{method}: {k} = {v!r} from the curriculum is not a positive number; give {FLAGS[k]}")
    base = DEFAULTS["mini"][method]  # only k, minimum, max_new_tokens come from here: no sizes
    return replace(base, n=int(settings["n"]), steps=int(settings["steps"]), batch=int(settings["batch"]),
                   lr=float(settings["lr"]), extra={})


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
        except RecursionError:  # tomllib recurses per nesting level
            raise AclarenaError(f"--trl {key.strip()}: the value nests too deeply to be a trl setting") from None
        out[key.strip()] = value
    return out
