"""Reading the drift monitor's series (``series.h5``, ``monitor/<label>/...``), live or after the fact.

The layout (written by :class:`aclarena.train.callbacks.DriftMonitorCallback`, specified in
docs/store-format.md): per monitored training run ``<label>`` (a phase such as
``seq-ecom-sft``), ``sessions`` (one row per ``train()`` call: its start step and settings
as JSON), ``probes/<probe>`` (one row per check: the metrics), ``train`` (the trainer's loss
at each logging step), ``events`` (the warnings) and, for lead-time runs, ``bench`` (the
ground-truth evaluations). A resumed session supersedes the rows of earlier sessions from
the step it resumed at (:func:`latest_rows`).

numpy and h5py only (through :class:`~aclarena.store.series.SeriesReader`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.store.series import SeriesReader

PREFIX = "monitor/"
#: results.h5 group of the lead-time tables (``monitor/lead-time/<stage>``).
LEAD_KEY = "monitor/lead-time"


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


@dataclass
class MonitorView:
    """Everything the monitor wrote for one label, as the latest sessions see it.

    ``probes[name]`` and ``train`` map column names to arrays; ``events`` is a list of dicts;
    ``settings`` is the latest session's settings (rules, interval, probes...).
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


def load_monitor(reader: SeriesReader, label: str) -> MonitorView:
    """Read every series of ``label`` (after refreshing them)."""
    base = f"{PREFIX}{label}/"
    names = [n for n in reader.names() if n.startswith(base)]
    view = MonitorView(label=label)
    sessions = reader.read(base + "sessions") if base + "sessions" in names else None
    if sessions is not None and len(sessions["session"]):
        view.sessions = int(len(sessions["session"]))
        try:
            view.settings = json.loads(_text(sessions["settings"][-1]))
        except ValueError:
            view.settings = {}
    for n in names:
        rest = n[len(base):]
        if rest.startswith("probes/"):
            view.probes[rest[len("probes/"):]] = latest_rows(reader.read(n), sessions)
        elif rest == "train":
            view.train = latest_rows(reader.read(n), sessions)
        elif rest == "bench":
            view.bench = latest_rows(reader.read(n), sessions)
        elif rest == "events":
            ev = latest_rows(reader.read(n), sessions)
            for i in range(len(ev.get("step", []))):
                view.events.append({"step": int(ev["step"][i]), "series": _text(ev["series"][i]),
                                    "metric": _text(ev["metric"][i]), "value": float(ev["value"][i]),
                                    "rule": _text(ev["rule"][i]), "limit": float(ev["limit"][i]),
                                    "score": float(ev["score"][i]), "action": _text(ev["action"][i]),
                                    "time": float(ev["time"][i])})
    return view
