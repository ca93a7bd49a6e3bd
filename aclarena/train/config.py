"""Curriculum configs: a TOML file naming the base, the stages in order, their phases and the oracles.

A curriculum is the study's recipe written down: a base model, then stages (a domain each)
trained one after the other, each with an SFT phase, an RL phase or both, then one
single-task oracle per domain trained from the base with its stage's recipe. Format
(docs/training.md has every key)::

    [run]
    name = "mini"
    seed = 0

    [base]
    preset = "mini"                  # or model = "Qwen/Qwen3-8B-Base" (an HF id or folder)

    [defaults.rl]                    # GRPOConfig overrides of every RL phase
    learning_rate = 5e-5

    [[stages]]
    domain = "math"
    phases = ["sft", "rl"]
    [stages.sft]
    n = 1200
    note = "warm-up: the tiny base earns no reward without it"
    [stages.sft.trl]                 # SFTConfig overrides of this phase
    max_steps = 150

    [oracles]
    domains = ["math", "search", "ecom", "if"]

Configs are frozen dataclasses validated in ``__post_init__``. A mistake (an unknown key,
domain, phase or trl field, a value of the wrong type) is one :class:`ConfigError` line that
names the file and the line and offers a did-you-mean. trl overrides are checked against the
fields of trl's ``SFTConfig`` / ``GRPOConfig``, so a typo fails before any training starts.
Precedence, highest first: the command line (``--trl``), the phase's ``trl`` table, the
config's ``[defaults.sft]`` / ``[defaults.rl]``, then aclarena's defaults (:mod:`.phases`).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from aclarena.envs import DOMAINS
from aclarena.errors import ConfigError, did_you_mean
from aclarena.train.monitor_spec import MonitorFieldError, MonitorSpec, parse_monitor
from aclarena.train.naming import phase_names
from aclarena.train.trl_fields import FieldError, check_trl, trl_fields

PHASE_KINDS = ("sft", "rl")
SFT_SOURCES = ("expert", "rejection", "file")
RL_SOURCES = ("arena", "file")
#: where a rejection-sampling SFT phase trains on expert demonstrations instead (pass@k = 0)
FALLBACKS = ("none", "expert", "expert-if-empty")
PRESETS = ("mini", "tiny")
IMPORT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _check_trl_field(kind: str, overrides: Mapping[str, Any]) -> None:
    try:
        check_trl(kind, overrides)
    except FieldError as e:
        raise FieldError(f"trl.{e.field}", str(e)) from None


def _frozen(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d or {}))


# --- the config dataclasses ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PhaseSpec:
    """One phase of a stage.

    Attributes:
        kind: ``sft`` or ``rl``.
        data: SFT: ``expert`` (the arena's scripted experts), ``rejection`` (reward-1 samples of
            the phase's starting model, ``k`` per task) or ``file`` (conversations from ``path``);
            RL: ``arena`` (the domain's environment and verifiable reward) or ``file`` (prompts
            from ``path`` scored by the ``reward`` function).
        n: number of training tasks (arena data) or records to use from the file (0: all).
        k: samples per task for rejection sampling.
        max_per_task: rejection sampling: verified samples kept per task (0: every distinct one).
        fallback: rejection sampling, for tasks whose pass@k is 0: ``none`` (nothing; the phase stops if
            no task is solved), ``expert`` (that task's expert demonstration), ``expert-if-empty``
            (expert demonstrations of every task, only when no task is solved: a bootstrap).
        path: a JSONL/JSON/Parquet file for ``data = "file"``.
        reward: ``module:function`` reward for ``data = "file"`` RL (trl's reward signature).
        rollout: ``module:function`` returning a trl ``rollout_func`` for multi-turn tool episodes
            of ``data = "file"`` RL (called with the phase's settings; see docs/training.md).
        max_turns: RL on arena tool domains: turn limit of an episode (default: the environment's).
        max_new_tokens: RL on the arena: tokens per assistant turn (default: the environment's budget).
        trl: ``SFTConfig`` / ``GRPOConfig`` overrides of this phase.
        note: why the phase is there (e.g. an SFT warm-up where the study is RL-only).
    """

    kind: str
    data: str = ""
    n: int = 0
    k: int = 4
    max_per_task: int = 0
    fallback: str = "none"
    path: str | None = None
    reward: str | None = None
    rollout: str | None = None
    max_turns: int | None = None
    max_new_tokens: int | None = None
    trl: Mapping[str, Any] = field(default_factory=dict)
    note: str | None = None

    def __post_init__(self) -> None:
        self._check_source()
        self._check_counts()
        self._check_arena_limits()
        self._check_file_fields()
        _check_trl_field(self.kind, self.trl)
        object.__setattr__(self, "trl", _frozen(self.trl))

    def _check_source(self) -> None:
        """``kind`` known, ``data`` one of its sources (the first one when not given)."""
        if self.kind not in PHASE_KINDS:
            raise FieldError("kind", f"unknown phase {self.kind!r}{did_you_mean(self.kind, PHASE_KINDS)}; "
                                     f"phases are {', '.join(PHASE_KINDS)}")
        sources = SFT_SOURCES if self.kind == "sft" else RL_SOURCES
        if not self.data:
            object.__setattr__(self, "data", sources[0])
        if self.data not in sources:
            raise FieldError("data", f"unknown {self.kind} data source {self.data!r}{did_you_mean(self.data, sources)}; "
                                     f"use one of {', '.join(sources)}")

    def _check_counts(self) -> None:
        """``n``, ``k`` and rejection sampling's ``max_per_task`` and ``fallback``."""
        for name in ("n", "k", "max_per_task"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise FieldError(name, f"`{name}` must be an integer >= 0, got {v!r}")
        if self.data != "file" and self.n < 1:
            raise FieldError("n", f"`n` (training tasks) must be >= 1 for {self.data} data, got {self.n}")
        if self.k < 1:
            raise FieldError("k", f"`k` (samples per task) must be >= 1, got {self.k}")
        if self.fallback not in FALLBACKS:
            raise FieldError("fallback", f"unknown fallback {self.fallback!r}{did_you_mean(str(self.fallback), FALLBACKS)}; "
                                         f"use one of {', '.join(FALLBACKS)}")
        for name, default in (("max_per_task", 0), ("fallback", "none")):
            if getattr(self, name) != default and self.data != "rejection":
                raise FieldError(name, f'`{name}` applies to rejection-sampling SFT (data = "rejection"); this phase '
                                       f'has data = "{self.data}"')

    def _check_arena_limits(self) -> None:
        """``max_turns`` and ``max_new_tokens``: RL on the arena only, positive."""
        for name in ("max_turns", "max_new_tokens"):
            v = getattr(self, name)
            if v is None:
                continue
            if self.kind != "rl" or self.data != "arena":
                raise FieldError(name, f"`{name}` applies to RL phases on the arena (data = \"arena\")")
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise FieldError(name, f"`{name}` must be a positive integer, got {v!r}")

    def _check_file_fields(self) -> None:
        """``path``, ``reward`` and ``rollout``: with data = "file" only (an RL one needs its reward)."""
        if self.data == "file" and not self.path:
            raise FieldError("data", 'data = "file" needs path = "<file.jsonl>"')
        if self.path is not None and self.data != "file":
            raise FieldError("path", f'`path` is read only with data = "file" (this phase has data = "{self.data}")')
        for name, what in (("reward", '`reward` goes with an RL phase of data = "file"'),
                           ("rollout", '`rollout` goes with an RL phase of data = "file" (the arena has its own)')):
            value = getattr(self, name)
            if value is None:
                continue
            if self.kind != "rl" or self.data != "file":
                raise FieldError(name, what)
            if not IMPORT_RE.match(value):
                raise FieldError(name, f"`{name}` must be 'module:function', got {value!r}")
        if self.kind == "rl" and self.data == "file" and self.reward is None:
            raise FieldError("reward", 'an RL phase with data = "file" needs reward = "module:function"')

    def identity(self) -> dict[str, Any]:
        """What decides the phase's outcome (its fingerprint; notes excluded)."""
        out = {"kind": self.kind, "data": self.data, "n": self.n, "k": self.k if self.data == "rejection" else None,
               "path": self.path, "reward": self.reward, "rollout": self.rollout, "max_turns": self.max_turns,
               "max_new_tokens": self.max_new_tokens, "trl": dict(sorted(self.trl.items()))}
        if self.data == "rejection" and (self.max_per_task or self.fallback != "none"):
            # only when set: the fingerprints of phases trained before these fields existed stay
            out |= {"max_per_task": self.max_per_task, "fallback": self.fallback}
        return out


@dataclass(frozen=True, slots=True)
class StageSpec:
    """A stage of the curriculum: one domain, its phases in order, and what it starts from.

    ``parent`` is ``None`` (the previous stage's end, or the base for the first) or the name of a
    checkpoint of this curriculum trained before it (``base``, ``seq-math-sft``, ``seq-math``...),
    for curricula that branch (another order, a stage trained from the base).
    """

    domain: str
    phases: tuple[PhaseSpec, ...]
    parent: str | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        if self.domain not in DOMAINS:
            raise FieldError("domain", f"unknown domain {self.domain!r}{did_you_mean(self.domain, DOMAINS)}; "
                                       f"domains are {', '.join(DOMAINS)}")
        if not self.phases:
            raise FieldError("phases", 'a stage needs at least one phase: phases = ["sft"], ["rl"] or ["sft", "rl"]')
        kinds = [p.kind for p in self.phases]
        if len(set(kinds)) != len(kinds):
            raise FieldError("phases", f"phases {kinds} repeat a phase; each phase appears once")
        if kinds == ["rl", "sft"]:
            raise FieldError("phases", 'phases run SFT before RL; write phases = ["sft", "rl"]')
        if self.parent is not None and (not isinstance(self.parent, str) or not self.parent):
            raise FieldError("parent", "`parent` must be the name of an earlier checkpoint (base, seq-math, ...)")


@dataclass(frozen=True, slots=True)
class BaseSpec:
    """Stage 0. ``model`` (an HF hub id or folder) for real runs; otherwise the mini arena's base:
    ``preset = "mini"`` starts from the base shipped inside the package
    (:mod:`aclarena.models.shipped`, fingerprint-checked); ``rebuild = true`` (or ``preset =
    "tiny"``) builds one instead: a tokenizer trained on the arena's text, a small Qwen3 and a
    pretraining on what a base model knows (the world's passages, chat, multiple-choice
    practice, generic tool use, copying, instructions, arithmetic) and none of the task formats.
    The sizes and counts below apply only when the base is built; their defaults are those of
    the shipped base (examples/mini-base.toml). ``trl`` overrides the pretraining's
    ``SFTConfig``."""

    model: str | None = None
    preset: str | None = None
    chat_template: str | None = None
    vocab_size: int = 1000
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 8
    num_kv_heads: int = 4
    intermediate_size: int = 768
    max_positions: int = 1024
    chat_examples: int = 2400
    mc_examples: int = 4800
    tool_examples: int = 4000
    arithmetic_examples: int = 2000
    copy_examples: int = 60000
    tool_chain_examples: int = 20000
    instruction_examples: int = 12000
    story_examples: int = 4000
    passage_repeats: int = 12
    rebuild: bool = False
    trl: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.model is not None and self.preset is not None:
            raise FieldError("model", "[base] takes `model` (an HF id or folder) or `preset`, not both")
        if self.model is None and self.preset is None:
            object.__setattr__(self, "preset", "mini")
        if self.preset is not None and self.preset not in PRESETS:
            raise FieldError("preset", f"unknown base preset {self.preset!r}{did_you_mean(self.preset, PRESETS)}; "
                                       f"presets are {', '.join(PRESETS)}")
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise FieldError("model", "`model` must be an HF hub id or a folder")
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
                     "max_positions"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise FieldError(name, f"`{name}` must be a positive integer, got {v!r}")
        for name in ("chat_examples", "mc_examples", "tool_examples", "arithmetic_examples", "copy_examples",
                     "tool_chain_examples", "instruction_examples", "story_examples", "passage_repeats"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise FieldError(name, f"`{name}` must be an integer >= 0, got {v!r}")
        if self.hidden_size % self.num_heads:
            raise FieldError("hidden_size", f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise FieldError("num_kv_heads", f"num_heads {self.num_heads} is not a multiple of num_kv_heads "
                                             f"{self.num_kv_heads}")
        if not isinstance(self.rebuild, bool):
            raise FieldError("rebuild", f"`rebuild` must be true or false, got {self.rebuild!r}")
        if self.rebuild and self.preset != "mini":
            raise FieldError("rebuild", "`rebuild = true` pretrains the mini base from scratch; it needs preset = \"mini\"")
        _check_trl_field("sft", self.trl)
        object.__setattr__(self, "trl", _frozen(self.trl))

    @property
    def is_mini(self) -> bool:
        return self.model is None

    @property
    def builds(self) -> bool:
        """Whether the base is pretrained by this run (``tiny``, or ``mini`` with ``rebuild = true``);
        ``mini`` without ``rebuild`` starts from the base shipped inside the package."""
        return self.preset == "tiny" or (self.preset == "mini" and self.rebuild)

    def identity(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["trl"] = dict(sorted(self.trl.items()))
        return d


@dataclass(frozen=True, slots=True)
class CurriculumConfig:
    """A whole curriculum: base, stages in order, oracles, defaults, seed.

    ``oracles`` lists the domains whose single-task oracle is trained (from the base, with
    the recipe of that domain's stage). ``defaults`` maps ``sft`` / ``rl`` to trl overrides of
    every phase of that kind. ``source`` is the file it came from (for messages).
    """

    name: str = "curriculum"
    seed: int = 0
    description: str | None = None
    base: BaseSpec = field(default_factory=BaseSpec)
    stages: tuple[StageSpec, ...] = ()
    oracles: tuple[str, ...] = ()
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    keep_trainer_checkpoints: bool = False
    monitor: MonitorSpec | None = None  # when the config has [monitor]
    source: str = "<config>"

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise FieldError("seed", f"`seed` must be an integer >= 0, got {self.seed!r}")
        if not self.stages and not self.base.builds:
            raise FieldError("stages", "the curriculum has no stage; add [[stages]] tables with a domain each "
                                       "(only a config that builds its base, [base] rebuild = true, may have none)")
        seen: dict[str, int] = {}
        for i, s in enumerate(self.stages):
            if s.domain in seen:
                raise FieldError(f"stages.{i}.domain",
                                 f"domain {s.domain!r} has two stages ({seen[s.domain] + 1} and {i + 1}); checkpoint "
                                 "names (seq-<domain>) need one stage per domain")
            seen[s.domain] = i
        for i, d in enumerate(self.oracles):
            if d not in DOMAINS:
                raise FieldError(f"oracles.domains.{i}", f"unknown oracle domain {d!r}{did_you_mean(d, DOMAINS)}; "
                                                         f"domains are {', '.join(DOMAINS)}")
            if d not in seen:
                raise FieldError(f"oracles.domains.{i}",
                                 f"oracle domain {d!r} has no stage to take its recipe from; add a stage for it or "
                                 "remove it from [oracles]")
        if len(set(self.oracles)) != len(self.oracles):
            raise FieldError("oracles.domains", f"oracle domains repeat: {list(self.oracles)}")
        for kind, over in self.defaults.items():
            if kind not in PHASE_KINDS:
                raise FieldError(f"defaults.{kind}", f"unknown table [defaults.{kind}]{did_you_mean(kind, PHASE_KINDS)}; "
                                                     "use [defaults.sft] or [defaults.rl]")
            try:
                check_trl(kind, over)
            except FieldError as e:
                raise FieldError(f"defaults.{kind}.{e.field}", str(e)) from None
        object.__setattr__(self, "defaults", MappingProxyType({k: _frozen(v) for k, v in self.defaults.items()}))
        object.__setattr__(self, "oracles", tuple(self.oracles))

    def stage(self, domain: str) -> StageSpec:
        for s in self.stages:
            if s.domain == domain:
                return s
        raise ConfigError(f"the curriculum has no {domain!r} stage")


# --- loading ---------------------------------------------------------------------------------

RUN_KEYS = ("name", "seed", "description", "keep_trainer_checkpoints")
BASE_KEYS = tuple(f.name for f in dataclasses.fields(BaseSpec))
STAGE_KEYS = ("domain", "phases", "parent", "note", *PHASE_KINDS)
PHASE_KEYS = ("data", "n", "k", "max_per_task", "fallback", "path", "reward", "rollout", "max_turns", "max_new_tokens", "trl", "note")
TOP_KEYS = ("run", "base", "defaults", "stages", "oracles", "monitor")
ORACLE_KEYS = ("domains",)


class _Where:
    """File and line of a key path, for error messages."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.lines = key_lines(text)

    def __call__(self, path: Sequence[str | int]) -> str:
        key = tuple(path)
        while key:
            if key in self.lines:
                return f"{self.source}, line {self.lines[key]}"
            key = key[:-1]
        return self.source


_HEADER_RE = re.compile(r"^\s*(\[\[|\[)\s*(.+?)\s*(\]\]|\])\s*(#.*)?$")
_KEY_RE = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")
_INLINE_KEY_RE = re.compile(r"""(?:[{,]\s*)([A-Za-z0-9_-]+|"[^"]*")\s*=""")


def _split_dotted(text: str) -> list[str]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", text)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def key_lines(text: str) -> dict[tuple[str | int, ...], int]:
    """Line numbers (1-based) of every table and key of a TOML text, by path.

    Paths index arrays of tables by position (``("stages", 2, "rl", "trl", "learning_rate")``);
    keys of inline tables get the line of the table. Good enough for error messages, not a parser.
    """
    lines: dict[tuple[str | int, ...], int] = {}
    counts: dict[tuple[str, ...], int] = {}
    table: tuple[str | int, ...] = ()

    def resolve(parts: list[str]) -> tuple[str | int, ...]:
        out: list[str | int] = []
        for i, p in enumerate(parts):
            out.append(p)
            prefix = tuple(parts[: i + 1])
            if prefix in counts:
                out.append(counts[prefix])
        return tuple(out)

    in_multiline = False
    for no, line in enumerate(text.splitlines(), 1):
        if in_multiline:
            if line.count('"""') % 2 == 1 or line.count("'''") % 2 == 1:
                in_multiline = False
            continue
        m = _HEADER_RE.match(line)
        if m and not line.lstrip().startswith("#"):
            parts = _split_dotted(m.group(2))
            if m.group(1) == "[[":
                key = tuple(parts)
                counts[key] = counts.get(key, -1) + 1
                table = (*resolve(parts[:-1]), parts[-1], counts[key])
            else:
                table = resolve(parts)
            lines.setdefault(table, no)
            continue
        m = _KEY_RE.match(line)
        if m:
            path = (*table, *_split_dotted(m.group(1)))
            lines.setdefault(path, no)
            rest = line[m.end():]
            for k in _INLINE_KEY_RE.finditer(rest):
                lines.setdefault((*path, _split_dotted(k.group(1))[0]), no)
            if rest.count('"""') % 2 == 1 or rest.count("'''") % 2 == 1:
                in_multiline = True
    return lines


def _check_keys(d: Mapping[str, Any], allowed: Sequence[str], path: tuple[str | int, ...], where: _Where,
                what: str) -> None:
    for key in d:
        if key not in allowed:
            raise ConfigError(f"{where((*path, key))}: unknown key {key!r} in {what}{did_you_mean(key, allowed)}; "
                              f"allowed: {', '.join(allowed)}")


def _table(d: Any, path: tuple[str | int, ...], where: _Where, what: str) -> Mapping[str, Any]:
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where(path)}: {what} must be a table, got {d!r}")
    return d


def _build(cls: Callable[..., Any], kwargs: dict[str, Any], path: tuple[str | int, ...], where: _Where,
           field_paths: Mapping[str, tuple[str | int, ...]] | None = None) -> Any:
    """Construct a config dataclass; a FieldError gets the line of its field."""
    try:
        return cls(**kwargs)
    except FieldError as e:
        parts: tuple[str | int, ...] = tuple(int(p) if p.isdigit() else p for p in e.field.split("."))
        if field_paths and parts[0] in field_paths:
            full = (*field_paths[str(parts[0])], *parts[1:])
        else:
            full = (*path, *parts)
        raise ConfigError(f"{where(full)}: {e}") from None
    except TypeError as e:
        raise ConfigError(f"{where(path)}: {e}") from None


def parse_config(text: str, source: str = "<config>", *, overrides: Sequence[str] = ()) -> CurriculumConfig:
    """Parse and validate a curriculum TOML text; ``overrides`` are ``--trl`` items (see :func:`apply_overrides`)."""
    from aclarena.store.manifest import read_toml

    data = read_toml(text, source, ConfigError)
    text = text.removeprefix("\ufeff")
    where = _Where(text, source)
    _check_keys(data, TOP_KEYS, (), where, "the config")
    run = _table(data.get("run"), ("run",), where, "[run]")
    _check_keys(run, RUN_KEYS, ("run",), where, "[run]")
    base_d = dict(_table(data.get("base"), ("base",), where, "[base]"))
    _check_keys(base_d, BASE_KEYS, ("base",), where, "[base]")
    base_d["trl"] = dict(_table(base_d.get("trl"), ("base", "trl"), where, "[base.trl]"))
    defaults = _parse_defaults(data, where)
    stages_d = data.get("stages", [])
    if not isinstance(stages_d, list):
        raise ConfigError(f"{where(('stages',))}: stages must be an array of tables ([[stages]])")
    oracles = _parse_oracles(data, where)

    over = parse_overrides(overrides)
    for kind in (*PHASE_KINDS, "base"):  # checked first: the command line is not a line of the file
        if over.get(kind):
            try:
                check_trl("sft" if kind == "base" else kind, over[kind])
            except FieldError as e:
                raise ConfigError(f"--trl {kind}.{e.field}: {e}") from None
    for kind in PHASE_KINDS:
        if over.get(kind):
            defaults.setdefault(kind, {})
    base_d["trl"] = {**base_d["trl"], **over.get("base", {})}

    base = _build(BaseSpec, base_d, ("base",), where)
    stages = []
    for i, st in enumerate(stages_d):
        stages.append(_parse_stage(i, st, defaults, over, where))
    cfg = _build(
        CurriculumConfig,
        {**{k: run[k] for k in RUN_KEYS if k in run}, "base": base, "stages": tuple(stages),
         "oracles": tuple(oracles), "defaults": defaults, "source": source},
        (), where, field_paths={"seed": ("run", "seed"), "stages": ("stages",), "oracles": ("oracles",),
                                "defaults": ("defaults",)},
    )
    _check_parents(cfg, where)
    if "monitor" in data:
        try:
            monitor = parse_monitor(data["monitor"], [s.domain for s in cfg.stages])
        except MonitorFieldError as e:
            raise ConfigError(f"{where(('monitor', *e.path))}: {e}") from None
        cfg = dataclasses.replace(cfg, monitor=monitor)
    return cfg


def _parse_defaults(data: dict[str, Any], where: _Where) -> dict[str, dict[str, Any]]:
    """``[defaults.sft]`` and ``[defaults.rl]``, their trl fields checked where they are written (before phases
    inherit them)."""
    defaults_d = _table(data.get("defaults"), ("defaults",), where, "[defaults]")
    defaults = {k: dict(_table(v, ("defaults", k), where, f"[defaults.{k}]")) for k, v in defaults_d.items()}
    for kind, over_d in defaults.items():
        if kind not in PHASE_KINDS:
            raise ConfigError(f"{where(('defaults', kind))}: unknown table [defaults.{kind}]"
                              f"{did_you_mean(kind, PHASE_KINDS)}; use [defaults.sft] or [defaults.rl]")
        try:
            check_trl(kind, over_d)
        except FieldError as e:
            raise ConfigError(f"{where(('defaults', kind, e.field))}: {e}") from None
    return defaults


def _parse_oracles(data: dict[str, Any], where: _Where) -> list[str]:
    """``[oracles] domains``: a list of domain names (checked against the domains by the config itself)."""
    oracles_d = _table(data.get("oracles"), ("oracles",), where, "[oracles]")
    _check_keys(oracles_d, ORACLE_KEYS, ("oracles",), where, "[oracles]")
    oracles = oracles_d.get("domains", [])
    if not isinstance(oracles, list) or not all(isinstance(o, str) for o in oracles):
        raise ConfigError(f"{where(('oracles', 'domains'))}: [oracles] domains must be a list of domain names")
    return oracles


def _parse_stage(i: int, st: Any, defaults: dict[str, dict[str, Any]], over: dict[str, dict[str, Any]],
                 where: _Where) -> StageSpec:
    """Stage ``i`` (``[[stages]]``), each phase's trl fields: the defaults, then its own, then ``--trl``."""
    path: tuple[str | int, ...] = ("stages", i)
    st = _table(st, path, where, "a stage")
    _check_keys(st, STAGE_KEYS, path, where, f"stage {i + 1}")
    if "domain" not in st:
        raise ConfigError(f"{where(path)}: stage {i + 1} has no domain; add domain = \"math\" (or search, ecom, if)")
    kinds = st.get("phases", [k for k in PHASE_KINDS if k in st])
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise ConfigError(f"{where((*path, 'phases'))}: phases must be a list like [\"sft\", \"rl\"]")
    for k in kinds:
        if k not in PHASE_KINDS:
            raise ConfigError(f"{where((*path, 'phases'))}: unknown phase {k!r}{did_you_mean(k, PHASE_KINDS)}; "
                              f"phases are {', '.join(PHASE_KINDS)}")
    for k in PHASE_KINDS:
        if k in st and k not in kinds:
            raise ConfigError(f"{where((*path, k))}: stage {i + 1} has settings for phase {k!r} but phases = "
                              f"{kinds}; add it to phases or remove [stages.{k}]")
    phases = []
    for k in kinds:
        pd = dict(_table(st.get(k), (*path, k), where, f"[stages.{k}]"))
        _check_keys(pd, PHASE_KEYS, (*path, k), where, f"the {k} phase of stage {i + 1}")
        pd["trl"] = {**defaults.get(k, {}), **_table(pd.get("trl"), (*path, k, "trl"), where, "trl"), **over.get(k, {})}
        phases.append(_build(PhaseSpec, {"kind": k, **pd}, (*path, k), where))
    stage_kwargs = {key: st[key] for key in ("domain", "parent", "note") if key in st}
    return _build(StageSpec, {**stage_kwargs, "phases": tuple(phases)}, path, where)


def _check_parents(cfg: CurriculumConfig, where: _Where) -> None:
    """A stage's `parent` must name a checkpoint of this curriculum trained before it."""
    known = ["base"]
    for i, st in enumerate(cfg.stages):
        if st.parent is not None and st.parent not in known:
            raise ConfigError(
                f"{where(('stages', i, 'parent'))}: stage {i + 1} ({st.domain}) starts from {st.parent!r}, which is "
                f"not a checkpoint trained before it{did_you_mean(st.parent, known)}; known: {', '.join(known)}"
            )
        known.extend(phase_names("seq", st))


def parse_overrides(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--trl [sft.|rl.|base.]FIELD=VALUE`` items into ``{"sft": {...}, "rl": {...}, "base": {...}}``.

    A field without a prefix applies to every phase kind that has it. Values are TOML values
    (``1e-4``, ``true``, ``"text"``, ``["tensorboard"]``); anything else is taken as a string.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--trl {item!r} must look like [sft.|rl.|base.]FIELD=VALUE, e.g. rl.max_steps=20")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        except RecursionError:  # tomllib recurses per nesting level
            raise ConfigError(f"--trl {key}: the value nests too deeply to be a trl setting") from None
        scope, dot, name = key.partition(".")
        if dot and scope in (*PHASE_KINDS, "base"):
            out.setdefault(scope, {})[name] = value
            continue
        if dot:
            raise ConfigError(f"--trl {item!r}: unknown scope {scope!r}{did_you_mean(scope, [*PHASE_KINDS, 'base'])}; "
                              "use sft., rl. or base.")
        targets = [k for k in PHASE_KINDS if key in trl_fields(k)]
        if not targets:
            both = {*trl_fields("sft"), *trl_fields("rl")}
            raise ConfigError(f"--trl {item!r}: unknown trl field {key!r}{did_you_mean(key, both)}")
        for k in targets:
            out.setdefault(k, {})[key] = value
        if "sft" in targets:
            out.setdefault("base", {})[key] = value
    return out


def load_config(path: str | Path, *, overrides: Sequence[str] = ()) -> CurriculumConfig:
    """Read and validate a curriculum file (``--trl`` overrides on top)."""
    p = Path(path)
    if not p.is_file():
        hint = ""
        if not p.is_absolute():
            here = Path(__file__).resolve().parents[2] / "examples"
            if (here / p.name).is_file():
                hint = f"; the example is at {here / p.name}"
        raise ConfigError(f"config file {path} not found{hint}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config {path}: {e}") from None
    return parse_config(text, str(path), overrides=overrides)
