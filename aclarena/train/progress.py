"""Progress across the phases of a curriculum, and trainer logs as store tables.

:class:`PhaseProgress` is a ``transformers.TrainerCallback`` that moves one rich progress bar
per phase (steps, last loss / reward) under the curriculum's overall bar; it replaces the
trainers' own printing. :func:`log_table` turns a trainer's ``log_history`` into the columns of
the ``train/<checkpoint>`` result in results.h5 (docs/store-format.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import TrainerCallback

# Shown on the bar when present, in this order.
SHOWN = ("loss", "reward", "entropy", "kl")


class PhaseProgress(TrainerCallback):
    """Advance ``task`` of a rich ``Progress`` with the trainer's steps; show the last loss/reward."""

    def __init__(self, progress: Any, task: Any, label: str, overall: tuple[Any, int] | None = None) -> None:
        """``overall``: the curriculum's bar counted in steps and the steps of the phases before this one; it
        moves with every step, so its rate and ETA are those of the whole curriculum."""
        self.progress = progress
        self.task = task
        self.label = label
        self.overall = overall
        self.last: dict[str, float] = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.progress.update(self.task, total=max(1, int(state.max_steps or 1)), completed=int(state.global_step))
        self._advance_overall(state)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.progress.update(self.task, completed=int(state.global_step))
        self._advance_overall(state)

    def _advance_overall(self, state: Any) -> None:
        if self.overall is not None:
            task, before = self.overall
            self.progress.update(task, completed=before + int(state.global_step))

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        for k in SHOWN:
            v = (logs or {}).get(k)
            if isinstance(v, int | float):
                self.last[k] = float(v)
        shown = "  ".join(f"{k} {v:.3g}" for k, v in self.last.items())
        self.progress.update(self.task, description=f"{self.label}  {shown}".rstrip())


def remove_printer(trainer: Any) -> None:
    """Drop transformers' PrinterCallback/ProgressCallback: the curriculum shows its own progress."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for cb in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cb)


def log_table(history: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Columns of a trainer log history: ``step`` first, one float column per numeric key (NaN where a
    row lacks it), names with ``/`` written with ``.`` (``rewards.env_reward.mean``). The final
    summary row of ``Trainer.train`` (``train_runtime``...) is left out."""
    rows = [r for r in history if "train_runtime" not in r]
    keys: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and k not in keys:
                keys.append(k)
    cols: dict[str, list[Any]] = {"step": [int(r.get("step", 0)) for r in rows]}
    for k in keys:
        cols[k.replace("/", ".")] = [float(r[k]) if isinstance(r.get(k), int | float) else math.nan for r in rows]
    return cols
