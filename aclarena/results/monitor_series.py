"""The ``monitor-series`` result type: what the drift monitor records of one monitored training run in
``series.h5``, its payload, and how it is laid out.

A monitored training run ``<label>`` (a phase such as ``seq-ecom-sft``; ``lead-time/<phase>`` for the phase that
``monitor --lead-time`` retrained) is the group ``monitor/<label>`` of series.h5 (result type ``monitor-series``,
version 0.1.0; groups written before the type's attributes read as 0.1.0); its series are specified in
docs/store-format.md: ``sessions`` (one row per ``train()`` call: its start step and settings as JSON),
``probes/<probe>`` (one row per check: the metrics), ``train`` (the trainer's loss at each logging step),
``events`` (the warnings) and, for lead-time runs, ``bench`` (the ground-truth evaluations; when they ride a
curriculum's own phase, as in ``aclarena-diag study``, the series' attribute ``ground-truth`` holds their settings
as JSON: :func:`bench_settings`). A resumed session supersedes the rows of earlier sessions from the step it
resumed at (:func:`latest_rows`).

The writer is :class:`aclarena.train.callbacks.DriftMonitorCallback` (and ``monitor --lead-time``'s
:class:`~aclarena.train.lead_time.GroundTruthCallback`): it declares the series with the columns here
(:func:`series_names`, :data:`SESSION_COLUMNS`, :func:`probe_columns`, ...) and the label's group
(:meth:`MonitorStore.declare_label`) on one :class:`MonitorStore`, then appends rows while training runs. The
readers (:func:`load_monitor`, :func:`monitor_labels`, :func:`monitor_phases`; the payload :class:`MonitorView`)
serve ``monitor``, the dashboard's Monitor page, ``export``'s ``monitor/series`` figures and the lead-time
table. numpy and h5py only (through :mod:`aclarena.store.series`, which keeps the bytes): no torch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aclarena.errors import AclarenaError, StoreError, did_you_mean
from aclarena.results import registry
from aclarena.results.registry import Stored, Upgrade
from aclarena.store.results import damaged
from aclarena.store.series import SeriesReader, SeriesWriter

PREFIX = "monitor/"
#: Label prefix of the phases that ``monitor --lead-time`` retrains (``lead-time/seq-ecom-sft``): a
#: second recording of the phase ``seq-ecom-sft``, not another phase.
LEAD_LABEL_PREFIX = "lead-time/"
RESULT_TYPE = "monitor-series"
RESULT_VERSION = "0.1.0"
#: what a ``monitor/<label>`` group without ``result-version`` (written before the type had one) reads as
FIRST_VERSION = "0.1.0"
#: ``{older version: function}`` rewriting a :class:`Stored` label of that version into the next one's (none yet)
UPGRADES: dict[str, Upgrade] = {}


def monitor_key(label: str) -> str:
    """The series.h5 group of the monitored training run ``label`` (below ``series/``)."""
    return f"{PREFIX}{label}"


def latest_rows(data: Mapping[str, np.ndarray], sessions: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Rows of a monitor series as the latest run sees them, ordered by step: a resumed session
    replaces the rows of earlier sessions from the step it resumed at."""
    data = {k: np.asarray(v) for k, v in data.items()}
    if "step" not in data or not len(data["step"]) or "session" not in data:
        return data
    sess, step = data["session"], data["step"]
    keep = np.ones(len(step), dtype=bool)
    if sessions is not None and len(sessions.get("session", [])):
        for s, st in zip(np.asarray(sessions["session"]), np.asarray(sessions["step"]), strict=True):
            keep &= ~((sess < int(s)) & (step >= int(st)))
    order = np.argsort(step[keep], kind="stable")
    return {k: v[keep][order] for k, v in data.items()}


def _text(x: Any) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes | np.bytes_) else str(x)


@dataclass(frozen=True)
class MonitorView:
    """Everything the monitor wrote for one label, as the latest sessions see it.

    ``probes[name]``, ``train`` and ``bench`` map column names to arrays; ``events`` is a list of dicts;
    ``settings`` is the latest session's settings (rules, interval, probes...); ``sessions``: how many
    ``train()`` calls recorded it.
    """

    label: str
    probes: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    train: dict[str, np.ndarray] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    bench: dict[str, np.ndarray] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    sessions: int = 0

    @property
    def last_step(self) -> int | None:
        steps = [int(v["step"].max()) for v in self.probes.values() if len(v.get("step", []))]
        return max(steps) if steps else None

    @property
    def n_rows(self) -> int:
        return sum(len(v.get("step", [])) for v in self.probes.values()) + len(self.train.get("step", [])) + len(
            self.events)


def monitor_labels(reader: SeriesReader) -> list[str]:
    """The labels (monitored training runs) in the file, in the order their latest session started
    (the most recent last)."""
    found: list[tuple[float, str]] = []
    for name in reader.names():
        if name.startswith(PREFIX) and name.endswith("/sessions"):
            t = reader.read(name).get("time")
            found.append((float(t.max()) if t is not None and len(t) else 0.0, name[len(PREFIX):-len("/sessions")]))
    return [label for _, label in sorted(found)]


def phase_of(label: str) -> str:
    """The training phase a label records (``lead-time/seq-ecom-sft`` -> ``seq-ecom-sft``)."""
    return label[len(LEAD_LABEL_PREFIX):] if label.startswith(LEAD_LABEL_PREFIX) else label


def monitor_phases(reader: SeriesReader) -> dict[str, list[str]]:
    """Each monitored phase once, with the labels that record it: the training run's own label first,
    then its lead-time retrain. Phases are ordered by their latest session (the most recent last)."""
    labels = monitor_labels(reader)
    phases: dict[str, list[str]] = {}
    for label in labels:  # oldest first: a phase's position is set by its latest label below
        phases.setdefault(phase_of(label), []).append(label)
    latest = {phase_of(label): k for k, label in enumerate(labels)}
    return {p: sorted(phases[p], key=lambda lab: lab.startswith(LEAD_LABEL_PREFIX))
            for p in sorted(phases, key=latest.__getitem__)}


def load_monitor(reader: SeriesReader, label: str) -> MonitorView:
    """Read every series of ``label`` (after refreshing them), upgraded to the current version; an empty view when
    the file holds none."""
    key = monitor_key(label)
    base = key + "/"
    names = [n for n in reader.names() if n.startswith(base)]
    attrs = reader.attrs(key) if names else {}
    where = f"{reader.path}:series/{key}"
    found = attrs.get("result-type", RESULT_TYPE)
    if found != RESULT_TYPE:
        raise StoreError(f"{where} holds a {found!r} result, not {RESULT_TYPE!r}; choose a monitored training run")
    version = str(attrs.get("result-version", FIRST_VERSION))
    with damaged(reader.path, f"series/{key}"):
        major = int(version.split(".")[0])
    if major > int(RESULT_VERSION.split(".")[0]):
        raise StoreError(f"{where} was written by a newer aclarena ({RESULT_TYPE} result version {version}, this one "
                         f"reads {RESULT_VERSION.split('.')[0]}.x); upgrade aclarena")
    stored = Stored(key=key, version=version, attrs=attrs, data={n[len(base):]: reader.read(n) for n in names})
    with damaged(reader.path, f"series/{key}"):
        return decode(registry.upgrade_stored(stored, RESULT_TYPE, RESULT_VERSION, UPGRADES, f"{reader.path}:series/",
                                                rerun="the monitored training that wrote it"))


def decode(s: Stored) -> MonitorView:
    """A current-version label (``data``: each series' columns by its name below ``monitor/<label>/``) as its
    payload, every series as the latest sessions see it."""
    sessions = s.data.get("sessions")
    count, settings = 0, {}
    if sessions is not None and len(sessions["session"]):
        count = int(len(sessions["session"]))
        try:
            settings = json.loads(_text(sessions["settings"][-1]))
        except (ValueError, RecursionError):
            settings = {}
        # readers take it for an object (`settings.get`): another JSON value says nothing about the session
        settings = settings if isinstance(settings, dict) else {}
    probes: dict[str, dict[str, np.ndarray]] = {}
    train: dict[str, np.ndarray] = {}
    bench: dict[str, np.ndarray] = {}
    events: list[dict[str, Any]] = []
    for rest, columns in s.data.items():
        if rest.startswith("probes/"):
            probes[rest[len("probes/"):]] = latest_rows(columns, sessions)
        elif rest == "train":
            train = latest_rows(columns, sessions)
        elif rest == "bench":
            bench = latest_rows(columns, sessions)
        elif rest == "events":
            ev = latest_rows(columns, sessions)
            for i in range(len(ev.get("step", []))):
                events.append({"step": int(ev["step"][i]), "series": _text(ev["series"][i]),
                               "metric": _text(ev["metric"][i]), "value": float(ev["value"][i]),
                               "rule": _text(ev["rule"][i]), "limit": float(ev["limit"][i]),
                               "score": float(ev["score"][i]), "action": _text(ev["action"][i]),
                               "time": float(ev["time"][i])})
    return MonitorView(label=s.key[len(PREFIX):], probes=probes, train=train, events=events, bench=bench,
                       settings=settings, sessions=count)


STORE_ERRORS = ("raise", "continue")
SETTINGS_WIDTH = 8192
logger = logging.getLogger("aclarena.monitor")


# --- the writer of the monitor series (aclarena.train.callbacks.DriftMonitorCallback) --------------


def series_names(label: str, probes: Sequence[str]) -> dict[str, str]:
    """The series of one monitored training run (``label``), by role."""
    key = monitor_key(label)
    out = {"sessions": f"{key}/sessions", "train": f"{key}/train", "events": f"{key}/events"}
    for p in probes:
        out[f"probe:{p}"] = f"{key}/probes/{p}"
    return out


def bench_name(label: str) -> str:
    """The ground-truth evaluations' series of ``label`` (``monitor --lead-time``)."""
    return f"{monitor_key(label)}/bench"


#: the ``bench`` series' attribute naming what its evaluations were (JSON), when they ride a curriculum's phase
BENCH_SETTINGS_ATTR = "ground-truth"


def bench_settings(reader: SeriesReader, label: str) -> dict[str, Any] | None:
    """The settings stored with ``label``'s ground-truth evaluations (:data:`BENCH_SETTINGS_ATTR`), None when the
    file has no such series or it was written without them."""
    name = bench_name(label)
    if name not in reader.names():
        return None
    raw = reader.attrs(name).get(BENCH_SETTINGS_ATTR)
    if raw is None:
        return None
    with damaged(reader.path, f"series/{name}"):
        value = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
    return value if isinstance(value, dict) else None


def probe_columns(metrics: Iterable[str]) -> dict[str, str]:
    """The columns of a probe's series: one float per metric (:data:`aclarena.diagnostics.monitor_metrics.METRICS`)."""
    return {"session": "i4", "step": "i8", "time": "f8", **{m: "f8" for m in metrics}}


SESSION_COLUMNS = {"session": "i4", "step": "i8", "time": "f8", "settings": f"S{SETTINGS_WIDTH}"}
TRAIN_COLUMNS = {"session": "i4", "step": "i8", "time": "f8", "loss": "f8"}
EVENT_COLUMNS = {"session": "i4", "step": "i8", "time": "f8", "series": "S64", "metric": "S32", "value": "f8",
                 "rule": "S16", "limit": "f8", "score": "f8", "action": "S8"}
#: the most items one ground-truth evaluation holds: ``outcomes`` is one byte (``0``/``1``) per item
MAX_ITEMS = 512
BENCH_COLUMNS = {"session": "i4", "step": "i8", "time": "f8", "suite": "S32", "n": "i4", "correct": "i4",
                 "accuracy": "f8", "outcomes": f"S{MAX_ITEMS}"}


class MonitorStore:
    """One ``series.h5`` writer shared by the callbacks of a training run.

    Callbacks :meth:`declare` their series and :meth:`declare_label` their label when they are built (the
    label's group is stamped with the result type and version when it is created); the first ``on_train_begin``
    :meth:`acquire` s the writer (every declared series is created before SWMR starts), the
    last ``on_train_end`` releases it. ``on_error="continue"`` turns a store that cannot be
    written (locked by another writer, read-only, full) into a logged warning and a monitor
    that stops writing; ``"raise"`` (default) stops training with the error.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, on_error: str = "raise") -> None:
        if on_error not in STORE_ERRORS:
            raise AclarenaError(f"on_store_error must be one of {', '.join(STORE_ERRORS)}, got {on_error!r}"
                                f"{did_you_mean(str(on_error), STORE_ERRORS)}")
        self.run_dir = Path(run_dir)
        self.on_error = on_error
        self.schema: dict[str, dict[str, str]] = {}
        self.attrs: dict[str, dict[str, str]] = {}
        self.groups: dict[str, dict[str, str]] = {}
        self._writer: Any = None
        self._users = 0
        self.failed: str | None = None

    def declare(self, name: str, columns: Mapping[str, str], attrs: Mapping[str, str] | None = None) -> None:
        """The series ``name`` with ``columns``; ``attrs`` are written when this store creates it."""
        if self._writer is not None:
            raise AclarenaError(f"series {name!r} declared after the store was opened; declare every series first")
        old = self.schema.get(name)
        if old is not None and old != dict(columns):
            raise AclarenaError(f"series {name!r} declared twice with different columns")
        if attrs and self.attrs.get(name, dict(attrs)) != dict(attrs):
            raise AclarenaError(f"series {name!r} declared twice with different attributes")
        self.schema[name] = dict(columns)
        if attrs:
            self.attrs[name] = dict(attrs)

    def declare_label(self, label: str) -> None:
        """The group ``monitor/<label>`` gets the attributes ``result-type`` and ``result-version`` when this store
        creates it (a group already in the file keeps what it has)."""
        if self._writer is not None:
            raise AclarenaError(f"label {label!r} declared after the store was opened; declare every label first")
        self.groups[monitor_key(label)] = {"result-type": RESULT_TYPE, "result-version": RESULT_VERSION}

    @property
    def writable(self) -> bool:
        return self._writer is not None

    def acquire(self) -> bool:
        """Open the writer (first caller) and count the user; False when the store failed and
        ``on_error="continue"``."""
        self._users += 1
        if self._writer is not None or self.failed is not None:
            return self._writer is not None
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._writer = SeriesWriter(self.run_dir, self.schema, self.attrs, group_attrs=self.groups)
        except (StoreError, OSError) as e:
            self._fail(e, "cannot open")
        return self._writer is not None

    def append(self, name: str, rows: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        if self._writer is None:
            return
        try:
            self._writer.append(name, rows)
        except (StoreError, OSError) as e:
            self.close()
            self._fail(e, "cannot append to")

    def _fail(self, e: BaseException, what: str) -> None:
        msg = str(e).rstrip(".")
        if self.on_error == "raise":
            raise StoreError(f"drift monitor: {msg}; set monitor.on_store_error = \"continue\" (on_store_error="
                             "'continue') to train on without the monitor") from None
        self.failed = msg
        logger.warning("drift monitor: %s; training goes on without the monitor (on_store_error = continue)", msg)

    def release(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users == 0:
            self.close()

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None


def settings_bytes(settings: Mapping[str, Any]) -> bytes:
    """A session's settings as JSON bytes that fit the ``settings`` column."""
    text = json.dumps(settings, sort_keys=True, default=str)
    raw = text.encode()
    if len(raw) > SETTINGS_WIDTH:  # keep the rules (what the dashboard draws), drop the rest
        raw = json.dumps({"rules": settings.get("rules"), "truncated": True}, default=str).encode()[:SETTINGS_WIDTH]
    return raw
