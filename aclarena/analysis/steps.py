"""The analyses the demo and the study run, each with its verb's defaults, as typed results.

Each function calls the analysis layer's function of one verb and returns that analysis's own result
(:class:`~aclarena.analysis.eval.EvalResult`, :class:`~aclarena.analysis.tokens.TokenDrift`, ...); a
result the verb would exit 1 on (error cells in the matrix, NaN logits) raises
:class:`~aclarena.errors.AclarenaError` with the verb's line. :func:`attempt` turns a failed step
into the line the verb would end with, so that one failed step does not stop the others; the demo
records such a step as :class:`Failed`.

The demo and the study read these results through their typed accessors (``SignaturesResult.signed()``,
``ConsolidateResult.made()``, ``RepairRunResult.made()``, ``VectorsResult.asked_cosines()``,
``DisplacementResult.stage_norms()``), never another verb's JSON keys or display labels.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aclarena.analysis._common import Pair, RunPath, jsonable
from aclarena.errors import AclarenaError

if TYPE_CHECKING:
    from aclarena.analysis.compare import CompareResult
    from aclarena.analysis.consolidate import ConsolidateResult
    from aclarena.analysis.displacement import DisplacementResult
    from aclarena.analysis.eval import EvalResult
    from aclarena.analysis.forgetting import ForgettingResult
    from aclarena.analysis.repair import RepairRunResult
    from aclarena.analysis.signatures import SignaturesResult
    from aclarena.analysis.tokens import TokenDrift
    from aclarena.analysis.vectors import VectorsResult
    from aclarena.results.probes import ProbeSet

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


@dataclass(frozen=True)
class Failed:
    """A step that failed: the line its verb would end with."""

    line: str


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


def eval_cells(run_dir: RunPath, checkpoints: Sequence[str], suites: str, n: int) -> EvalResult:
    """``eval --checkpoints ... --suites ... -n N --samples 0 --seeds 0``: greedy only, one task draw."""
    from aclarena.analysis.eval import evaluate

    result = evaluate(run_dir, checkpoints=list(checkpoints), suites=suites, n=n, samples=0, seeds=(0,))
    error = result.error_message()
    if error is not None:  # as the verb: the matrix is stored, the step failed
        raise AclarenaError(error)
    return result


def probe(run_dir: RunPath, ref: str, domain: str, n: int) -> ProbeSet:
    """``probe --ref REF --domain D -n N --max-new-tokens 64``: freeze ``ref``'s greedy generations."""
    from aclarena.analysis.probe import freeze_probe
    from aclarena.probes.generation import GenerationSettings

    return freeze_probe(run_dir, ref, domain=domain, n=n,
                        settings=GenerationSettings(max_new_tokens=64, temperature=0.0, seed=0, batch_size=8))


def tokens(run_dir: RunPath, ref: str) -> TokenDrift:
    """``tokens --ref REF``: drift of the checkpoints after ``ref`` on its probe set."""
    from aclarena.analysis.tokens import tokens as score

    result = score(run_dir, ref)
    flagged = result.flagged_message()
    if flagged is not None:  # as the verb: the scores are stored, the step failed
        raise AclarenaError(flagged)
    return result


def signatures(run_dir: RunPath, n: int, updates: Sequence[str] | None = None) -> SignaturesResult:
    """``signatures -n N [--updates ...]``: every SFT and RL phase and stage (or ``updates``) signed on its parent's
    own generations; an update without a signature (e.g. an RL phase that did not move) is named in ``failed``,
    the others kept."""
    from aclarena.analysis.signatures import signatures as sign

    return sign(run_dir, n=n, updates=updates, show_progress=False, strict=False)


def vectors(run_dir: RunPath, pairs: Sequence[str] = ()) -> VectorsResult:
    """``vectors [--pair A-B:C-D ...]``: task vectors (global view, embeddings included)."""
    from aclarena.analysis.vectors import vectors as measure

    return measure(run_dir, pairs=list(pairs))


def displacement(run_dir: RunPath) -> DisplacementResult:
    """``displacement``: SFT vs RL displacement (global view, the default tolerances)."""
    from aclarena.analysis.displacement import DEFAULT_TOLERANCES
    from aclarena.analysis.displacement import displacement as measure

    return measure(run_dir, tolerances=DEFAULT_TOLERANCES)


def forgetting(run_dir: RunPath) -> ForgettingResult:
    """``forgetting``: the continual-learning metrics of the capability matrix."""
    from aclarena.analysis.forgetting import forgetting as measure

    return measure(run_dir)


def lead_time(run_dir: RunPath, stage: str, n: int, eval_every: int) -> dict[str, Any]:
    """``monitor --lead-time --stage S -n N --eval-every M``: retrain ``stage`` with the monitor (its result is
    plain data: :func:`~aclarena.train.lead_time.measure_lead_time`'s, as JSON carries it)."""
    from aclarena.train.lead_time import LeadTimeSettings, measure_lead_time

    return jsonable(measure_lead_time(run_dir, LeadTimeSettings(stage=stage, n=n, eval_every=eval_every)))


def consolidate(run_dir: RunPath, method: str, *, seeds: int = 1, start: str | None = None) -> ConsolidateResult:
    """``consolidate --method M [--seeds N] [--start FROM]``, the other options the verb's defaults."""
    from aclarena.analysis.consolidate import consolidate as run
    from aclarena.consolidate.options import options_for

    options = options_for(method) if start is None else options_for(method, start=start)
    return run(run_dir, method, seeds=seeds, options=options)


def repair(run_dir: RunPath, old: str, new: str, name: str, percent: float) -> RepairRunResult:
    """``repair --from OLD --to NEW --method svd-restore --rank-percent P --name NAME``."""
    from aclarena.analysis.repair import repair as run

    return run(run_dir, old=old, new=new, method="svd-restore", name=name, percents=percent)


def compare(run_dir: RunPath) -> CompareResult:
    """``compare``: the study-shaped comparison table (rule router, greedy scores)."""
    from aclarena.analysis.compare import compare as table

    return table(run_dir)


def pair_arg(pair: Pair) -> str:
    """``vectors --pair``'s text of ``pair``: ``A - B:C - D``."""
    (a, b), (c, d) = pair
    return f"{a} - {b}:{c} - {d}"
