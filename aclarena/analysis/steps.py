"""The analyses the demo and the study run, each with its verb's defaults, as plain data.

Each function calls the analysis layer's function of one verb and returns what that verb prints
with ``--json`` (:func:`~aclarena.analysis._common.jsonable` of the result's ``to_dict()``); a
result the verb would exit 1 on (error cells in the matrix, NaN logits) raises
:class:`~aclarena.errors.AclarenaError` with the verb's line. :func:`attempt` turns a failed step
into the line the verb would end with, so that one failed step does not stop the others.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aclarena.analysis._common import RunPath, jsonable
from aclarena.errors import AclarenaError

T = TypeVar("T")


def error_line(verb: str, e: Exception) -> str:
    """The line ``aclarena-diag VERB`` ends with when its work fails with ``e``."""
    if isinstance(e, AclarenaError):
        line = f"aclarena-diag {verb}: error: {e}"
    else:  # a bug: the line names it as one
        line = f"aclarena-diag {verb}: internal error: {type(e).__name__}: {e}; report it"
    return line.strip().splitlines()[-1]


def attempt(verb: str, fn: Callable[[], T]) -> tuple[T | None, str | None]:
    """``(fn(), None)``, or ``(None, the verb's error line)`` when it fails (Ctrl-C still stops everything)."""
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 (a failed step is recorded by the caller; the other steps go on)
        return None, error_line(verb, e)



@dataclass
class Parts:
    """A multi-part job's bookkeeping: seconds per part (:meth:`part`) and the one-line error of each
    analysis that failed (:meth:`verb`, through :func:`attempt`), with optional start/end callbacks."""

    on_start: Callable[[str], None] | None = None
    on_part: Callable[[str, float], None] | None = None
    times: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def part(self, name: str, fn: Callable[[], Any]) -> Any:
        if self.on_start is not None:
            self.on_start(name)
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.monotonic() - t0
            if self.on_part is not None:
                self.on_part(name, time.monotonic() - t0)

    def verb(self, name: str, verb_name: str, fn: Callable[[], Any]) -> Any:
        data, error = attempt(verb_name, fn)
        if error is not None:
            self.errors[name] = error
        return data


def write_report(path: Path, data: Any) -> Path:
    """A multi-part job's report (``findings.json``, ``orders.json``): strict JSON, written whole then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        raise AclarenaError(f"cannot write {path}: {e.strerror or e}; free space or fix permissions, then rerun "
                            "(finished work is kept)") from None
    return path


def eval_cells(run_dir: RunPath, checkpoints: Sequence[str], suites: str, n: int) -> dict[str, Any]:
    """``eval --checkpoints ... --suites ... -n N --samples 0 --seeds 0``: greedy only, one task draw."""
    from aclarena.analysis.eval import evaluate

    result = evaluate(run_dir, checkpoints=list(checkpoints), suites=suites, n=n, samples=0, seeds=(0,))
    error = result.error_message()
    if error is not None:  # as the verb: the matrix is stored, the step failed
        raise AclarenaError(error)
    return jsonable(result.to_dict())


def probe(run_dir: RunPath, ref: str, domain: str, n: int) -> dict[str, Any]:
    """``probe --ref REF --domain D -n N --max-new-tokens 64``: freeze ``ref``'s greedy generations."""
    from aclarena.analysis.probe import describe, freeze_probe
    from aclarena.probes.generation import GenerationSettings

    frozen = freeze_probe(run_dir, ref, domain=domain, n=n,
                          settings=GenerationSettings(max_new_tokens=64, temperature=0.0, seed=0, batch_size=8))
    return jsonable(describe(frozen))


def tokens(run_dir: RunPath, ref: str) -> dict[str, Any]:
    """``tokens --ref REF``: drift of the checkpoints after ``ref`` on its probe set."""
    from aclarena.analysis.tokens import tokens as score

    result = score(run_dir, ref)
    flagged = result.flagged_message()
    if flagged is not None:  # as the verb: the scores are stored, the step failed
        raise AclarenaError(flagged)
    return jsonable(result.to_dict())


def signatures(run_dir: RunPath, n: int, updates: Sequence[str] | None = None) -> dict[str, Any]:
    """``signatures -n N [--updates ...]``: every SFT and RL phase and stage (or ``updates``) signed on its parent's
    own generations; an update without a signature (e.g. an RL phase that did not move) is named in ``failed``,
    the others kept."""
    from aclarena.analysis.signatures import signatures as sign

    return jsonable(sign(run_dir, n=n, updates=updates, show_progress=False, strict=False).to_dict())


def vectors(run_dir: RunPath, pairs: Sequence[str] = ()) -> dict[str, Any]:
    """``vectors [--pair A-B:C-D ...]``: task vectors (global view, embeddings included)."""
    from aclarena.analysis.vectors import vectors as measure

    return jsonable(measure(run_dir, pairs=list(pairs)).to_dict())


def displacement(run_dir: RunPath) -> dict[str, Any]:
    """``displacement``: SFT vs RL displacement (global view, the default tolerances)."""
    from aclarena.analysis.displacement import DEFAULT_TOLERANCES
    from aclarena.analysis.displacement import displacement as measure

    return jsonable(measure(run_dir, tolerances=DEFAULT_TOLERANCES).to_dict())


def forgetting(run_dir: RunPath) -> dict[str, Any]:
    """``forgetting``: the continual-learning metrics of the capability matrix."""
    from aclarena.analysis.forgetting import forgetting as measure

    return jsonable(measure(run_dir).to_dict())


def lead_time(run_dir: RunPath, stage: str, n: int, eval_every: int) -> dict[str, Any]:
    """``monitor --lead-time --stage S -n N --eval-every M``: retrain ``stage`` with the monitor."""
    from aclarena.train.lead_time import LeadTimeSettings, measure_lead_time

    return jsonable(measure_lead_time(run_dir, LeadTimeSettings(stage=stage, n=n, eval_every=eval_every)))


def consolidate(run_dir: RunPath, method: str, *, seeds: int = 1, start: str | None = None) -> dict[str, Any]:
    """``consolidate --method M [--seeds N] [--start FROM]``, the other options the verb's defaults."""
    from aclarena.analysis.consolidate import consolidate as run
    from aclarena.consolidate.options import options_for

    options = options_for(method) if start is None else options_for(method, start=start)
    return jsonable(run(run_dir, method, seeds=seeds, options=options).to_dict())


def repair(run_dir: RunPath, old: str, new: str, name: str, percent: float) -> dict[str, Any]:
    """``repair --from OLD --to NEW --method svd-restore --rank-percent P --name NAME``."""
    from aclarena.analysis.repair import repair as run

    return jsonable(run(run_dir, old=old, new=new, method="svd-restore", name=name, percents=percent).to_dict())


def compare(run_dir: RunPath) -> dict[str, Any]:
    """``compare``: the study-shaped comparison table (rule router, greedy scores)."""
    from aclarena.analysis.compare import compare as table

    return jsonable(table(run_dir).to_dict())
