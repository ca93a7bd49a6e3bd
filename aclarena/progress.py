"""Console helpers used below the command line: progress on stderr, quiet libraries.

The analysis layer, training and the CLI all show progress the same way; they live here, not
in ``aclarena.cli``, because nothing outside ``cli/`` imports it.

On a terminal, progress is a rich bar (or spinner). When stderr is not a terminal (a log file, CI,
``nohup``, a cluster job) a bar renders nothing, so the same calls print plain lines instead, the way
HF Trainer's logs do: one line when a phase starts, one when it ends, and in between a line at least
every ``ACLARENA_PROGRESS_INTERVAL`` seconds (default 30) with step, total and rate, each flushed.
``ACLARENA_PROGRESS_INTERVAL=0`` turns the log lines off (the test suite does, so that its bad-input
tests still read one line on stderr).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

INTERVAL_ENV = "ACLARENA_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 30.0


def log_interval() -> float:
    """Seconds between progress lines in a log: ``ACLARENA_PROGRESS_INTERVAL`` or 30; 0 means no lines."""
    text = os.environ.get(INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        from aclarena.errors import AclarenaError

        raise AclarenaError(f"{INTERVAL_ENV}={text!r}: give a number of seconds between progress lines in a "
                            "log (30 by default, 0 for none)")
    return value


def _seconds(s: float) -> str:
    s = max(0.0, s)
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


@dataclass(slots=True)
class _Task:
    description: str
    total: float | None
    completed: float = 0.0
    started: float = field(default_factory=time.monotonic)
    ended: bool = False
    unit: str = "steps"  # what is counted (tensors, ...); "bytes": amounts and rates are sizes


class LogProgress:
    """The subset of ``rich.progress.Progress`` aclarena uses (``add_task``, ``update``, ``advance``),
    written as log lines: start and end of each task, and the state of every running task each
    ``interval`` seconds (from a daemon thread, so a long step without updates still shows up)."""

    def __init__(self, interval: float | None = None, stream: Any = None) -> None:
        self.interval = log_interval() if interval is None else float(interval)
        if not self.interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {self.interval!r}")
        # bound now: a caller may redirect sys.stderr while the work runs (the demo captures each step's
        # stderr to read its error line), and the lines belong on the stream the user watches
        self._stream = stream if stream is not None else sys.stderr
        self._tasks: dict[int, _Task] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # the context manager and rich's start/stop
    def __enter__(self) -> LogProgress:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.stop(failed=exc_type is not None)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="aclarena-progress", daemon=True)
            self._thread.start()

    def stop(self, *, failed: bool = False) -> None:
        """End every running task: an ``end`` line each, or ``stopped`` when the work raised."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for t in self._tasks.values():
                if not t.ended:
                    self._end(t, "stopped" if failed else "end")

    # the Progress API
    def add_task(self, description: str, total: float | None = None, completed: float = 0, *,
                 unit: str = "steps", **_: Any) -> int:
        """As rich's; ``unit="bytes"`` (a rich task field there) says the amounts are bytes."""
        with self._lock:
            task_id = len(self._tasks)
            t = _Task(description, None if total is None else float(total), float(completed), unit=unit)
            self._tasks[task_id] = t
            self._say(f"start: {description}" + (f" ({_total(t)})" if t.total is not None else ""))
            return task_id

    def update(self, task_id: int, *, total: float | None = None, completed: float | None = None,
               advance: float | None = None, description: str | None = None, **_: Any) -> None:
        with self._lock:
            t = self._tasks[task_id]
            restart = completed == 0 and description is not None and description != t.description
            if restart and not t.ended and t.completed > 0:
                self._end(t)
            if description is not None:
                t.description = description
            if total is not None:
                t.total = float(total)
            if restart:
                t.started, t.ended, t.completed = time.monotonic(), False, 0.0
                self._say(f"start: {t.description}" + (f" ({_total(t)})" if t.total is not None else ""))
            if completed is not None:
                t.completed = float(completed)
            if advance is not None:
                t.completed += float(advance)
            if not t.ended and t.total is not None and t.total > 0 and t.completed >= t.total:
                self._end(t)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    # the lines
    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                for t in self._tasks.values():
                    if not t.ended:
                        self._say(self._state(t))

    def _state(self, t: _Task) -> str:
        elapsed = time.monotonic() - t.started
        rate = t.completed / elapsed if elapsed > 0 else 0.0
        if t.total is None:
            steps = (f", {_bytes(t.completed)} read" if t.unit == "bytes" else f", step {_n(t.completed)}") \
                if t.completed else ""
            return f"{t.description}: running{steps}, elapsed {_seconds(elapsed)}"
        pct = 100.0 * t.completed / t.total if t.total > 0 else 0.0
        eta = f", eta {_seconds((t.total - t.completed) / rate)}" if rate > 0 else ""
        if t.unit == "bytes":
            return (f"{t.description}: {_bytes(t.completed)} of {_bytes(t.total)} read ({pct:.0f}%), "
                    f"{_bytes(rate)}/s, elapsed {_seconds(elapsed)}{eta}")
        return (f"{t.description}: step {_n(t.completed)}/{_n(t.total)} ({pct:.0f}%), {rate:.3g} {t.unit}/s, "
                f"elapsed {_seconds(elapsed)}{eta}")

    def _end(self, t: _Task, word: str = "end") -> None:
        t.ended = True
        elapsed = time.monotonic() - t.started
        if t.total is None and t.completed == 0:
            self._say(f"{word}: {t.description} ({_seconds(elapsed)})")
            return
        rate = t.completed / elapsed if elapsed > 0 else 0.0
        if t.unit == "bytes":
            done = _bytes(t.completed) + (f" of {_bytes(t.total)}" if t.total is not None and t.completed < t.total
                                          else "")
            self._say(f"{word}: {t.description}: {done} read in {_seconds(elapsed)} ({_bytes(rate)}/s)")
            return
        done = _n(t.completed) + (f"/{_n(t.total)}" if t.total is not None else "")
        self._say(f"{word}: {t.description}: {done} {t.unit} in {_seconds(elapsed)} ({rate:.3g} {t.unit}/s)")

    def _say(self, text: str) -> None:
        print(f"[aclarena {time.strftime('%H:%M:%S')}] {text}", file=self._stream, flush=True)


def _total(t: _Task) -> str:
    return f"{_bytes(t.total)} to read" if t.unit == "bytes" else f"{_n(t.total)} {t.unit}"


def _bytes(x: float | None) -> str:
    """A size as people read it: 1.07 GB, 52.1 MB, 900 B (decimal units)."""
    if x is None:
        return "?"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.0f} B"


def _n(x: float | None) -> str:
    return "?" if x is None else (f"{int(x)}" if float(x).is_integer() else f"{x:.1f}")


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _log_lines(interval: float | None) -> bool:
    """Whether a piped stderr gets progress lines: not when the interval is 0, and only from the main
    rank of a launch (every rank shares the job's log)."""
    from aclarena.distributed import env_world

    return (log_interval() if interval is None else interval) > 0 and env_world()[0] == 0


@contextmanager
def progress(enabled: bool = True, *, interval: float | None = None) -> Iterator[Any]:
    """Progress on stderr: a rich bar on a terminal, log lines (:class:`LogProgress`) when stderr is
    not a terminal, nothing when ``enabled`` is false (``--json``, a non-main rank)."""
    if enabled and not stderr_is_terminal():
        if _log_lines(interval):
            with LogProgress(interval) as lp:
                yield lp
            return
        enabled = False
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    ) as p:
        yield p


@contextmanager
def status(what: str, enabled: bool = True, *, interval: float | None = None) -> Iterator[None]:
    """A spinner for work without steps: rich's on a terminal; in a log, a start line, a line each
    interval while it runs and an end line with its time."""
    if not enabled or (not stderr_is_terminal() and not _log_lines(interval)):
        yield
        return
    if not stderr_is_terminal():
        with LogProgress(interval) as lp:
            lp.add_task(what)
            yield
        return
    from rich.console import Console

    with Console(stderr=True).status(what, spinner="dots"):
        yield


def quiet_libraries() -> None:
    """Keep a verb's output to its own table and progress bar: no per-file loading bars from
    transformers, no deprecation notice peft 0.21 triggers in transformers 5."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
