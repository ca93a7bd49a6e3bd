"""The curriculum's ``[monitor]`` section: a drift monitor on the later stages of a run.

With a ``[monitor]`` table in the curriculum TOML, every phase of a monitored stage (by
default every stage after the first) trains with a
:class:`~aclarena.train.callbacks.DriftMonitorCallback` whose probe sets are frozen
generations of the earlier stages' checkpoints on their own domains (``monitor-math`` is
seq-math answering math prompts), stored in results.h5 under ``probes/`` the first time
they are needed. The probe's reference is that checkpoint; the stage-start policy is the
parent of the stage's first phase (so the RL phase of a two-phase stage is still compared
with the stage start). With ``razor = true`` (the default) one more probe set,
``razor-<domain>``, holds the stage-start policy's own generations on training prompts of the
stage being trained: its ``fkl`` is RL's Razor's predictor as the paper defines it (Shenfeld et
al. 2025, arXiv 2509.04259: the forward KL ``KL(π_0 ‖ π)`` on the *new* task's distribution),
while the ``fkl`` of the ``monitor-*`` probes is an adaptation of it to the earlier tasks'
distribution. Scalars go to the run's ``series.h5`` under ``monitor/<phase>``::

    [monitor]
    stages = ["ecom", "if"]        # default: every stage after the first
    domains = ["math", "search"]   # earlier domains to probe (default: all earlier ones)
    probes = []                    # extra probe sets already in results.h5 (aclarena-diag probe)
    probe_n = 8                    # prompts per domain probe set
    probe_max_new_tokens = 64
    razor = true                   # also probe the trained stage's own prompts (RL's Razor)
    every_n_steps = 10
    high = "q=0.06"
    on_warning = "log"             # log | save | stop
    on_store_error = "raise"       # raise | continue

    [monitor.thresholds]           # absolute limits (metric = value, or "off"); provisional defaults
    fkl = 0.05
    [monitor.trend]                # the EWMA z-score rule
    metrics = ["kl_high", "kl_all", "flip_high", "fkl"]
    z = 3.0

docs/monitor.md lists every key, the metrics and where the provisional default limits come from
(one mini run; not yet fitted on held-out seeds).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from aclarena.diagnostics.early_warning import MetricRule, TrendRule
from aclarena.envs import DOMAINS
from aclarena.errors import AclarenaError, ConfigError, did_you_mean

if TYPE_CHECKING:
    from aclarena.train.config import CurriculumConfig
    from aclarena.train.curriculum import Job

MONITOR_KEYS = ("stages", "domains", "probes", "probe_n", "probe_max_new_tokens", "probe_seed", "every_n_steps", "high",
                "on_warning", "on_store_error", "batch_size", "thresholds", "trend", "razor")
TREND_KEYS = ("metrics", "alpha", "z", "warmup", "rel_std", "min_std")
PROBE_PREFIX = "monitor-"
#: probe sets of the stage being trained: the stage start's generations on its training prompts
RAZOR_PREFIX = "razor-"


class MonitorFieldError(ConfigError):
    def __init__(self, path: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


def _int(d: Mapping[str, Any], key: str, default: int, low: int) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise MonitorFieldError((key,), f"`{key}` must be an integer >= {low}, got {v!r}")
    return v


@dataclass(frozen=True, slots=True)
class MonitorSpec:
    """The ``[monitor]`` section (see the module docstring); ``rules`` are built from the
    defaults, ``thresholds`` and ``trend``."""

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

    def __post_init__(self) -> None:
        from aclarena.diagnostics.monitor_metrics import ACTIONS, default_rules
        from aclarena.diagnostics.token_drift import HighEntropy
        from aclarena.store.monitor_series import STORE_ERRORS

        try:
            HighEntropy.parse(self.high)
        except ValueError as e:
            raise MonitorFieldError(("high",), str(e)) from None
        if self.on_warning not in ACTIONS:
            raise MonitorFieldError(("on_warning",), f"`on_warning` must be one of {', '.join(ACTIONS)}, got "
                                                     f"{self.on_warning!r}{did_you_mean(str(self.on_warning), ACTIONS)}")
        if self.on_store_error not in STORE_ERRORS:
            raise MonitorFieldError(("on_store_error",),
                                    f"`on_store_error` must be one of {', '.join(STORE_ERRORS)}, got "
                                    f"{self.on_store_error!r}{did_you_mean(str(self.on_store_error), STORE_ERRORS)}")
        if not self.rules:
            object.__setattr__(self, "rules", default_rules())
        object.__setattr__(self, "rules", MappingProxyType(dict(self.rules)))

    def settings(self) -> dict[str, Any]:
        from aclarena.diagnostics.monitor_metrics import rules_to_json

        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "rules"}
        d["rules"] = rules_to_json(self.rules)
        return d


def build_rules(thresholds: Mapping[str, Any], trend: Mapping[str, Any]) -> dict[str, MetricRule]:
    """Default rules with ``[monitor.thresholds]`` and ``[monitor.trend]`` applied."""
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


# --- probe sets of earlier stages ---------------------------------------------------------------


def domain_probe(run_dir: str | os.PathLike[str], checkpoint: str, folder: str | os.PathLike[str], domain: str, *,
                 name: str, n: int, max_new_tokens: int, seed: int = 0, batch_size: int = 8,
                 split: str = "eval") -> Any:
    """The probe set ``name``: ``checkpoint``'s greedy generations on ``n`` prompts of ``domain`` (``split``:
    held-out ``eval`` prompts, or ``train`` prompts for a stage's own RL's Razor probe).

    Read from results.h5 when it is there with the same settings (and the checkpoint has not
    changed since), otherwise generated and stored.
    """
    from aclarena.envs import sample_prompts
    from aclarena.models.chat import choose_prompt_format, has_template
    from aclarena.models.checkpoint import tokenizer_fingerprint
    from aclarena.probes.generation import GenerationSettings, generate_probe_set, model_max_length
    from aclarena.probes.probe_set import list_probe_sets, read_probe_set, write_probe_set
    from aclarena.store import ResultsStore
    from aclarena.train.phases import load_start, read_marker

    store = ResultsStore(run_dir)
    folder = Path(folder)
    marker = read_marker(folder) or {}
    want = {"source": "monitor", "domain": domain, "n": n, "max_new_tokens": max_new_tokens, "seed": seed,
            "checkpoint_fingerprint": marker.get("fingerprint")}
    if split != "eval":  # eval probes keep the identity they were stored with
        want["split"] = split
    if name in list_probe_sets(store):
        probe = read_probe_set(store, name)
        have = {k: probe.settings.get(k) for k in want}
        if have == want and probe.reference == checkpoint:
            return probe
    model, tok = load_start(folder, require_chat_template=False)
    tok.padding_side = "left"
    # prompted as eval prompts it: a checkpoint without a chat template (a base) as plain text (issue 45)
    prompt_format, note = choose_prompt_format(None, has_template(tok), checkpoint=checkpoint)
    if note is not None:
        logging.getLogger("aclarena.monitor").info("probe %s: %s", name, note)
    prompts = sample_prompts(domain, n, seed, split=split, suite="id")
    settings = GenerationSettings(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed, batch_size=batch_size)
    made = generate_probe_set(model, tok, prompts, name=name, reference=checkpoint, settings=settings,
                              max_length=model_max_length(model), source="domain", prompt_format=prompt_format)
    assert made is not None  # None only for the other ranks of a `world`, and none is given here
    probe = made
    probe.settings.update(want)
    probe.settings["tokenizer"] = tokenizer_fingerprint(folder)
    del model
    manifest = Path(run_dir) / "aclarena.toml"
    write_probe_set(store, probe, overwrite=True,
                    manifest_text=manifest.read_text(encoding="utf-8") if manifest.is_file() else None)
    return probe


# --- the factory the curriculum runner calls ----------------------------------------------------


def monitor_factory(cfg: CurriculumConfig, out: str | os.PathLike[str], jobs: Sequence[Job],
                    folders: Callable[[str], str]) -> Callable[[Job], list[Any]]:
    """``factory(job) -> [DriftMonitorCallback]`` for :func:`aclarena.train.curriculum.run_curriculum`.

    ``folders(name)`` gives a trained checkpoint's location (a folder under ``out`` or the HF base).
    """
    spec = cfg.monitor
    assert spec is not None  # built only for a curriculum with a [monitor] table
    out = Path(out)
    by_name = {j.name: j for j in jobs}
    order = [s.domain for s in cfg.stages]
    monitored = set(spec.stages) if spec.stages is not None else set(order[1:])

    def factory(job: Job) -> list[Any]:
        from aclarena.probes.probe_set import read_probe_set
        from aclarena.store import ResultsStore
        from aclarena.train.callbacks import DriftMonitorCallback
        from aclarena.train.naming import phase_names, replicate_suffix
        from aclarena.train.phases import finished, is_main_process, wait_for_everyone

        if job.kind != "stage" or job.domain is None or job.domain not in monitored:
            return []
        if finished(out / "checkpoints" / job.name, job.fingerprint) is not None:
            return []
        i = order.index(job.domain)
        earlier = [cfg.stages[k] for k in range(i)]
        if spec.domains is not None:
            earlier = [s for s in earlier if s.domain in spec.domains]
        r = job.replicate
        suffix = replicate_suffix(r)
        wanted: list[tuple[str, str, str]] = []  # (probe name, checkpoint, domain)
        for st in earlier:
            ckpt = phase_names("seq", st, r)[-1]
            wanted.append((f"{PROBE_PREFIX}{st.domain}{suffix}", ckpt, st.domain))
        stage = cfg.stages[i]
        first = by_name[phase_names("seq", stage, r)[0]]
        splits = {name: "eval" for name, _, _ in wanted}
        if spec.razor and first.parent is not None:
            # RL's Razor as the paper measures it: π_0's own generations on the new task's prompts
            name = f"{RAZOR_PREFIX}{job.domain}{suffix}"
            wanted.append((name, first.parent, job.domain))
            splits[name] = "train"
        if not wanted and not spec.probes:
            return []
        if is_main_process():
            for name, ckpt, domain in wanted:
                domain_probe(out, ckpt, folders(ckpt), domain, name=name, n=spec.probe_n,
                             max_new_tokens=spec.probe_max_new_tokens, seed=spec.probe_seed,
                             batch_size=spec.batch_size, split=splits[name])
        wait_for_everyone()
        store = ResultsStore(out)
        probes = [read_probe_set(store, name) for name, _, _ in wanted]
        references: dict[str, Any] = {name: folders(ckpt) for name, ckpt, _ in wanted}
        known = {j.name for j in jobs}
        for extra in spec.probes:
            p = read_probe_set(store, extra)
            probes.append(p)
            if p.reference in known:
                references[p.name] = folders(p.reference)
        start = folders(first.parent) if first.parent is not None else None
        return [DriftMonitorCallback(
            probes, run_dir=out, label=job.name, references=references, stage_start=start,
            every_n_steps=spec.every_n_steps, high=spec.high, rules=spec.rules, on_warning=spec.on_warning,
            on_store_error=spec.on_store_error, batch_size=spec.batch_size)]

    return factory


def with_on_warning(cfg: CurriculumConfig, action: str) -> CurriculumConfig:
    """``cfg`` with its monitor acting ``action`` on warnings (a default monitor when it has none)."""
    spec = cfg.monitor if cfg.monitor is not None else MonitorSpec()
    if action not in ("log", "save", "stop"):
        raise AclarenaError(f"unknown warning action {action!r}")
    return dataclasses.replace(cfg, monitor=dataclasses.replace(spec, on_warning=action))
