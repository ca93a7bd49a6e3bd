"""Training-time early warning: :class:`DriftMonitorCallback`, a ``transformers.TrainerCallback``.

While a new stage trains, the monitor scores probe sets of earlier capabilities (frozen
reference generations, :mod:`aclarena.results.probes`) teacher-forced with the current
weights, at the start and every ``every_n_steps`` steps, and turns the scores into a few
scalars per probe set (:data:`METRICS`):

* the study's token drift (ACLArena, arXiv 2609.23989): mean ``KL(p_ref ‖ p_θ)`` and flip
  rate at the high-entropy positions of the probe's reference checkpoint (the top 6% by
  default), the share of the KL mass there, and the whole-sequence mean KL (every scored
  position); the reference is the checkpoint that generated the probe (seq-math for the
  math probe), so these carry the drift of every stage since that checkpoint;
* the forward KL to the stage-start policy, ``KL(π_start ‖ π_θ)`` per token on the same
  earlier-domain sequences (RL's Razor, Shenfeld et al. 2025, finds the forward KL to the
  starting policy predicts forgetting); ``π_start`` is the model at ``on_train_begin`` (its
  outputs cached once) or the checkpoint given as ``stage_start``. It is 0 at the start.

The scoring is :func:`aclarena.probes.teacher_forcing.score` against cached reference
outputs (no grad, eval mode, train mode restored) and
:func:`aclarena.diagnostics.token_drift.summarize_drift`; the warning rules are
:mod:`aclarena.diagnostics.early_warning`. Each check's scalars are logged as
``monitor/<probe>/<metric>`` through the trainer's callbacks (so ``report_to`` backends get
them when the monitor is bound to the trainer, see :meth:`DriftMonitorCallback.bind`),
added to ``state.log_history``, and appended under SWMR to ``series.h5`` (docs/monitor.md
has the layout), where ``aclarena-diag monitor --follow`` and the dashboard read them live.

Only the main process (``state.is_world_process_zero``) scores and writes; the others wait
for its decisions (save, stop) at each check, so that every process stops at the same step.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback

from aclarena.diagnostics.early_warning import Alert, MetricRule, WarningDetector
from aclarena.diagnostics.monitor_metrics import (
    METRICS,
    probe_metrics,
    rules_to_json,
)
from aclarena.diagnostics.token_drift import HighEntropy
from aclarena.distributed import process_group_size
from aclarena.errors import AclarenaError, StoreError, did_you_mean
from aclarena.results.monitor_series import (
    EVENT_COLUMNS,
    SESSION_COLUMNS,
    TRAIN_COLUMNS,
    MonitorStore,
    latest_rows,
    series_names,
    settings_bytes,
)
from aclarena.results.monitor_series import probe_columns as series_probe_columns
from aclarena.results.probes import ProbeSet
from aclarena.train.monitor_sharding import (
    broadcast_flags,
    gather_objects,
    gather_reference_stats,
    merge_shares,
    shard_like,
    sharding_of,
    share_of,
)
from aclarena.train.monitor_spec import MonitorSettings

logger = logging.getLogger("aclarena.monitor")


def probe_columns(metrics: Iterable[str] = tuple(METRICS)) -> dict[str, str]:
    """The columns of a probe's series: one float per monitor metric (default: all of :data:`METRICS`)."""
    return series_probe_columns(metrics)


class TrainingStopped(AclarenaError):
    """Training was stopped by the drift monitor (``on_warning="stop"``)."""


# --- helpers ------------------------------------------------------------------------------------


def tokenizer_fingerprint_of(tokenizer: Any) -> str | None:
    """The fingerprint :func:`aclarena.models.tokenizer_files.tokenizer_fingerprint` gives the
    tokenizer's saved folder (None when it cannot be saved)."""
    from aclarena.models.tokenizer_files import tokenizer_fingerprint

    try:
        with tempfile.TemporaryDirectory(prefix="aclarena-tok-") as tmp:
            tokenizer.save_pretrained(tmp)
            return tokenizer_fingerprint(Path(tmp))
    except Exception:  # noqa: BLE001 (any tokenizer that cannot save itself: fall back to the vocabulary check)
        return None


def check_tokenizer(probe: ProbeSet, tokenizer: Any, vocab_size: int | None) -> None:
    """Refuse a probe set made with another tokenizer than the trained model's (one line)."""
    want = probe.settings.get("tokenizer")
    if tokenizer is not None and want:
        got = tokenizer_fingerprint_of(tokenizer)
        if got is not None and got != want:
            raise AclarenaError(
                f"probe set {probe.name!r} was made with another tokenizer ({want}) than the trained model's ({got}); "
                "per-token drift needs the same tokenizer: make the probe set with a checkpoint of this model family"
            )
        if got is not None:
            return
    if tokenizer is not None and probe.vocab is not None:
        from aclarena.probes.probe_set import vocab_strings
        from aclarena.results.probes import printable

        mine = [printable(v) for v in vocab_strings(tokenizer, len(probe.vocab))]
        theirs = [printable(v) for v in probe.vocab]  # stored probe sets hold printable text
        if mine != theirs:
            bad = next(i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b)
            raise AclarenaError(
                f"probe set {probe.name!r} was made with another tokenizer than the trained model's (token {bad} is "
                f"{theirs[bad]!r} there, {mine[bad]!r} here); make the probe set with a checkpoint of this model"
            )
    if vocab_size is not None and probe.vocab is not None and len(probe.vocab) != vocab_size:
        raise AclarenaError(f"probe set {probe.name!r} has a vocabulary of {len(probe.vocab)} tokens but the trained "
                            f"model has {vocab_size}; make the probe set with a checkpoint of this model")


















def _location(where: Any) -> Any:
    """What identifies a reference: its resolved folder, or the model object itself."""
    if where is None:
        return None
    if isinstance(where, str | os.PathLike):
        return ("folder", str(Path(where).resolve()))
    return ("model", id(where))


def _frozen_head(head: Any) -> Any:
    """A copy of an output head that training cannot change (the stage-start policy's)."""
    import copy

    weight = head.weight.detach().clone()
    bias = head.bias.detach().clone() if head.bias is not None else None
    module = copy.deepcopy(head.module) if head.module is not None else None
    return dataclasses.replace(head, weight=weight, bias=bias, module=module)


def _load_reference(where: Any, device: Any, allow_pickle: bool = False) -> Any:
    """A model object, or a checkpoint folder loaded through aclarena.models.loading."""
    if not isinstance(where, str | os.PathLike):
        return where
    from aclarena.models.loading import LoadOptions, load_model
    from aclarena.store.manifest import CheckpointSpec, Manifest

    path = Path(where)
    spec = CheckpointSpec(name="reference", path=str(path.resolve()) if path.exists() else str(where), kind="base")
    manifest = Manifest(name="monitor", checkpoints={"reference": spec})
    return load_model(spec, manifest, ".", LoadOptions(dtype="auto", device=str(device or "cpu"),
                                                       allow_pickle=allow_pickle, merge_adapter=True))


# --- the callback -------------------------------------------------------------------------------


class DriftMonitorCallback(TrainerCallback):
    """Score probe sets of earlier capabilities during training; warn on drift (see the module doc).

    Args:
        probes: probe sets of earlier capabilities (frozen reference generations), with distinct names.
        run_dir: where ``series.h5`` goes (None: log only, store nothing).
        label: the name of this training run in the store (e.g. the checkpoint being trained).
        references: ``{probe name: model or checkpoint folder}``, the probe's reference checkpoint
            (run once, its outputs cached, then released). A probe without one is compared with
            the stage-start policy (then ``kl_*`` equal ``fkl*``).
        stage_start: the stage-start policy, a model or checkpoint folder (default: the model at
            ``on_train_begin``; give the stage's first parent when resuming or for a later phase
            of a multi-phase stage).
        settings: how it scores and acts (:class:`~aclarena.train.monitor_spec.MonitorSettings`: interval,
            high-entropy positions, rules, warning and store-error actions, batch size), validated there; or
            give its fields one by one (``every_n_steps=10, high="q=0.06", on_warning="stop", ...``), which
            build it. Its fields:
        every_n_steps: score every N optimizer steps (and at the start and the end).
        high: the high-entropy positions, ``"q=0.06"`` (top fraction) or ``"nats=1.5"``.
        rules: ``{metric: MetricRule}``; default
            :func:`~aclarena.diagnostics.monitor_metrics.default_rules`. Metrics are those of
            :data:`METRICS` and :data:`TRAIN_METRICS`.
        on_warning: ``log`` (log and store the warning), ``save`` (also save a trainer
            checkpoint at that step) or ``stop`` (save and stop training). Never acted on at a
            run's first check, which is the baseline.
        on_store_error: ``raise`` (stop training with the store's error) or ``continue``
            (warn and train on without the monitor).
        batch_size: sequences per scoring forward pass.
        store: a :class:`MonitorStore` shared with other callbacks (instead of ``run_dir``).
        trainer: the trainer (or call :meth:`bind`): then the scalars reach every logging callback.
        tokenizer: the trained model's tokenizer (default: the trainer's ``processing_class``).
    """

    def __init__(
        self,
        probes: Sequence[ProbeSet],
        *,
        run_dir: str | os.PathLike[str] | None = None,
        label: str = "train",
        references: Mapping[str, Any] | None = None,
        stage_start: Any = None,
        settings: MonitorSettings | None = None,
        every_n_steps: int | None = None,
        high: HighEntropy | str | None = None,
        rules: Mapping[str, MetricRule] | None = None,
        on_warning: str | None = None,
        on_store_error: str | None = None,
        batch_size: int | None = None,
        store: MonitorStore | None = None,
        trainer: Any = None,
        tokenizer: Any = None,
    ) -> None:
        probes = list(probes)
        if not probes:
            raise AclarenaError("the drift monitor needs at least one probe set")
        for p in probes:
            if not isinstance(p, ProbeSet):
                raise AclarenaError(f"probes must be ProbeSet objects (read_probe_set / probe_set_from_conversations), "
                                    f"got {type(p).__name__}")
        names = [p.name for p in probes]
        if len(set(names)) != len(names):
            raise AclarenaError(f"probe set names repeat: {names}; give each probe set its own name")
        loose: dict[str, Any] = {"every_n_steps": every_n_steps, "high": high, "rules": rules, "on_warning": on_warning,
                 "on_store_error": on_store_error, "batch_size": batch_size}
        given = {k: v for k, v in loose.items() if v is not None}
        if settings is None:
            settings = MonitorSettings(**given)  # validated there, once
        elif given:
            raise AclarenaError(f"give settings or its fields ({', '.join(given)}), not both")
        elif not isinstance(settings, MonitorSettings):
            raise AclarenaError(f"settings must be a MonitorSettings, got {type(settings).__name__}")
        if not isinstance(label, str) or not label or any(part in ("", ".", "..") for part in label.split("/")):
            raise AclarenaError(f"label must be a name like 'seq-ecom-sft', got {label!r}")
        references = dict(references or {})
        for name in references:
            if name not in names:
                raise AclarenaError(f"reference given for unknown probe set {name!r}{did_you_mean(name, names)}; "
                                    f"probe sets: {', '.join(names)}")
        if store is not None and run_dir is not None:
            raise AclarenaError("give run_dir or store, not both")
        self.probes = probes
        self.label = label
        self.references = references
        self.stage_start = stage_start
        self.monitor_settings = settings
        self.every_n_steps = settings.every_n_steps
        self.high = settings.high_entropy
        self.rules = dict(settings.rules)
        self.on_warning = settings.on_warning
        self.batch_size = settings.batch_size
        self.tokenizer = tokenizer
        self.store = store if store is not None else (
            MonitorStore(run_dir, on_error=settings.on_store_error) if run_dir is not None else None)
        self.series = series_names(label, names)
        if self.store is not None:
            self.store.declare_label(label)
            self.store.declare(self.series["sessions"], SESSION_COLUMNS)
            self.store.declare(self.series["train"], TRAIN_COLUMNS)
            self.store.declare(self.series["events"], EVENT_COLUMNS)
            for probe_name in names:
                self.store.declare(self.series[f"probe:{probe_name}"], probe_columns())
        self._handler: Any = None
        self._args: Any = None
        self._emitting = False
        self._active = False
        self._enabled = False
        self._main = True
        self._sharded = False
        self._last_step: int | None = None
        self._first_step: int | None = None
        self._session = 0
        self._detector = WarningDetector(self.rules)
        self._ref: dict[str, Any] = {}
        self._start: dict[str, Any] = {}
        self.alerts: list[Alert] = []
        self.history: list[dict[str, Any]] = []
        self.stop_alert: Alert | None = None
        self.stop_step: int | None = None
        self.check_seconds: list[float] = []
        self.setup_seconds = 0.0
        if trainer is not None:
            self.bind(trainer)

    @property
    def session(self) -> int:
        """This training run's session number in the store (0 for the first ``train()`` of a label)."""
        return self._session

    # --- wiring -------------------------------------------------------------------------------
    def bind(self, trainer: Any) -> DriftMonitorCallback:
        """Send the scalars through ``trainer``'s callbacks (``report_to`` backends included).

        Adds the monitor to the trainer if it is not there yet. Without binding, the scalars
        still go to ``state.log_history``, the store and this object's :attr:`history`.
        """
        handler = trainer.callback_handler
        if self not in handler.callbacks:
            trainer.add_callback(self)
        self._handler = handler
        return self

    def settings(self) -> dict[str, Any]:
        return {"label": self.label, "probes": [p.name for p in self.probes],
                "references": {p.name: (str(self.references[p.name]) if isinstance(self.references.get(p.name),
                                                                                  str | os.PathLike)
                                        else ("model" if p.name in self.references else "stage-start"))
                               for p in self.probes},
                "probe_reference": {p.name: p.reference for p in self.probes},
                "probe_digest": {p.name: p.digest for p in self.probes},
                "stage_start": str(self.stage_start) if isinstance(self.stage_start, str | os.PathLike)
                else ("model" if self.stage_start is not None else "model at train begin"),
                "every_n_steps": self.every_n_steps, "high": str(self.high), "rules": rules_to_json(self.rules),
                "on_warning": self.on_warning, "batch_size": self.batch_size, "metrics": list(METRICS)}

    # --- events -------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                       **kwargs: Any) -> Any:
        self._args = args
        self._main = bool(state.is_world_process_zero)
        self._active = False
        t0 = time.perf_counter()
        self._sharded = model is not None and sharding_of(model, args) is not None and process_group_size() > 1
        error = 0
        if self._sharded:
            # every process scores its share with the sharded weights: each checks the input (the
            # same answer everywhere, before any collective) and caches its share of the outputs
            self._check_inputs(model, processing_class)
            self._cache_references(model)
        if self._main:
            try:
                if not self._sharded:
                    self._check_inputs(model, processing_class)
                    self._cache_references(model)
                self._open_store(state)
            except BaseException:
                broadcast_flags(args, [1, 0])
                raise
        # every process learns whether the monitor runs, so that all join (or skip) each check
        error, enabled = broadcast_flags(args, [error, int(self._active)])
        if error:
            raise AclarenaError("the drift monitor failed on the main process (see its error)")
        self._enabled = bool(enabled)
        self.setup_seconds = time.perf_counter() - t0
        if self._enabled:
            self._check(args, state, control, model, first=True)
        return control

    def _check_inputs(self, model: Any, processing_class: Any) -> None:
        """Refuse probe sets that do not fit the trained model (one line, before anything is written)."""
        from aclarena.probes.model_parts import vocab_size

        if model is None:
            raise AclarenaError("the trainer gave the drift monitor no model")
        tok = self.tokenizer if self.tokenizer is not None else processing_class
        tok = getattr(tok, "tokenizer", tok)  # a processor wraps its tokenizer
        vocab = vocab_size(model)  # from the head's shape: a sharded head is not gathered for it
        for p in self.probes:
            check_tokenizer(p, tok, vocab)

    def _share(self, probe: ProbeSet) -> tuple[list[int] | None, int | None]:
        """This process's batches of ``probe``'s plan and the forward passes every process makes
        (None, None: one process scores every batch)."""
        if not self._sharded:
            return None, None
        import torch.distributed as dist

        from aclarena.probes.teacher_forcing import BatchPlan

        n = len(BatchPlan.make(probe, self.batch_size).batches)
        world, rank = dist.get_world_size(), dist.get_rank()
        return list(range(rank, n, world)), -(-n // world)

    def _outputs(self, model: Any, probe: ProbeSet, name: str) -> Any:
        from aclarena.probes.teacher_forcing import reference_outputs

        mine, lock = self._share(probe)
        return reference_outputs(model, probe, name=name, batch_size=self.batch_size, batches=mine, lockstep=lock)

    def _cache_references(self, model: Any) -> None:
        """Run the stage start and the references once on the probe sets and cache their outputs."""
        from aclarena.probes.model_parts import model_device

        device = model_device(model)
        start_model = None
        if self.stage_start is not None:
            start_model = self._reference_model(self.stage_start, device, model)
        for p in self.probes:
            if start_model is not None:
                self._start[p.name] = self._outputs(start_model, p, "stage start")
            else:
                cache = self._outputs(model, p, "stage start")
                self._start[p.name] = dataclasses.replace(cache, head=_frozen_head(cache.head))
        del start_model
        start_at = _location(self.stage_start)
        by_location: dict[Any, list[ProbeSet]] = {}
        for p in self.probes:
            where = self.references.get(p.name)
            if where is None:
                self._ref[p.name] = self._start[p.name]
            elif start_at is not None and _location(where) == start_at:  # the stage start is the reference: run once
                self._ref[p.name] = dataclasses.replace(self._start[p.name], name=p.reference)
            else:
                by_location.setdefault(_location(where), []).append(p)
        for group in by_location.values():  # each reference loaded once, whatever the number of its probe sets
            ref_model = self._reference_model(self.references[group[0].name], device, model)
            for p in group:
                self._ref[p.name] = self._outputs(ref_model, p, p.reference)
            del ref_model
        if self._sharded:  # the main process needs every rank's share of the references' own statistics
            same = {name for name, out in self._ref.items() if out.stats is self._start[name].stats}
            for p in self.probes:  # in the same order on every process (each is a collective)
                mine = self._share(p)[0] or []
                self._start[p.name] = gather_reference_stats(self._start[p.name], mine)
                self._ref[p.name] = (dataclasses.replace(self._start[p.name], name=self._ref[p.name].name)
                                     if p.name in same else gather_reference_stats(self._ref[p.name], mine))

    def _reference_model(self, where: Any, device: Any, live: Any) -> Any:
        """A reference or stage-start model; loaded from a folder under FSDP2, it is sharded as the trained
        model is (no process holds it whole once loaded)."""
        loaded = isinstance(where, str | os.PathLike)
        ref = _load_reference(where, device)
        if self._sharded and loaded:
            shard_like(ref, live)
        return ref

    def _open_store(self, state: Any) -> None:
        """On the main process: warn about the interval, take the store, start a session."""
        max_steps = int(getattr(state, "max_steps", 0) or 0)
        if max_steps and self.every_n_steps > max_steps:
            logger.warning("drift monitor: every_n_steps = %d is larger than the run's %d steps: only the start and "
                           "the end are scored; lower every_n_steps", self.every_n_steps, max_steps)
        self._first_step = int(state.global_step)
        if self.store is not None:
            self._replay(self.store, int(state.global_step))
            if not self.store.acquire():
                return
            self.store.append(self.series["sessions"], {
                "session": self._session, "step": int(state.global_step), "time": time.time(),
                "settings": settings_bytes(self.settings())})
        self._active = True

    def _replay(self, store: MonitorStore, start_step: int) -> None:
        """Pick the session number and, when resuming, feed the earlier points to the rules."""
        from aclarena.store import SERIES_NAME, SeriesReader

        if not (Path(store.run_dir) / SERIES_NAME).is_file():
            return
        try:
            with SeriesReader(store.run_dir) as r:
                have = set(r.names())
                if self.series["sessions"] not in have:
                    return
                sessions = r.read(self.series["sessions"])
                self._session = int(sessions["session"].max()) + 1 if len(sessions["session"]) else 0
                if start_step <= 0:
                    return
                rows = []
                for p in self.probes:
                    key = self.series[f"probe:{p.name}"]
                    if key not in have:
                        continue
                    view = latest_rows(r.read(key), sessions)
                    for i in np.flatnonzero(view["step"] < start_step):
                        rows.append((int(view["step"][i]), p.name, {m: float(view[m][i]) for m in METRICS}))
                tr = r.read(self.series["train"]) if self.series["train"] in have else None
                if tr is not None:
                    tv = latest_rows(tr, sessions)
                    for i in np.flatnonzero(tv["step"] < start_step):
                        rows.append((int(tv["step"][i]), "train", {"loss": float(tv["loss"][i])}))
        except StoreError:
            return
        for step, series, values in sorted(rows, key=lambda r: r[0]):
            self._detector.update(step, series, values)
        if rows:
            self._first_step = min(r[0] for r in rows)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        step = int(state.global_step)
        if not self._enabled or step == self._last_step:
            return control
        if step % self.every_n_steps == 0:
            self._check(args, state, control, model)
        elif state.max_steps and step >= state.max_steps:
            # the last step's check, here rather than in on_train_end: report_to backends close
            # their writers in their own on_train_end, which runs before this one's
            self._check(args, state, control, model, final=True)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        try:
            if self._enabled and int(state.global_step) != self._last_step:
                self._check(args, state, control, model, final=True)
        finally:
            if self._active and self.store is not None:
                self.store.release()
            self._active = False
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        if self._emitting or not self._active or not logs:
            return control
        loss = logs.get("loss")
        if isinstance(loss, int | float) and not isinstance(loss, bool) and math.isfinite(loss):
            step = int(state.global_step)
            if self.store is not None:
                self.store.append(self.series["train"], {"session": self._session, "step": step, "time": time.time(),
                                                         "loss": float(loss)})
            # recorded for comparison with the drift metrics, never acted on (a loss warning on one
            # process only would make the processes stop at different steps)
            self._handle(self._detector.update(step, "train", {"loss": float(loss)}), state, control, act=False)
        return control

    # --- a check ------------------------------------------------------------------------------
    def _check(self, args: Any, state: Any, control: Any, model: Any, *, first: bool = False,
               final: bool = False) -> None:
        step = int(state.global_step)
        self._last_step = step
        flags = [0, 0]
        values: dict[str, dict[str, float]] = {}
        if self._sharded and model is not None:  # every process scores its share; the main one gets all
            t0 = time.perf_counter()
            values = self.measure(model)
            self.check_seconds.append(time.perf_counter() - t0)
        if self._main and self._active and model is not None:
            if not self._sharded:
                t0 = time.perf_counter()
                values = self.measure(model)
                self.check_seconds.append(time.perf_counter() - t0)
            now = time.time()
            logs: dict[str, float] = {}
            alerts: list[Alert] = []
            for name, vals in values.items():
                if self.store is not None:
                    self.store.append(self.series[f"probe:{name}"],
                                      {"session": self._session, "step": step, "time": now, **vals})
                logs.update({f"monitor/{name}/{m}": v for m, v in vals.items() if math.isfinite(v)})
                alerts += self._detector.update(step, name, vals)
            self.history.append({"step": step, **{k: v for k, v in logs.items()}})
            baseline = first and (self._first_step is None or step <= self._first_step)
            act = not baseline and not final
            if alerts:
                logs["monitor/warnings"] = float(len(alerts))
            self._emit(args, state, control, logs)
            flags = self._handle(alerts, state, control, act=act)
            if self.store is not None and self.store.failed is not None:
                self._active = False  # on_store_error = continue: the monitor is off from here on
        if not final:
            flags = broadcast_flags(args, flags)
            if flags[0]:
                control.should_save = True
            if flags[1]:
                control.should_training_stop = True
                if self.stop_step is None:
                    self.stop_step = step

    def _handle(self, alerts: list[Alert], state: Any, control: Any, *, act: bool) -> list[int]:
        """Log and store warnings; returns the ``[save, stop]`` flags asked for."""
        flags = [0, 0]
        for a in alerts:
            action = self.on_warning if act else "log"
            self.alerts.append(a)
            logger.warning("drift monitor (%s): %s%s", self.label, a.message(),
                           {"log": "", "save": "; saving a checkpoint", "stop": "; stopping training"}[action])
            if self.store is not None:
                self.store.append(self.series["events"], {
                    "session": self._session, "step": a.step, "time": time.time(), "series": a.series.encode()[:64],
                    "metric": a.metric.encode()[:32], "value": a.value, "rule": a.rule.encode(), "limit": a.limit,
                    "score": a.score, "action": action.encode()})
            if action in ("save", "stop"):
                flags[0] = 1
                control.should_save = True
            if action == "stop":
                flags[1] = 1
                control.should_training_stop = True
                if self.stop_alert is None:
                    self.stop_alert = a
                    self.stop_step = a.step
        return flags

    def _emit(self, args: Any, state: Any, control: Any, logs: dict[str, float]) -> None:
        """Log a row through the trainer's callbacks (when bound) and into ``state.log_history``."""
        if not logs:
            return
        state.log_history.append({**logs, "step": int(state.global_step)})
        if self._handler is None:
            return
        keep = (control.should_log, control.should_save, control.should_training_stop)
        self._emitting = True
        try:
            self._handler.on_log(args, state, control, dict(logs))
        finally:
            self._emitting = False
            # the handler resets should_log; the trainer's own logging of this step must still happen
            control.should_log = keep[0] or control.should_log
            control.should_save = keep[1] or control.should_save
            control.should_training_stop = keep[2] or control.should_training_stop

    def measure(self, model: Any) -> dict[str, dict[str, float]]:
        """Score every probe set with ``model`` now: ``{probe: {metric: value}}`` (no grad, eval mode).

        Under FSDP2 every process must call it at the same point: each scores its share of the
        batches with the sharded model, and the main process gathers the per-position scores
        and computes the metrics (the others get ``{}``).
        """
        from aclarena.probes.teacher_forcing import STATUS_OK, score

        out: dict[str, dict[str, float]] = {}
        shares: dict[str, dict[str, Any]] = {}
        for p in self.probes:
            ref = self._ref[p.name]
            start = self._start[p.name]
            mine, lock = self._share(p)
            # one forward pass of the live model serves both comparisons (same probe, same batch plan)
            same_plan = start is not ref and start.plan.batches == ref.plan.batches
            shared: dict[int, Any] | None = {} if same_plan else None
            s = score(model, ref, p, name="the trained model", hidden_cache=shared, batches=mine, lockstep=lock)
            f = s if start is ref else score(model, start, p, name="the trained model", hidden_cache=shared,
                                             batches=mine, lockstep=None if same_plan else lock)
            if self._sharded:
                shares[p.name] = share_of(s, f, ref.plan, start.plan, mine or [])
                continue
            out[p.name] = probe_metrics(s.ref.entropy, s.ref.logprob, s.ref.top1, s.kl, s.js, s.logprob, s.top1,
                                        valid=s.status == STATUS_OK, fkl=f.kl, fkl_valid=f.status == STATUS_OK,
                                        high=self.high)
        if not self._sharded:
            return out
        gathered = gather_objects(shares)
        if gathered is None:
            return out
        for p in self.probes:
            ref = self._ref[p.name]
            full = merge_shares([g[p.name] for g in gathered], int(ref.plan.offsets[-1]))
            out[p.name] = probe_metrics(ref.stats.entropy, ref.stats.logprob, ref.stats.top1, full["kl"], full["js"],
                                        full["logprob"], full["top1"], valid=full["status"] == STATUS_OK,
                                        fkl=full["fkl"], fkl_valid=full["fstatus"] == STATUS_OK, high=self.high)
        return out


# --- trainer glue -------------------------------------------------------------------------------


def bind_callbacks(trainer: Any) -> None:
    """Bind every drift monitor among ``trainer``'s callbacks to it (see :meth:`DriftMonitorCallback.bind`)."""
    for cb in list(trainer.callback_handler.callbacks):
        if isinstance(cb, DriftMonitorCallback):
            cb.bind(trainer)


def stopped_by_monitor(trainer: Any, what: str = "training") -> TrainingStopped | None:
    """The :class:`TrainingStopped` error when a drift monitor stopped ``trainer`` early, else None."""
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, DriftMonitorCallback) and cb.stop_step is not None:
            a = cb.stop_alert
            why = f": {a.message()}" if a is not None else " (decided on the main process)"
            return TrainingStopped(f"{what} stopped by the drift monitor at step {cb.stop_step}{why}; the trainer "
                                   f"checkpoint of that step is kept, rerun without stopping on warnings to continue")
    return None


def add_drift_monitor(trainer: Any, probes: Sequence[ProbeSet], **kwargs: Any) -> DriftMonitorCallback:
    """Build a :class:`DriftMonitorCallback`, add it to ``trainer`` and bind it (the one-line way)."""
    return DriftMonitorCallback(probes, trainer=trainer, **kwargs)
