"""A finished phase on disk: its completion marker, its training log, and what a rerun reads back.

A phase is *finished* when its output folder holds the marker (``.aclarena-phase.json``), written
last, atomically, after the weights, the tokenizer and the log (``train_log.json``);
:func:`finished` returns the recorded :class:`PhaseResult` when the marker's fingerprint is the
phase's, so a rerun skips it. A marker someone changed is one line, never "not finished" (which
would retrain over the folder). :mod:`aclarena.train.phases` writes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclarena.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    pass


MARKER = ".aclarena-phase.json"



LOG_FILE = "train_log.json"



@dataclass(frozen=True)
class PhaseResult:
    """What a finished phase recorded.

    Attributes:
        folder: the checkpoint folder (HF format, safetensors, tokenizer beside it).
        steps: optimizer steps of the phase.
        time_s: wall time of the training call that finished it (a resumed phase counts its last
            session only; ``resumed_from_step`` says where that session started).
        log_history: the trainer's log history (loss, reward, entropy, ... per logging step).
        skipped: True when the phase was already finished and nothing ran.
        meta: what the caller recorded with it (name, seed, parent, fingerprint...).
    """

    folder: Path
    steps: int
    time_s: float
    log_history: list[dict[str, Any]] = field(default_factory=list)
    resumed_from_step: int | None = None
    skipped: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)



def read_marker(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The completion marker of a phase folder, or None when the phase is not finished.

    Raises:
        CheckpointError: a marker that is not JSON or not of the marker's shape (it is written
            atomically by aclarena, so someone changed it): one line naming the file. Treating it
            as "not finished" would retrain the phase over the folder's checkpoint.
    """
    path = Path(folder) / MARKER
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = _NOT_JSON
    problem = "not JSON" if data is _NOT_JSON else _marker_problem(data)
    if problem is not None:
        raise CheckpointError(f"{path} is damaged ({problem}); restore it, or delete {Path(folder)} to retrain that "
                              "phase")
    return data



_NOT_JSON = object()



def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0



def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)



def _marker_problem(data: Any) -> str | None:
    """What is wrong with a phase marker's shape, or None."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    checks = (("fingerprint", lambda v: isinstance(v, str), "a string"),
              ("steps", _is_count, "a non-negative integer"),
              ("time_s", _is_number, "a number"),
              ("finished_at", _is_number, "a number"),
              ("resumed_from_step", _is_count, "a non-negative integer"),
              ("meta", lambda v: isinstance(v, dict), "an object"))
    for key, ok, what in checks:
        if data.get(key) is not None and not ok(data[key]):
            return f"`{key}` is not {what}"
    return None



def read_log(path: Path) -> list[dict[str, Any]]:
    """A phase's training log (``train_log.json``): a list of objects; [] when there is none.

    Raises:
        CheckpointError: a log that is not JSON or not a list of objects (one line naming the file).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = _NOT_JSON
    if not (isinstance(data, list) and all(isinstance(row, dict) for row in data)):
        what = "not JSON" if data is _NOT_JSON else "not a list of objects"
        raise CheckpointError(f"{path} is damaged ({what}); restore it, or delete {path.parent} to retrain that phase")
    return data



def finished(folder: str | os.PathLike[str], fingerprint: str | None = None) -> PhaseResult | None:
    """The recorded result of a finished phase in ``folder`` (None if unfinished).

    A finished phase whose fingerprint differs from ``fingerprint`` is an error: the folder
    holds a model trained with other settings.
    """
    folder = Path(folder)
    marker = read_marker(folder)
    if marker is None:
        return None
    if fingerprint is not None and marker.get("fingerprint") not in (None, fingerprint):
        raise ConfigError(
            f"{folder} holds a phase trained with other settings (fingerprint {marker.get('fingerprint')} != "
            f"{fingerprint}); train into a new --out, or delete that folder to retrain it"
        )
    if not any((folder / n).is_file() for n in ("model.safetensors", "model.safetensors.index.json",
                                                 "adapter_model.safetensors")):
        raise CheckpointError(
            f"{folder} is marked finished but its weights are missing; delete the folder to retrain that phase"
        )
    logs = read_log(folder / LOG_FILE)
    # a null field reads as absent (the shape check lets both through)
    return PhaseResult(folder=folder, steps=int(marker.get("steps") or 0), time_s=float(marker.get("time_s") or 0.0),
                       log_history=logs, resumed_from_step=marker.get("resumed_from_step"), skipped=True,
                       meta=marker.get("meta") or {})



def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    from aclarena.store.manifest import keep_mode

    keep_mode(tmp, path)
    os.replace(tmp, path)
