"""The drift monitor's settings: :class:`MonitorSettings` (how a monitor scores and acts, validated once) and the
curriculum's ``[monitor]`` section, :class:`MonitorSpec`, with its parser :func:`parse_monitor`.

The config loader (:mod:`aclarena.train.config`) parses ``[monitor]`` with these; the monitor's glue
(:mod:`aclarena.train.monitor`: probe sets, the callback factory) and the callback
(:class:`~aclarena.train.callbacks.DriftMonitorCallback`) take the validated settings and trust them. The
section's keys are those of :mod:`aclarena.train.monitor`'s docstring and docs/monitor.md. Torch-free: the
diagnostics it validates against are imported when a monitor is set up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from aclarena.envs import DOMAINS
from aclarena.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from aclarena.diagnostics.early_warning import MetricRule
    from aclarena.diagnostics.token_drift import HighEntropy

MONITOR_KEYS = ("stages", "domains", "probes", "probe_n", "probe_max_new_tokens", "probe_seed", "every_n_steps", "high",
                "on_warning", "on_store_error", "batch_size", "thresholds", "trend", "razor")
TREND_KEYS = ("metrics", "alpha", "z", "warmup", "rel_std", "min_std")


class MonitorFieldError(ConfigError):
    """A bad monitor setting; ``path`` is its key under ``[monitor]`` (the config loader adds file and line)."""

    def __init__(self, path: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


def _default_rules() -> dict[str, MetricRule]:
    from aclarena.diagnostics.monitor_metrics import default_rules

    return default_rules()


@dataclass(frozen=True, slots=True)
class MonitorSettings:
    """How a drift monitor scores and acts; validated here, once (the callback trusts it).

    Attributes:
        every_n_steps: score every N optimizer steps (and at the start and the end).
        high: the high-entropy positions, ``"q=0.06"`` (top fraction) or ``"nats=1.5"``, or a ``HighEntropy``
            (stored parsed: :attr:`high_entropy`).
        rules: ``{metric: MetricRule}`` (default: ``default_rules()``); metrics of ``METRICS`` and ``TRAIN_METRICS``.
        on_warning: ``log``, ``save`` or ``stop``.
        on_store_error: ``raise`` or ``continue``.
        batch_size: sequences per scoring forward pass.
    """

    every_n_steps: int = 10
    high: HighEntropy | str = "q=0.06"
    rules: Mapping[str, MetricRule] = field(default_factory=_default_rules)
    on_warning: str = "log"
    on_store_error: str = "raise"
    batch_size: int = 8

    def __post_init__(self) -> None:
        from aclarena.diagnostics.early_warning import MetricRule
        from aclarena.diagnostics.monitor_metrics import ACTIONS, METRICS, TRAIN_METRICS
        from aclarena.diagnostics.token_drift import HighEntropy
        from aclarena.results.monitor_series import STORE_ERRORS

        for name in ("every_n_steps", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise MonitorFieldError((name,), f"{name} must be an integer >= 1, got {v!r}")
        high = self.high
        if isinstance(high, str):
            try:
                high = HighEntropy.parse(high)
            except ValueError as e:
                raise MonitorFieldError(("high",), str(e)) from None
        if not isinstance(high, HighEntropy):
            raise MonitorFieldError(("high",), f"high must be a HighEntropy or 'q=0.06' / 'nats=1.5', got {high!r}")
        object.__setattr__(self, "high", high)
        if self.on_warning not in ACTIONS:
            raise MonitorFieldError(("on_warning",), f"on_warning must be one of {', '.join(ACTIONS)}, got "
                                                     f"{self.on_warning!r}{did_you_mean(str(self.on_warning), ACTIONS)}")
        if self.on_store_error not in STORE_ERRORS:
            raise MonitorFieldError(("on_store_error",),
                                    f"on_store_error must be one of {', '.join(STORE_ERRORS)}, got "
                                    f"{self.on_store_error!r}{did_you_mean(str(self.on_store_error), STORE_ERRORS)}")
        known = [*METRICS, *TRAIN_METRICS]
        for metric, rule in self.rules.items():
            if metric not in known:
                raise MonitorFieldError(("rules", metric), f"no monitor metric {metric!r}{did_you_mean(metric, known)}; "
                                                           f"metrics: {', '.join(known)}")
            if not isinstance(rule, MetricRule):
                raise MonitorFieldError(("rules", metric),
                                        f"the rule of {metric!r} must be a MetricRule, got {type(rule).__name__}")
        object.__setattr__(self, "rules", MappingProxyType(dict(self.rules)))

    @property
    def high_entropy(self) -> HighEntropy:
        """:attr:`high`, parsed (``__post_init__`` stores it so)."""
        return cast("HighEntropy", self.high)


def _int(d: Mapping[str, Any], key: str, default: int, low: int) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise MonitorFieldError((key,), f"`{key}` must be an integer >= {low}, got {v!r}")
    return v


@dataclass(frozen=True, slots=True)
class MonitorSpec:
    """The ``[monitor]`` section (see :mod:`aclarena.train.monitor`); ``rules`` are built from the
    defaults, ``thresholds`` and ``trend``. :attr:`callback` holds the validated callback settings."""

    stages: tuple[str, ...] | None = None
    domains: tuple[str, ...] | None = None
    probes: tuple[str, ...] = ()
    probe_n: int = 8
    probe_max_new_tokens: int = 64
    probe_seed: int = 0
    every_n_steps: int = 10
    high: str = "q=0.06"
    on_warning: str = "log"
    on_store_error: str = "raise"
    batch_size: int = 8
    rules: Mapping[str, MetricRule] = field(default_factory=dict)
    razor: bool = True
    callback: MonitorSettings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.rules:
            object.__setattr__(self, "rules", _default_rules())
        object.__setattr__(self, "rules", MappingProxyType(dict(self.rules)))
        object.__setattr__(self, "callback", MonitorSettings(
            every_n_steps=self.every_n_steps, high=self.high, rules=self.rules, on_warning=self.on_warning,
            on_store_error=self.on_store_error, batch_size=self.batch_size))

    def settings(self) -> dict[str, Any]:
        from aclarena.diagnostics.monitor_metrics import rules_to_json

        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("rules", "callback")}
        d["rules"] = rules_to_json(self.rules)
        return d


def build_rules(thresholds: Mapping[str, Any], trend: Mapping[str, Any]) -> dict[str, MetricRule]:  # noqa: C901
    """Default rules with ``[monitor.thresholds]`` and ``[monitor.trend]`` applied."""
    from aclarena.diagnostics.early_warning import MetricRule, TrendRule
    from aclarena.diagnostics.monitor_metrics import METRICS, TRAIN_METRICS, default_rules

    known = [*METRICS, *TRAIN_METRICS]
    rules = default_rules()
    for metric, value in thresholds.items():
        if metric not in known:
            raise MonitorFieldError(("thresholds", metric),
                                    f"no monitor metric {metric!r}{did_you_mean(metric, known)}; metrics: {', '.join(known)}")
        old = rules.get(metric, MetricRule())
        if value == "off":
            rules[metric] = dataclasses.replace(old, threshold=None)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            rules[metric] = dataclasses.replace(old, threshold=float(value))
        else:
            raise MonitorFieldError(("thresholds", metric), f"threshold of {metric!r} must be a number or \"off\", "
                                                            f"got {value!r}")
    for key in trend:
        if key not in TREND_KEYS:
            raise MonitorFieldError(("trend", key), f"unknown key {key!r} in [monitor.trend]{did_you_mean(key, TREND_KEYS)}; "
                                                    f"allowed: {', '.join(TREND_KEYS)}")
    if trend:
        base = next((r.trend for r in rules.values() if r.trend is not None), TrendRule())
        shared: dict[str, Any] = {k: trend[k] for k in ("alpha", "z", "warmup", "rel_std") if k in trend}
        min_std = trend.get("min_std", {})
        if isinstance(min_std, int | float) and not isinstance(min_std, bool):
            min_std = {m: float(min_std) for m in known}
        if not isinstance(min_std, Mapping):
            raise MonitorFieldError(("trend", "min_std"), "`min_std` must be a number or a table {metric = value}")
        metrics = trend.get("metrics", [m for m, r in rules.items() if r.trend is not None])
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise MonitorFieldError(("trend", "metrics"), "`metrics` must be a list of metric names")
        for m in [*metrics, *min_std]:
            if m not in known:
                raise MonitorFieldError(("trend", "metrics"),
                                        f"no monitor metric {m!r}{did_you_mean(m, known)}; metrics: {', '.join(known)}")
        for m in known:
            old = rules.get(m, MetricRule())
            if m not in metrics:
                if old.trend is not None:
                    rules[m] = dataclasses.replace(old, trend=None)
                continue
            t = old.trend or base
            try:
                changes = shared | ({"min_std": float(min_std[m])} if m in min_std else {})
                t = dataclasses.replace(t, **changes)
            except (ValueError, TypeError) as e:
                raise MonitorFieldError(("trend",), f"[monitor.trend]: {e}") from None
            rules[m] = dataclasses.replace(old, trend=t)
    return {k: v for k, v in rules.items() if v.active}


def parse_monitor(data: Any, stage_domains: Sequence[str]) -> MonitorSpec:
    """The ``[monitor]`` table as a :class:`MonitorSpec`; errors are :class:`MonitorFieldError` (with the key path)."""
    if not isinstance(data, Mapping):
        raise MonitorFieldError((), "[monitor] must be a table")
    for key in data:
        if key not in MONITOR_KEYS:
            raise MonitorFieldError((key,), f"unknown key {key!r} in [monitor]{did_you_mean(key, MONITOR_KEYS)}; "
                                            f"allowed: {', '.join(MONITOR_KEYS)}")

    def names(key: str, allowed: Sequence[str] | None) -> tuple[str, ...] | None:
        if key not in data:
            return None
        v = data[key]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise MonitorFieldError((key,), f"`{key}` must be a list of names")
        for x in v:
            if allowed is not None and x not in allowed:
                raise MonitorFieldError((key,), f"{key}: {x!r} is not a stage domain of this curriculum"
                                                f"{did_you_mean(x, allowed)}; stages: {', '.join(allowed)}")
        return tuple(v)

    stages = names("stages", stage_domains)
    domains = names("domains", list(DOMAINS))
    probes = names("probes", None) or ()
    thresholds = data.get("thresholds", {})
    trend = data.get("trend", {})
    if not isinstance(thresholds, Mapping):
        raise MonitorFieldError(("thresholds",), "[monitor.thresholds] must be a table {metric = value}")
    if not isinstance(trend, Mapping):
        raise MonitorFieldError(("trend",), "[monitor.trend] must be a table")
    for key in ("high", "on_warning", "on_store_error"):
        if key in data and not isinstance(data[key], str):
            raise MonitorFieldError((key,), f"`{key}` must be a string, got {data[key]!r}")
    razor = data.get("razor", True)
    if not isinstance(razor, bool):
        raise MonitorFieldError(("razor",), f"`razor` must be true or false, got {razor!r}")
    return MonitorSpec(
        stages=stages, domains=domains, probes=probes, probe_n=_int(data, "probe_n", 8, 1),
        probe_max_new_tokens=_int(data, "probe_max_new_tokens", 64, 1), probe_seed=_int(data, "probe_seed", 0, 0),
        every_n_steps=_int(data, "every_n_steps", 10, 1), high=data.get("high", "q=0.06"),
        on_warning=data.get("on_warning", "log"), on_store_error=data.get("on_store_error", "raise"),
        batch_size=_int(data, "batch_size", 8, 1), rules=build_rules(thresholds, trend), razor=razor,
    )
