"""Lead time: how many steps before a significant benchmark drop each early warning fires.

:func:`measure_lead_time` retrains one stage of a finished curriculum (the mini arena's
ecom stage by default) from its real parent into a scratch folder, with the same recipe,
data and seeds, and two callbacks sharing one ``series.h5`` writer:

* a :class:`~aclarena.train.callbacks.DriftMonitorCallback` scoring the probe sets of the
  earlier domains (``monitor-math``: seq-math's generations on math prompts...) every N
  steps (label ``lead-time/<phase>``);
* a :class:`GroundTruthCallback` playing a fixed set of ``n`` evaluation items of each
  earlier domain's in-domain suite greedily every M steps (the arena's eval logic,
  :func:`aclarena.envs.rollout.generate_trajectories`), keeping every item's outcome.

The phases of the stage are laid end to end (the RL phase's step 0 is the SFT phase's last
step). Per earlier domain, the **significant drop** is the first evaluation whose exact
one-sided McNemar test against the stage start is significant after Holm's correction over
all of the stage's evaluations (:func:`aclarena.diagnostics.early_warning.drop_points`): the
first of many uncorrected tests would find drops in noise. Item counts too small for any drop
to reach the corrected level are refused before training (:func:`planned_tests`). Per predictor (token drift at
high-entropy positions, flip rate there, whole-sequence KL, forward KL to the stage start,
the plain training loss) the **first warning** is the first alert of that metric's rules
applied to its series (the monitor's rules; for the loss an EWMA rule in both directions),
and the **lead** is ``drop step - warning step``. The table goes to results.h5 under
``monitor/lead-time/<stage>`` with the settings (a rerun with the same settings reads it
back) and the ground-truth curves. ``LeadTimeSettings(replicate=r)`` measures replicate r of a
``train --seeds N`` run instead (names, probe sets and the stored key end in ``-s<r>``).

The ground truth does not touch the training's random stream, so a retrain is the chain's stage bit for bit;
:func:`ground_truth_riders` therefore lets the chain's own training of the stage carry the ground truth (through
its ``[monitor]``'s writer, ``aclarena-diag study``), and :func:`measure_lead_time` then reads those series
instead of retraining (the result's ``source``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback

from aclarena.diagnostics.early_warning import (
    MetricRule,
    TrendRule,
    detect,
    drop_points,
    drop_reachable,
    first_drop,
    lead_time,
    min_items,
)
from aclarena.diagnostics.monitor_metrics import default_rules
from aclarena.errors import AclarenaError
from aclarena.results.lead_time import (
    RESULT_VERSION,
    LeadTimeData,
    lead_time_key,
    read_lead_time,
    table_columns,
    write_lead_time,
)
from aclarena.results.monitor_series import (
    BENCH_COLUMNS,
    BENCH_SETTINGS_ATTR,
    LEAD_LABEL_PREFIX,
    MAX_ITEMS,
    MonitorStore,
    bench_name,
)
from aclarena.train.callbacks import DriftMonitorCallback
from aclarena.train.monitor import PROBE_PREFIX, RAZOR_PREFIX
from aclarena.train.naming import continued_name
from aclarena.train.plan import Job, plan

#: (predictor, metric) rows of the table, in order.
PREDICTORS = (
    ("token drift at high-entropy positions", "kl_high"),
    ("flip rate at high-entropy positions", "flip_high"),
    ("whole-sequence KL", "kl_all"),
    ("forward KL to the stage start", "fkl"),
    ("forward KL on the new task's prompts (RL's Razor)", "razor_fkl"),
    ("training loss", "loss"),
)
#: the Razor row reads ``fkl`` of the stage's own probe set (``razor-<stage>``) with the ``fkl`` rule
RAZOR_METRIC = "razor_fkl"
#: The plain loss has no drift rule of its own: a departure from its trend either way.
LOSS_RULE = MetricRule(trend=TrendRule(alpha=0.3, z=3.0, warmup=2, min_std=0.01, rel_std=0.05, direction="both"))


class GroundTruthCallback(TrainerCallback):
    """Evaluate fixed items of some suites with the live model every ``every_n_steps`` (and at
    the start and the end), or at exactly the phase's ``steps`` when given (a schedule such as
    :func:`~aclarena.diagnostics.warning_validation.dense_schedule`; the start and the end always);
    rows go to ``monitor/<label>/bench`` of a shared :class:`MonitorStore`.

    Greedy, ``n`` items drawn with ``seed`` from each suite's eval split (the same items at
    every evaluation, so that per-item outcomes can be compared). Main process only. The evaluation leaves
    torch's random state as it found it (generation seeds it per batch), so the phase trains exactly as it would
    without the callback: the data order and GRPO's samples are the chain's. ``describe``: the settings stored
    with the rows (:func:`~aclarena.results.monitor_series.bench_settings`) when they ride a curriculum's phase.
    """

    def __init__(self, suites: Sequence[str], *, store: MonitorStore, label: str, every_n_steps: int = 5,
                 n: int = 50, seed: int = 0, batch_size: int = 64, monitor: DriftMonitorCallback | None = None,
                 steps: Collection[int] | None = None, describe: Mapping[str, Any] | None = None) -> None:
        from aclarena.envs import parse_suite

        for s in suites:
            parse_suite(s)
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise AclarenaError(f"eval every_n_steps must be an integer >= 1, got {every_n_steps!r}")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ITEMS:
            raise AclarenaError(f"-n (evaluation items) must be in [1, {MAX_ITEMS}], got {n!r}")
        self.suites = list(suites)
        self.store = store
        self.series = bench_name(label)
        self.every_n_steps = every_n_steps
        self.steps = None if steps is None else frozenset(int(x) for x in steps)  # when given: exactly these steps
        self.n = n
        self.seed = seed
        self.batch_size = batch_size
        self._last: int | None = None
        self._main = True
        self._active = False
        self.seconds: list[float] = []
        self.monitor = monitor  # rows carry its session number (a rerun supersedes earlier rows)
        store.declare_label(label)
        store.declare(self.series, BENCH_COLUMNS,
                      None if describe is None else {BENCH_SETTINGS_ATTR: json.dumps(dict(describe), sort_keys=True)})

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                       **kwargs: Any) -> Any:
        self._main = bool(state.is_world_process_zero)
        self._tok = getattr(processing_class, "tokenizer", processing_class)
        if self._main:
            self._active = self.store.acquire()
            self._evaluate(state, model)
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        step = int(state.global_step)
        if (step in self.steps) if self.steps is not None else step % self.every_n_steps == 0:
            self._evaluate(state, model)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        try:
            self._evaluate(state, model)
        finally:
            if self._main and self._active:
                self.store.release()
            self._active = False
        return control

    def _evaluate(self, state: Any, model: Any) -> None:
        step = int(state.global_step)
        if not self._main or not self._active or model is None or step == self._last:
            return
        self._last = step
        t0 = time.perf_counter()
        was_training = model.training
        model.eval()
        try:
            rows = self._play(model, step)
        finally:
            if was_training:
                model.train()
        self.store.append(self.series, rows)
        self.seconds.append(time.perf_counter() - t0)

    def _play(self, model: Any, step: int) -> list[dict[str, Any]]:
        """Each suite's items, greedily, as one row each; torch's random state (CPU and the model's GPU) restored."""
        import torch

        from aclarena.envs import sample_tasks
        from aclarena.envs.rollout import generate_trajectories

        device = getattr(model, "device", None)
        gpus = [device.index or 0] if isinstance(device, torch.device) and device.type == "cuda" else []
        with torch.random.fork_rng(devices=gpus):  # the training's random stream is not the evaluation's
            rows: list[dict[str, Any]] = []
            for suite in self.suites:
                tasks = sample_tasks(suite, self.n, seed=self.seed, split="eval")
                trajs = generate_trajectories(model, self._tok, tasks, do_sample=False, seed=self.seed,
                                              batch_size=self.batch_size)
                # without a shard every task has its trajectory (None marks other ranks' shares)
                ok = np.asarray([t.reward >= 1.0 for t in trajs if t is not None], dtype=np.bool_)
                rows.append({"session": self.monitor.session if self.monitor is not None else 0, "step": step, "time": time.time(), "suite": suite.encode(), "n": len(ok),
                             "correct": int(ok.sum()), "accuracy": float(ok.mean()) if len(ok) else math.nan,
                             "outcomes": "".join("1" if x else "0" for x in ok).encode()})
        return rows


@dataclass(frozen=True, slots=True)
class LeadTimeSettings:
    """What :func:`measure_lead_time` does: which stage, how often, on how many items.

    ``dense``: evaluate the ground truth on :func:`~aclarena.diagnostics.warning_validation.dense_schedule`
    (every step for the first ``dense`` steps of each phase, then sparser) instead of every
    ``eval_every`` steps. ``phases``: retrain only these phase kinds of the stage (``("rl",)``: its
    GRPO phase alone, from the stage's parent). ``same_domain``: continue the stage's own domain
    from the stage's end (a stage that keeps training what it was trained on; the first stage is
    allowed), monitored and evaluated on that domain, phases named ``cont-<name>``. ``strict``:
    evaluate the stage start first and refuse (one line, before any training) when it solves too
    few items for any drop to be significant over the planned evaluations.
    """

    stage: str = "ecom"
    eval_every: int = 5
    every_n_steps: int | None = None
    n: int = 50
    alpha: float = 0.05
    seed: int = 0
    replicate: int = 0
    dense: int | None = None
    phases: tuple[str, ...] | None = None
    same_domain: bool = False
    strict: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.replicate, bool) or not isinstance(self.replicate, int) or self.replicate < 0:
            raise AclarenaError(f"replicate must be an integer >= 0, got {self.replicate!r}")
        for name in ("eval_every", "n"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise AclarenaError(f"{name} must be an integer >= 1, got {v!r}")
        if self.n > MAX_ITEMS:
            raise AclarenaError(f"-n must be at most {MAX_ITEMS}, got {self.n}")
        if self.every_n_steps is not None and (not isinstance(self.every_n_steps, int) or self.every_n_steps < 1):
            raise AclarenaError(f"--every must be an integer >= 1, got {self.every_n_steps!r}")
        if not (isinstance(self.alpha, int | float) and 0 < self.alpha < 1):
            raise AclarenaError(f"--alpha must be in (0, 1), got {self.alpha!r}")
        if self.dense is not None and (isinstance(self.dense, bool) or not isinstance(self.dense, int) or self.dense < 1):
            raise AclarenaError(f"--dense must be an integer >= 1 (steps evaluated one by one at each phase start), "
                                f"got {self.dense!r}")
        if self.phases is not None:
            from aclarena.train.config import PHASE_KINDS

            bad = [k for k in self.phases if k not in PHASE_KINDS]
            if not self.phases or bad:
                raise AclarenaError(f"--phases {','.join(self.phases)}: name phase kinds among {', '.join(PHASE_KINDS)}")

    def identity(self) -> dict[str, Any]:
        """The settings that decide the result; options at their defaults are left out, so that a
        result stored before they existed keeps its identity."""
        plain = dataclasses.asdict(self)
        for k, default in (("replicate", 0), ("dense", None), ("phases", None), ("same_domain", False),
                           ("strict", False)):
            if plain[k] == default:
                del plain[k]
        if plain.get("phases") is not None:
            plain["phases"] = list(plain["phases"])
        return plain


def phase_eval_steps(length: int, eval_every: int, dense: int | None = None) -> list[int]:
    """The steps of one phase of ``length`` steps where the ground truth is evaluated: every
    ``eval_every`` steps, or :func:`~aclarena.diagnostics.warning_validation.dense_schedule` with
    ``dense``; the start and the end always."""
    from aclarena.diagnostics.warning_validation import dense_schedule

    steps = set(dense_schedule(length, dense=dense)) if dense is not None else set(range(0, length + 1, eval_every))
    return sorted(steps | {0, length})


def planned_tests(phase_steps: Sequence[int | None], eval_every: int, dense: int | None = None) -> int | None:
    """How many ground-truth evaluations follow the stage start (the Holm family), or None when a phase's length is unknown.

    Each phase is evaluated at its start, every ``eval_every`` steps (or on the dense schedule)
    and at its end; the phases are laid end to end, so a phase's start is the previous phase's
    end (one evaluation).
    """
    steps: set[int] = set()
    offset = 0
    for n in phase_steps:
        if n is None:
            return None
        steps.update(offset + k for k in phase_eval_steps(n, eval_every, dense))
        offset += n
    return max(1, len(steps) - 1)


def _phase_steps(job: Job) -> int | None:
    value = (job.spec.trl or {}).get("max_steps") if job.spec is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_items(n: int, alpha: float, tests: int | None) -> None:
    """Refuse ``n`` items with which no drop could be significant (one line, the fix named)."""
    m = tests or 1
    need = min_items(alpha, m)
    if n < need:
        what = f"Holm over {m} evaluations: alpha / {m} = {alpha / m:.3g}" if m > 1 else f"alpha = {alpha:g}"
        raise AclarenaError(f"-n {n} items can never show a significant drop: losing all {n} gives p = "
                            f"{0.5 ** n:.3g}, not below {what}; use -n {need} or more (or fewer evaluations, "
                            "--eval-every larger)")


def solved_at_start(folder: str | os.PathLike[str], suites: Sequence[str], *, n: int, seed: int = 0,
                    chat_template: str | None = None) -> dict[str, int]:
    """How many of the ground-truth items of each suite the checkpoint in ``folder`` solves (greedy, the
    items :class:`GroundTruthCallback` evaluates)."""
    from aclarena.envs import sample_tasks
    from aclarena.envs.rollout import generate_trajectories
    from aclarena.train.phases import load_start

    model, tok = load_start(folder, require_chat_template=False, chat_template=chat_template)
    model.eval()
    out = {}
    for suite in suites:
        trajs = generate_trajectories(model, tok, sample_tasks(suite, n, seed=seed, split="eval"), do_sample=False,
                                      seed=seed, batch_size=64)
        out[suite] = sum(1 for t in trajs if t is not None and t.reward >= 1.0)
    return out


def check_reachable(solved: Mapping[str, int], *, alpha: float, tests: int, n: int) -> None:
    """Refuse a ground-truth schedule with which no drop could be significant, given how many items the stage
    start solves (one line naming the suite and the fix)."""
    for suite, k in solved.items():
        if not drop_reachable(k, alpha, tests):
            need = min_items(alpha, tests)
            raise AclarenaError(f"{suite}: the stage start solves {k} of {n} ground-truth items, so even losing all "
                                f"of them gives p = {0.5 ** k:.3g}, not below alpha / {tests} evaluations = "
                                f"{alpha / tests:.3g}: no drop could be significant; use more items (-n, so that "
                                f"at least {need} are solved) or fewer evaluations (a smaller --dense or a larger "
                                "--eval-every)")


def _fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class LeadPlan:
    """What one lead-time measurement trains and evaluates (:func:`lead_plan`): the stage's phases ``names`` (of
    ``jobs``), the ``earlier`` (domain, checkpoint) whose skills are watched, the monitor's interval, rules and
    probe sizes, and the result's ``identity`` (what decides whether a stored result is read back)."""

    settings: LeadTimeSettings
    jobs: dict[str, Job]
    names: list[str]
    earlier: list[tuple[str, str]]
    stage_parent: str
    every: int
    rules: dict[str, MetricRule]
    probe_n: int
    probe_tokens: int
    probe_seed: int
    suffix: str
    identity: dict[str, Any]

    @property
    def suites(self) -> dict[str, str]:
        """Each ground-truth suite and its domain."""
        return {f"{d}/id": d for d, _ in self.earlier}

    @property
    def razor(self) -> str:
        """The stage's own probe set (RL's Razor row)."""
        return f"{RAZOR_PREFIX}{self.settings.stage}{self.suffix}"

    def probe(self, domain: str) -> str:
        return f"{PROBE_PREFIX}{domain}{self.suffix}"

    @property
    def probes(self) -> list[str]:
        """Every probe set the table reads: the earlier domains' and the stage's own."""
        return [self.probe(d) for d, _ in self.earlier] + [self.razor]

    @property
    def needed(self) -> list[str]:
        """The checkpoints the measurement starts from or compares with: the stage start and the earlier stages."""
        return list(dict.fromkeys([self.stage_parent, *[c for _, c in self.earlier]]))

    def ground_truth(self) -> dict[str, Any]:
        """The ground-truth evaluations (stored with them when they ride the chain's own phases)."""
        s = self.settings
        return {"suites": list(self.suites), "n": s.n, "seed": s.seed, "every": s.eval_every}

    @property
    def rides(self) -> bool:
        """Whether the chain's own training can record this measurement: the plain schedule on the stage as
        trained (not a dense schedule, a single phase kind or a continuation)."""
        s = self.settings
        return s.dense is None and s.phases is None and not s.same_domain


def lead_plan(cfg: Any, settings: LeadTimeSettings) -> LeadPlan:
    """The phases, suites and identity of a lead-time measurement of ``cfg``'s curriculum, checked (one line per
    bad setting, before anything is trained or loaded)."""
    from aclarena.train.naming import phase_names, replicate_suffix

    domains = [s.domain for s in cfg.stages]
    if settings.stage not in domains:
        raise AclarenaError(f"the curriculum has no {settings.stage!r} stage; stages: {', '.join(domains)}")
    i = domains.index(settings.stage)
    if i == 0 and not settings.same_domain:
        raise AclarenaError(f"{settings.stage!r} is the first stage: there is no earlier capability to lose "
                            "(--same-domain continues it from its end instead)")
    mon = cfg.monitor
    every = settings.every_n_steps or (mon.every_n_steps if mon is not None else 5)
    rules = dict(mon.rules) if mon is not None else default_rules()
    probe_n = mon.probe_n if mon is not None else 16
    probe_tokens = mon.probe_max_new_tokens if mon is not None else 64
    r = settings.replicate
    jobs = {j.name: j for j in plan(cfg, r + 1)}
    stage = cfg.stages[i]
    own = phase_names("seq", stage, r)
    kinds = [ph.kind for ph in stage.phases]
    if settings.phases is not None and not set(settings.phases) <= set(kinds):
        raise AclarenaError(f"--phases {','.join(settings.phases)}: the {settings.stage} stage has the phases "
                            f"{', '.join(kinds)}")
    chosen = [n for n, k in zip(own, kinds, strict=True) if settings.phases is None or k in settings.phases]
    if settings.same_domain:  # keep training the stage's own domain, from the stage's end
        earlier = [(stage.domain, own[-1])]
        parent: str = own[-1]
    else:
        earlier = [(s.domain, phase_names("seq", s, r)[-1]) for s in cfg.stages[:i]]
        first_parent = jobs[own[0]].parent
        assert first_parent is not None  # a stage after the first starts from a checkpoint of the plan
        parent = first_parent
    names: list[str] = []
    stage_parent = parent
    for n in chosen:  # the phases retrained, chained from the stage start (renamed when they start elsewhere)
        job = jobs[n]
        if job.parent != parent:
            new = continued_name(n) if settings.same_domain else n
            job = dataclasses.replace(job, name=new, parent=parent,
                                      fingerprint=_fingerprint({"of": job.fingerprint, "parent": parent}))
            jobs[job.name] = job
        names.append(job.name)
        parent = job.name
    tests = planned_tests([_phase_steps(jobs[n]) for n in names], settings.eval_every, settings.dense)
    check_items(settings.n, settings.alpha, tests)
    identity = {"settings": settings.identity(), "every_n_steps": every, "drop_test": "mcnemar-holm",
                "razor": True, "ground_truth_rng": "forked",
                "rules": {k: v.to_dict() for k, v in rules.items()}, "probe_n": probe_n, "probe_tokens": probe_tokens,
                "phases": [jobs[n].fingerprint for n in names], "version": RESULT_VERSION}
    return LeadPlan(settings=settings, jobs=jobs, names=names, earlier=earlier, stage_parent=stage_parent,
                    every=every, rules=rules, probe_n=probe_n, probe_tokens=probe_tokens,
                    probe_seed=mon.probe_seed if mon is not None else 0, suffix=replicate_suffix(r), identity=identity)


def ground_truth_riders(cfg: Any, settings: Sequence[LeadTimeSettings]) -> Callable[[Job, Any], list[Any]]:
    """``riders(job, monitor)`` for :func:`aclarena.train.curriculum.run_curriculum`: the ground truth of each lead-time
    measurement in ``settings`` (one per replicate) evaluated while the chain itself trains the stage, through the
    ``[monitor]``'s own writer, so that :func:`measure_lead_time` reads the chain instead of retraining it (the
    study's validation). Nothing rides a phase whose monitor does not score what the measurement needs (its
    interval, rules, the earlier domains' probes and the stage's own): that measurement then retrains."""
    plans = [p for p in (lead_plan(cfg, s) for s in settings) if p.rides]
    by_name = {n: p for p in plans for n in p.names}

    def riders(job: Job, monitor: Any) -> list[Any]:
        p = by_name.get(job.name)
        if p is None or p.jobs[job.name].fingerprint != job.fingerprint or not _monitor_fits(p, monitor):
            return []
        s = p.settings
        return [GroundTruthCallback(list(p.suites), store=monitor.store, label=job.name, every_n_steps=s.eval_every,
                                    n=s.n, seed=s.seed, monitor=monitor, describe=p.ground_truth())]

    return riders


def _monitor_fits(p: LeadPlan, monitor: Any) -> bool:
    names = {q.name for q in monitor.probes}
    return (monitor.store is not None and monitor.every_n_steps == p.every and dict(monitor.rules) == p.rules
            and set(p.probes) <= names)


def _chain_recording(run: Path, p: LeadPlan) -> tuple[list[int], int] | None:
    """The offsets of the stage's phases and its steps when the chain's own training recorded everything the
    measurement needs (:func:`ground_truth_riders`: the same ground truth at every planned step, the probes'
    checks, the phases as planned); None otherwise."""
    from aclarena.results.monitor_series import bench_settings, load_monitor
    from aclarena.store.series import SERIES_NAME, read_series
    from aclarena.train.curriculum import CHECKPOINTS
    from aclarena.train.phase_record import finished, read_marker

    if not p.rides or not (run / SERIES_NAME).is_file():
        return None
    offsets, total = [], 0
    with read_series(run) as r:
        for name in p.names:
            folder = run / CHECKPOINTS / name
            if (read_marker(folder) or {}).get("fingerprint") != p.jobs[name].fingerprint:
                return None  # not this plan's phase (or not trained)
            done = finished(folder)
            if done is None or bench_settings(r, name) != p.ground_truth():
                return None
            v = load_monitor(r, name)
            want = set(phase_eval_steps(done.steps, p.settings.eval_every))
            for suite in p.suites:
                rows = [k for k in range(len(v.bench.get("step", []))) if v.bench["suite"][k].decode() == suite]
                if {int(v.bench["step"][k]) for k in rows} != want or any(int(v.bench["n"][k]) != p.settings.n
                                                                          for k in rows):
                    return None
            if any(not len(v.probes.get(q, {}).get("step", [])) for q in p.probes):
                return None
            offsets.append(total)
            total += done.steps
    return offsets, total


def measure_lead_time(run_dir: str | os.PathLike[str], settings: LeadTimeSettings = LeadTimeSettings(), *,
                      force: bool = False, show_progress: bool = False, reuse_chain: bool = True) -> dict[str, Any]:
    """Retrain ``settings.stage`` of the curriculum in ``run_dir`` with the monitor and the ground
    truth, compute the lead-time table, store it and return it (see the module docstring). When the chain's own
    training of the stage recorded the same ground truth (``aclarena-diag study``: :func:`ground_truth_riders`),
    the table is computed from it instead, nothing retrained (``reuse_chain=False`` retrains anyway); the
    result's ``source`` says which (``chain`` or ``retrain``)."""
    from aclarena.store import ResultsStore
    from aclarena.train.config import load_config
    from aclarena.train.curriculum import CHECKPOINTS, CONFIG_COPY
    from aclarena.train.phase_record import finished

    t_start = time.monotonic()
    run = Path(run_dir)
    cfg_path = run / CONFIG_COPY
    if not cfg_path.is_file():
        raise AclarenaError(f"{run} has no {CONFIG_COPY}: measure lead time on a run trained with `aclarena-diag train`")
    cfg = load_config(cfg_path)
    p = lead_plan(cfg, settings)
    r = settings.replicate
    for name in p.needed:
        if finished(run / CHECKPOINTS / name) is None:
            raise AclarenaError(f"checkpoint {name!r} is not trained in {run}; finish the curriculum first "
                                f"(aclarena-diag train --config {cfg_path} --out {run}"
                                + (f" --seeds {r + 1}" if r else "") + ")")
    fp = _fingerprint(p.identity)
    store = ResultsStore(run)
    key = lead_time_key(settings.stage, p.suffix)
    if not force and store.exists() and store.has(key) and store.attrs(key).get("fingerprint") == fp:
        with store.reader() as reader:
            return read_lead_time(reader, key).result

    chain = _chain_recording(run, p) if reuse_chain else None
    if chain is not None:
        offsets, steps_total = chain
        labels, start_check = list(p.names), None
        cost: dict[str, Any] = {"recorded_while_the_chain_trained": True}
    else:
        labels = [f"{LEAD_LABEL_PREFIX}{n}" for n in p.names]
        offsets, steps_total, start_check, cost = _retrain(run, cfg, p, show_progress)
    result = lead_time_table(run, labels, offsets=offsets, suites=p.suites, rules=p.rules, alpha=settings.alpha,
                             razor_probe=p.razor, probe_suffix=p.suffix)
    result.update({"stage": settings.stage, "replicate": r, "phases": p.names, "steps": steps_total,
                   "settings": dataclasses.asdict(settings) | {"every_n_steps": p.every},
                   "time_s": time.monotonic() - t_start, "parent": p.stage_parent, "start_check": start_check,
                   "source": "chain" if chain is not None else "retrain", "cost": cost})
    manifest = run / "aclarena.toml"
    write_lead_time(store, key, LeadTimeData(stage=settings.stage, fingerprint=fp, result=result,
                                             table=table_columns(result["table"]), settings=p.identity),
                    manifest_text=manifest.read_text(encoding="utf-8") if manifest.is_file() else None)
    return result


def _retrain(run: Path, cfg: Any, p: LeadPlan, show_progress: bool) -> tuple[list[int], int, Any, dict[str, Any]]:
    """Retrain the stage's phases into a scratch folder with the monitor and the ground truth (labels
    ``lead-time/<phase>``); the phases' offsets, the steps, the start check and the cost."""
    from aclarena.progress import progress
    from aclarena.train.curriculum import CHECKPOINTS, WORK, _location, read_template, run_job
    from aclarena.train.monitor import domain_probe
    from aclarena.train.phases import quiet

    settings = p.settings
    quiet()
    chat_template = read_template(cfg)
    start = _location(run, f"{CHECKPOINTS}/{p.stage_parent}")
    start_check: dict[str, int] | None = None
    if settings.strict:  # before anything else: can the stage start lose enough for a significant drop?
        start_check = solved_at_start(run / CHECKPOINTS / p.stage_parent, list(p.suites), n=settings.n,
                                      seed=settings.seed, chat_template=chat_template)
        tests = planned_tests([_phase_steps(p.jobs[n]) for n in p.names], settings.eval_every, settings.dense)
        check_reachable(start_check, alpha=settings.alpha, tests=tests or 1, n=settings.n)
    probes = {}
    for d, ckpt in p.earlier:
        probes[d] = domain_probe(run, ckpt, run / CHECKPOINTS / ckpt, d, name=p.probe(d), n=p.probe_n,
                                 max_new_tokens=p.probe_tokens, seed=p.probe_seed)
    scratch = run / WORK / f"lead-time{p.suffix}"
    shutil.rmtree(scratch, ignore_errors=True)
    folders = {n: str(run / CHECKPOINTS / n) for n in p.needed}
    # RL's Razor as the paper defines it: the stage start's generations on the trained stage's own prompts
    razor = domain_probe(run, p.stage_parent, start, settings.stage, name=p.razor, n=p.probe_n,
                         max_new_tokens=p.probe_tokens, seed=p.probe_seed, split="train")
    offsets: list[int] = []
    steps_total = 0
    monitors: list[DriftMonitorCallback] = []
    gts: list[GroundTruthCallback] = []
    try:
        with progress(show_progress) as bar:
            task = bar.add_task(f"lead time: retraining the {settings.stage} stage with the monitor", total=len(p.names))
            for name in p.names:
                job = p.jobs[name]
                label = f"{LEAD_LABEL_PREFIX}{name}"
                ms = MonitorStore(run)
                monitor = DriftMonitorCallback(
                    [probes[d] for d, _ in p.earlier] + [razor], store=ms, label=label,
                    references={probes[d].name: str(run / CHECKPOINTS / c) for d, c in p.earlier}
                    | {razor.name: start},
                    stage_start=start, every_n_steps=p.every, rules=p.rules,
                    high=cfg.monitor.high if cfg.monitor else "q=0.06")
                length = _phase_steps(job)
                gt = GroundTruthCallback(list(p.suites), store=ms, label=label, every_n_steps=settings.eval_every,
                                         n=settings.n, seed=settings.seed, monitor=monitor,
                                         steps=phase_eval_steps(length, settings.eval_every, settings.dense)
                                         if settings.dense is not None and length is not None else None)
                monitors.append(monitor)
                gts.append(gt)
                out_folder = scratch / name
                trained = run_job(cfg, job, run, folders, [monitor, gt], chat_template, folder=out_folder,
                                   work=scratch / f"{name}.work")
                folders[name] = str(out_folder)
                offsets.append(steps_total)
                steps_total += trained.steps
                bar.advance(task)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    cost = {"monitor_setup_s": sum(m.setup_seconds for m in monitors),
            "monitor_checks": sum(len(m.check_seconds) for m in monitors),
            "ground_truth_evaluations": sum(len(g.seconds) for g in gts),
            "monitor_checks_s": sum(sum(m.check_seconds) for m in monitors),
            "ground_truth_s": sum(sum(g.seconds) for g in gts)}
    return offsets, steps_total, start_check, cost


def _rule_text(rule: MetricRule) -> str:
    parts = []
    if rule.threshold is not None:
        parts.append(f"{'>' if rule.above else '<'} {rule.threshold:g}")
    if rule.trend is not None:
        t = rule.trend
        parts.append(f"EWMA z {'>' if t.direction == 'up' else '<' if t.direction == 'down' else '|z| >'} {t.z:g}")
    return " or ".join(parts) or "none"


def lead_time_table(run_dir: str | os.PathLike[str], labels: Sequence[str], *, offsets: Sequence[int],
                    suites: Mapping[str, str], rules: Mapping[str, MetricRule], alpha: float = 0.05,
                    razor_probe: str | None = None, probe_suffix: str = "") -> dict[str, Any]:
    """The lead-time table from the monitor and ground-truth series of ``labels`` (phases laid end
    to end with ``offsets``); ``suites`` maps each ground-truth suite to its domain (probe
    ``monitor-<domain><probe_suffix>``, the suffix ``-s<r>`` of replicate r >= 1); ``razor_probe`` is the stage's own probe set, whose ``fkl`` is the
    RL's Razor row of every domain (no row without it). Returns ``{"table", "ground_truth",
    "series", "drop_test"}`` (plain data)."""
    from aclarena.results.monitor_series import load_monitor
    from aclarena.store.series import read_series

    probe_rows: dict[str, dict[int, dict[str, float]]] = {}
    loss: dict[int, float] = {}
    bench: dict[str, dict[int, np.ndarray]] = {}
    with read_series(run_dir) as r:
        for label, off in zip(labels, offsets, strict=True):
            v = load_monitor(r, label)
            for probe, cols in v.probes.items():
                for k in range(len(cols["step"])):
                    g = int(cols["step"][k]) + off
                    probe_rows.setdefault(probe, {}).setdefault(g, {m: float(cols[m][k]) for m in cols
                                                                    if m not in ("session", "step", "time")})
            for k in range(len(v.train.get("step", []))):
                loss.setdefault(int(v.train["step"][k]) + off, float(v.train["loss"][k]))
            for k in range(len(v.bench.get("step", []))):
                suite = v.bench["suite"][k].decode()
                bits = np.frombuffer(v.bench["outcomes"][k], dtype=np.uint8)[: int(v.bench["n"][k])] == ord("1")
                bench.setdefault(suite, {}).setdefault(int(v.bench["step"][k]) + off, bits)
    table: list[dict[str, Any]] = []
    ground: dict[str, list[dict[str, Any]]] = {}
    test: dict[str, Any] = {"method": "exact one-sided McNemar vs the stage start, Holm-corrected over the stage's "
                                      "evaluations", "alpha": alpha, "domains": {}}
    series: dict[str, dict[str, list[float]]] = {}
    loss_steps = sorted(loss)
    loss_alerts = detect(loss_steps, "train", {"loss": [loss[s] for s in loss_steps]}, {"loss": LOSS_RULE})
    loss_warn = loss_alerts[0].step if loss_alerts else None
    fkl_rule = rules.get("fkl") or default_rules().get("fkl") or MetricRule()
    razor_rows = probe_rows.get(razor_probe, {}) if razor_probe is not None else {}
    razor_steps = sorted(razor_rows)
    razor_alerts = detect(razor_steps, razor_probe or "", {"fkl": [razor_rows[s].get("fkl", math.nan) for s in razor_steps]},
                          {"fkl": fkl_rule}) if razor_rows and fkl_rule.active else []
    razor_warn = razor_alerts[0].step if razor_alerts else None
    for suite, domain in suites.items():
        pts_by_step = bench.get(suite, {})
        steps = sorted(pts_by_step)
        pts = drop_points(steps, [pts_by_step[s] for s in steps], alpha=alpha)
        ground[domain] = [dataclasses.asdict(p) for p in pts]
        m = max(1, len(pts) - 1)
        solved = int(np.count_nonzero(pts_by_step[steps[0]])) if steps else 0
        test["domains"][domain] = {"tests": m, "solved_at_start": solved, "reachable": drop_reachable(solved, alpha, m)}
        drop = first_drop(pts)
        drop_step = drop.step if drop is not None else None
        probe = f"{PROBE_PREFIX}{domain}{probe_suffix}"
        rows = probe_rows.get(probe, {})
        psteps = sorted(rows)
        metrics = [m for _, m in PREDICTORS if m not in ("loss", RAZOR_METRIC)]
        metrics += sorted({m for s in psteps for m in rows[s]} - set(metrics))  # every other scalar of the check
        series[domain] = {"step": [float(s) for s in psteps],
                          **{m: [rows[s].get(m, math.nan) for s in psteps] for m in metrics}}
        for predictor, metric in PREDICTORS:
            if metric == RAZOR_METRIC and razor_probe is None:
                continue
            if metric == "loss":
                warn, rule = loss_warn, LOSS_RULE
            elif metric == RAZOR_METRIC:
                warn, rule = razor_warn, fkl_rule
            else:
                rule = rules.get(metric) or default_rules().get(metric) or MetricRule()
                alerts = detect(psteps, probe, {metric: [rows[s].get(metric, math.nan) for s in psteps]},
                                {metric: rule}) if rule.active else []
                warn = alerts[0].step if alerts else None
            table.append({"domain": domain, "predictor": predictor, "metric": metric, "rule": _rule_text(rule),
                          "warn_step": warn, "drop_step": drop_step, "lead": lead_time(drop_step, warn)})
    series["train"] = {"step": [float(s) for s in loss_steps], "loss": [loss[s] for s in loss_steps]}
    if razor_probe is not None:
        series["razor"] = {"step": [float(s) for s in razor_steps], "fkl": [razor_rows[s].get("fkl", math.nan)
                                                                           for s in razor_steps]}
    return {"table": table, "ground_truth": ground, "series": series, "drop_test": test}
