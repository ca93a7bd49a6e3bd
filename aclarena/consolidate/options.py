"""One validated, frozen options class per consolidation method (peft's habit: a config class per method).

``aclarena-diag consolidate`` and ``Run.consolidate`` build a method's options with :func:`options_for`,
which refuses an option the method does not take in one line (``merge-ties takes no --lora-r``): before,
one union of every method's fields let a merge silently ignore a training option. Each class checks its
values when it is made (:class:`~aclarena.errors.AclarenaError`, one line naming the flag), so a method
reads them as they are. ``None`` keeps a value the method sizes itself (``--lam``: 1 for TIES, 1/K for
DARE; the training sizes from the run's curriculum, :mod:`aclarena.consolidate.recipe`). Torch-free.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from aclarena.errors import AclarenaError, unknown_name

DEFAULT_LAMBDAS = (0.25, 0.5, 0.75, 1.0)
TEACHERS = ("oracle", "stage")
#: trl's ``beta`` of each per-token divergence of MMOPD (reverse KL by default)
DIVERGENCES = {"reverse": 1.0, "forward": 0.0, "js": 0.5}
STARTS = ("base", "end")
ROUTERS = ("rule", "learned", "bandit")
FALLBACKS = ("backbone", "refuse")
ROUTER_REWARDS = ("auto", "measured", "simulated")
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def flag(field_name: str) -> str:
    """The command-line flag of an option (``lora_r`` -> ``--lora-r``)."""
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
class ConsolidateOptions:
    """What every method takes: ``name``, the output name (a prefix where a method makes several)."""

    METHOD: ClassVar[str] = ""
    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise AclarenaError(f"--name must be a non-empty name, got {self.name!r}")

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class MergeOptions(ConsolidateOptions):
    """The merges: ``sources`` are ``stages`` (the stage ends of each replicate), ``oracles`` or a comma list."""

    sources: str = "stages"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.sources, str) or not self.sources.strip():
            raise AclarenaError("--sources must be stages, oracles or a comma list of checkpoints")


@dataclass(frozen=True)
class MergeUniformOptions(MergeOptions):
    METHOD: ClassVar[str] = "merge-uniform"


@dataclass(frozen=True)
class MergeTAOptions(MergeOptions):
    """Task arithmetic: one model per λ of the sweep."""

    METHOD: ClassVar[str] = "merge-ta"
    lambdas: tuple[float, ...] = DEFAULT_LAMBDAS

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "lambdas", tuple(float(x) for x in self.lambdas))
        if not self.lambdas:
            raise AclarenaError("--lambdas is empty; give e.g. 0.25,0.5,1")
        _finite("--lambdas", *self.lambdas)


@dataclass(frozen=True)
class MergeTiesOptions(MergeOptions):
    """TIES: ``density`` of each task vector kept; ``lam`` scales the merged update (None: 1)."""

    METHOD: ClassVar[str] = "merge-ties"
    density: float = 0.2
    lam: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _finite("--density", self.density)
        _finite("--lam", self.lam)


@dataclass(frozen=True)
class MergeDareOptions(MergeOptions):
    """DARE: drop rate ``drop``, rescale by 1/(1-p); ``lam`` scales the sum (None: 1/K)."""

    METHOD: ClassVar[str] = "merge-dare"
    drop: float = 0.5
    lam: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _finite("--drop", self.drop)
        _finite("--lam", self.lam)


@dataclass(frozen=True)
class TrainingOptions(ConsolidateOptions):
    """The methods that train: sizes (None: the run's recipe) and trl overrides (``FIELD=VALUE``)."""

    n: int | None = None
    steps: int | None = None
    batch: int | None = None
    lr: float | None = None
    trl: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "trl", tuple(self.trl))
        for key in ("n", "steps", "batch", "lr"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise AclarenaError(f"--{key} must be positive, got {value}")

    def sizes(self) -> dict[str, Any]:
        """The sizes given (``--n``, ``--steps``, ``--batch``, ``--lr``)."""
        return {k: getattr(self, k) for k in ("n", "steps", "batch", "lr") if getattr(self, k) is not None}


@dataclass(frozen=True)
class SDFTOptions(TrainingOptions):
    """SDFT: train from the ``base`` (default) or from the sequential ``end`` point."""

    METHOD: ClassVar[str] = "sdft"
    start: str = "base"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.start not in STARTS:
            raise AclarenaError(f"--start must be base or end, got {self.start!r}")


@dataclass(frozen=True)
class MMOPDOptions(TrainingOptions):
    """MMOPD: each domain's teacher (``oracle`` or ``stage``) and the per-token divergence."""

    METHOD: ClassVar[str] = "mmopd"
    teachers: str = "oracle"
    divergence: str = "reverse"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.teachers not in TEACHERS:
            raise unknown_name("teacher choice", self.teachers, TEACHERS)
        if self.divergence not in DIVERGENCES:
            raise unknown_name("divergence", self.divergence, DIVERGENCES)


@dataclass(frozen=True)
class MLEOptions(TrainingOptions):
    """MLE: each expert's LoRA (rank, alpha (None: 2 x rank), target modules (None: the projections)), the
    routers trained and scored, what serves when no expert fits, the bandit's success signal."""

    METHOD: ClassVar[str] = "mle"
    lora_r: int = 8
    lora_alpha: int | None = None
    target_modules: str | None = None
    routers: tuple[str, ...] = ROUTERS
    fallback: str = "backbone"
    router_reward: str = "auto"
    routers_only: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "routers", tuple(self.routers))
        if self.lora_r < 1:
            raise AclarenaError(f"--lora-r must be at least 1, got {self.lora_r}")
        if self.lora_alpha is not None and self.lora_alpha < 1:
            raise AclarenaError(f"--lora-alpha must be at least 1, got {self.lora_alpha} (the adapter's scale is "
                                "alpha / r)")
        if self.target_modules is not None and not self.targets():
            raise AclarenaError("--target-modules must name modules, e.g. q_proj,v_proj")
        if not self.routers:
            raise AclarenaError("--routers is empty; name at least one of rule, learned, bandit")
        if self.fallback not in FALLBACKS:
            raise unknown_name("fallback policy", self.fallback, FALLBACKS)
        if self.router_reward not in ROUTER_REWARDS:
            raise unknown_name("router reward", self.router_reward, ROUTER_REWARDS)

    def targets(self) -> list[str]:
        text = ",".join(DEFAULT_TARGETS) if self.target_modules is None else self.target_modules
        return [t.strip() for t in str(text).split(",") if t.strip()]

    def lora(self) -> dict[str, Any]:
        """Rank, alpha and target modules of the experts."""
        return {"r": int(self.lora_r), "lora_alpha": int(2 * self.lora_r if self.lora_alpha is None else self.lora_alpha),
                "target_modules": self.targets()}


OPTIONS: dict[str, type[ConsolidateOptions]] = {cls.METHOD: cls for cls in (
    MergeUniformOptions, MergeTAOptions, MergeTiesOptions, MergeDareOptions, SDFTOptions, MMOPDOptions, MLEOptions)}


def options_for(method: str, given: Mapping[str, Any] | None = None, **options: Any) -> ConsolidateOptions:
    """``method``'s options from ``given`` and ``options`` (an unset one keeps its default); an option the method
    does not take is one line naming the method's own."""
    cls = _options_class(method)
    values = {**(given or {}), **options}
    unknown = [k for k in values if k not in cls.option_names()]
    if unknown:
        takes = ", ".join(flag(k) for k in cls.option_names())
        raise AclarenaError(f"{cls.METHOD} takes no {flag(unknown[0])} (its options: {takes})")
    return cls(**values)


def check_options(method: str, options: ConsolidateOptions | None) -> ConsolidateOptions:
    """``options`` when they are ``method``'s (its defaults when None); another method's options are one line."""
    cls = _options_class(method)
    if options is None:
        return cls()
    if type(options) is not cls:
        raise AclarenaError(f"{cls.METHOD}'s options are a {cls.__name__}, got a {type(options).__name__}; build them "
                            f"with options_for({cls.METHOD!r}, ...)")
    return options


def _options_class(method: str) -> type[ConsolidateOptions]:
    try:
        return OPTIONS[method]
    except KeyError:
        raise unknown_name("consolidation method", method, OPTIONS, hint="see `aclarena-diag consolidate --help`") from None


def _finite(what: str, *values: float | None) -> None:
    for v in values:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)):
            raise AclarenaError(f"{what} must be a finite number, got {v!r}")
