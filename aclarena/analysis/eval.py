"""The capability matrix: every checkpoint on every suite (``aclarena-diag eval``, :meth:`Run.eval`).

Mini-arena suites are played greedily (accuracy per item) and ``samples`` times with sampling
(avg@k), for each seed; each (checkpoint, suite, settings) cell is written to results.h5 as soon
as it is done, so a rerun skips finished cells and a killed run resumes. A checkpoint that
cannot be loaded or generate becomes an error cell; the rest of the matrix is still computed
(error cells are retried on the next run). A cell whose 95% interval holds its suite's guessing
score (``general``: 0.25, one of four options) is named in :attr:`EvalResult.warnings` and marked
``at_chance``: it measures no skill.

:func:`import_lm_eval` reads lm-evaluation-harness results instead (see :mod:`aclarena.results.lm_eval`).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, overload

from aclarena.analysis._common import RunPath, frame, manifest_or_load, manifest_text, options_of
from aclarena.distributed import World
from aclarena.distributed import world as world_of
from aclarena.errors import AclarenaError, unknown_name
from aclarena.progress import progress
from aclarena.store import Manifest

if TYPE_CHECKING:
    from aclarena.results.capability import CellData


@dataclass
class EvalResult:
    """The capability matrix of the asked checkpoints and suites (one process, or rank 0).

    ``cells``: one dict per stored (checkpoint, suite) cell of these settings (status, mean, ci95,
    chance, at_chance, std, avg@k, sizes, error, ``computed`` in this call, the store key);
    ``over_training_seeds``: mean ± std over the curricula of ``train --seeds N``.
    """

    settings: dict[str, Any]
    settings_id: str
    checkpoints: list[str]
    suites: list[str]
    skipped: int
    cells: list[dict[str, Any]]
    over_training_seeds: list[dict[str, Any]] = field(default_factory=list)
    samples: int = 0
    # reruns (--force) that failed where a good cell was stored: the good cell kept, the failure here
    kept: list[dict[str, Any]] = field(default_factory=list)
    writes: tuple[str, ...] = ()  # the store keys of the cells written by this call (docs/python-api.md)
    # (checkpoint, suite) -> chat | plain, and one line per checkpoint whose plain format was detected
    prompt_formats: dict[tuple[str, str], str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What ``aclarena-diag eval --json`` prints."""
        return {"settings": self.settings, "settings_id": self.settings_id, "checkpoints": self.checkpoints,
                "suites": self.suites, "skipped": self.skipped, "cells": self.cells,
                "over_training_seeds": self.over_training_seeds, "rerun_failed_kept": self.kept,
                "notes": self.notes}

    def to_pandas(self) -> Any:
        """DataFrame, one row per cell."""
        return frame(self.cells)

    def scores(self) -> dict[tuple[str, str], float]:
        """Each ok cell's greedy mean by ``(checkpoint, suite)`` (cells without a finite mean left out)."""
        return {(c["checkpoint"], c["suite"]): float(c["mean"]) for c in self.cells
                if c["status"] == "ok" and c["mean"] is not None and math.isfinite(c["mean"])}

    def intervals(self) -> dict[tuple[str, str], list[float]]:
        """Each scored cell's 95% bootstrap interval over items by ``(checkpoint, suite)``."""
        scored = self.scores()
        return {(c["checkpoint"], c["suite"]): [float(x) for x in c["ci95"]] for c in self.cells
                if (c["checkpoint"], c["suite"]) in scored and c["ci95"] is not None}

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The error cells (a checkpoint that could not be loaded, a suite that failed)."""
        return [r for r in self.cells if r["status"] != "ok"]

    @property
    def warnings(self) -> list[str]:
        """One line per suite whose score is indistinguishable from guessing on some checkpoint."""
        from aclarena.envs import suite_chance
        from aclarena.results.capability import at_chance_line

        out = []
        for suite in dict.fromkeys(r["suite"] for r in self.cells if r["at_chance"]):
            names = [r["checkpoint"] for r in self.cells if r["suite"] == suite and r["at_chance"]]
            out.append(at_chance_line(suite, suite_chance(suite), names))
        return out

    def error_message(self) -> str | None:
        """One line naming the failed cells, None when every cell is ok."""
        errors = self.errors
        if self.kept:
            k = self.kept[0]
            return (f"{len(self.kept)} rerun(s) failed, e.g. {k['checkpoint']} on {k['suite']}: {k['error']}; the earlier "
                    "good cell(s) were kept, not replaced by the error" +
                    (f"; {len(errors)} other cell(s) failed" if errors else ""))
        if not errors:
            return None
        first = errors[0]
        return (f"{len(errors)} cell(s) failed, e.g. {first['checkpoint']} on {first['suite']}: {first['error']}; "
                "the rest of the matrix is stored; fix it and rerun to retry them")


@dataclass
class ImportResult:
    """Cells read from lm-evaluation-harness results files: one row per (checkpoint, task)."""

    rows: list[dict[str, Any]]
    writes: tuple[str, ...] = ()  # the store keys written (cells already stored and kept are not)

    @property
    def imported(self) -> int:
        return sum(r["status"] == "imported" for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        """What ``aclarena-diag eval --import-lm-eval ... --json`` prints."""
        return {"imported": self.imported, "cells": self.rows}

    def to_pandas(self) -> Any:
        return frame(self.rows)


@dataclass(frozen=True)
class EvalOptions:
    """How ``eval`` scores (``aclarena-diag eval``'s options; checked when made, by the settings they make).

    ``checkpoints``: names (default: every checkpoint of the manifest); ``suites``: ``id``, ``ood``,
    ``general``, ``all``, a domain (``math``), a suite (``math/id``), a suite of the manifest's
    ``[suites.NAME]`` (docs/custom-suites.md) or ``custom`` (all of those), comma-separated; default
    ``custom`` when the manifest has suites, else ``id,ood,general``. ``n``, ``seeds``, ``samples``,
    ``temperature``, ``top_p`` and ``batch_size`` make the cells' :class:`~aclarena.envs.evaluation.EvalSettings`;
    ``device``, ``dtype`` and ``device_map`` how the checkpoints load; ``engine``: ``hf`` or ``vllm``;
    ``force``: rescore stored cells; ``allow_code``: allow a custom suite's scorer that is a Python callable.
    """

    checkpoints: str | tuple[str, ...] | None = None
    suites: str | None = None
    n: int = 100
    samples: int = 4
    seeds: tuple[int, ...] = (0,)
    temperature: float = 1.0
    top_p: float = 1.0
    batch_size: int = 32
    device: str = "cpu"
    dtype: str = "auto"
    device_map: str | None = None
    engine: str = "hf"
    force: bool = False
    allow_code: bool = False

    def __post_init__(self) -> None:
        if self.checkpoints is not None and not isinstance(self.checkpoints, str):
            object.__setattr__(self, "checkpoints", tuple(self.checkpoints))
        object.__setattr__(self, "seeds", tuple(self.seeds))
        if self.engine not in ENGINES:
            raise unknown_name("engine", self.engine, ENGINES)
        self.settings()  # the cells' settings and the load options check their own fields
        self.load(self.device)

    def settings(self) -> Any:
        """The cells' :class:`~aclarena.envs.evaluation.EvalSettings`."""
        from aclarena.envs.evaluation import EvalSettings

        return EvalSettings(n=self.n, seeds=self.seeds, samples=self.samples, temperature=self.temperature,
                            top_p=self.top_p, batch_size=self.batch_size)

    def load(self, device: str) -> Any:
        """How a checkpoint loads on ``device`` (a rank's own device under torchrun)."""
        from aclarena.models.loading import LoadOptions

        return LoadOptions(dtype=self.dtype, device=device, device_map=self.device_map)


ENGINES = ("hf", "vllm")


@overload
def evaluate(run_dir: RunPath, options: EvalOptions | None = None, *, world: None = None, show_progress: bool = False,
             manifest: Manifest | None = None, **settings: Any) -> EvalResult: ...


@overload
def evaluate(run_dir: RunPath, options: EvalOptions | None = None, *, world: World, show_progress: bool = False,
             manifest: Manifest | None = None, **settings: Any) -> EvalResult | None: ...


def evaluate(
    run_dir: RunPath,
    options: EvalOptions | None = None,
    *,
    world: World | None = None,
    show_progress: bool = False,
    manifest: Manifest | None = None,
    **settings: Any,
) -> EvalResult | None:
    """Score the checkpoints on the suites (:class:`EvalOptions`, or its fields as keywords). Cells already
    stored with these settings are reused unless ``force``. In a data-parallel ``world`` (see
    :func:`aclarena.distributed.world`; ``aclarena-diag eval`` under torchrun) the ranks share each suite's
    episodes and rank 0 writes the cells and gets the result, the other ranks None; without one, one process
    does it all."""
    o = options_of(EvalOptions, options, settings)
    if world is None:
        with world_of(o.device) as w:
            out = _evaluate(run_dir, o, w, show_progress, manifest)
        assert out is not None  # one process is rank 0
        return out
    return _evaluate(run_dir, o, world, show_progress, manifest)


def _evaluate(run_dir: RunPath, o: EvalOptions, w: World, show_progress: bool,  # noqa: C901
              manifest: Manifest | None) -> EvalResult | None:
    # imported here, not at the top: the tests replace evaluate_suite and load_tokenizer in their modules
    from aclarena.analysis._common import prompt_format_of
    from aclarena.envs import resolve_suites, suite_chance
    from aclarena.envs.custom import register_suites
    from aclarena.envs.evaluation import (
        evaluate_suite,
        format_settings,
        rollouts_per_suite,
        suite_domain_role,
        suite_settings,
    )
    from aclarena.models.chat import has_template
    from aclarena.models.checkpoint import inspect
    from aclarena.models.loading import NonFiniteWeightsError, load_model, load_tokenizer
    from aclarena.results.capability import (
        at_chance,
        cell_ci95,
        cell_key,
        error_payload,
        read_cells,
        settings_id,
    )
    from aclarena.store import ResultsStore

    manifest = manifest_or_load(run_dir, manifest)
    checkpoints, suites, engine, force, allow_code = o.checkpoints, o.suites, o.engine, o.force, o.allow_code
    if engine == "vllm":
        from aclarena.models.vllm_engine import require_vllm

        require_vllm()  # before any cell: a missing vLLM is bad input, not an error cell
        if w.distributed:
            raise AclarenaError("--engine vllm runs one process (vLLM parallelizes itself); do not start it with "
                                "torchrun")
    names = checkpoints if checkpoints is None or isinstance(checkpoints, str) else list(checkpoints)
    specs = manifest.resolve_many(names) if names else list(manifest)
    if not specs:
        raise AclarenaError("the manifest has no checkpoints; add some with `aclarena-diag init`")
    custom = register_suites(manifest, run_dir, allow_code=allow_code)
    suite_list = resolve_suites(suites or ("custom" if custom else "id,ood,general"))
    settings = o.settings()
    options = o.load(w.device(o.device))
    ident = settings.identity()
    sid = settings_id(ident)
    # how each checkpoint is prompted on each suite (issue 45): a chat format asked for a tokenizer without a
    # template is bad input, refused here before any cell is written
    formats: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    for spec in specs:
        template = inspect(spec, manifest, run_dir, allow_pickle=True).chat_template
        for suite in suite_list:
            fmt, note = prompt_format_of(spec, manifest, run_dir, suite=suite, template=template)
            formats[(spec.name, suite)] = fmt
            if note is not None and note not in notes:
                notes.append(note)

    def cell_settings(name: str, suite: str) -> dict[str, Any]:  # custom suites: + their file; plain: + its format
        return format_settings(suite_settings(ident, suite), formats[(name, suite)])

    sids = {(spec.name, suite): settings_id(cell_settings(spec.name, suite)) for spec in specs for suite in suite_list}
    store = ResultsStore(run_dir)

    def plan() -> tuple[dict[str, list[str]], int]:  # rank 0 alone reads the store
        existing = {}
        if store.exists():
            with store.reader() as r:
                existing = {c.key: c for c in read_cells(r)}
        todo: dict[str, list[str]] = {}
        skipped = 0
        for spec in specs:
            for suite in suite_list:
                c = existing.get(cell_key(spec.name, suite, sids[(spec.name, suite)]))
                if c is not None and c.ok and not force:
                    skipped += 1
                    continue
                todo.setdefault(spec.name, []).append(suite)
        return todo, skipped

    todo, skipped = w.run_main(plan)
    text = manifest_text(run_dir)
    computed: set[tuple[str, str]] = set()
    kept: list[dict[str, Any]] = []
    per_suite = rollouts_per_suite(settings)
    with progress(enabled=show_progress and w.is_main) as bar:
        task = bar.add_task("eval", total=sum(len(v) for v in todo.values()) * per_suite)
        for spec in specs:
            pending = todo.get(spec.name, [])
            if not pending:
                continue
            model: Any = None
            tokenizer: Any = None
            load_error = None
            try:
                # the tokenizer first: a chat format without a chat template fails here, before the model is loaded
                tokenizer = load_tokenizer(spec, manifest, run_dir)
                if any(formats[(spec.name, s)] == "chat" for s in pending) and not has_template(tokenizer):
                    raise AclarenaError(f"the tokenizer of {spec.name!r} has no chat template; add one "
                                        "(chat_template.jinja) or set prompt_format = \"plain\"")
                if engine == "vllm":
                    from aclarena.models.vllm_engine import load_llm

                    model = load_llm(spec.name, manifest, run_dir, options, seed=settings.seeds[0])
                else:
                    model = load_model(spec, manifest, run_dir, options)
            except NonFiniteWeightsError:
                raise  # not a cell at all: a score of such weights would look real (docs/reliability.md)
            except Exception as e:  # any failure becomes an error cell, the rest goes on
                load_error = one_line(e)
            for suite in pending:
                domain, role = suite_domain_role(suite)
                bar.update(task, description=f"{spec.name} {suite}")
                cell: CellData | None
                if load_error is not None:
                    cell = error_payload(checkpoint=spec.name, suite=suite, domain=domain, role=role,
                                         source="arena", settings=cell_settings(spec.name, suite), error=load_error)
                    bar.advance(task, per_suite)
                else:
                    try:
                        # world only when sharding, the format only when plain: a chat cell calls it as before
                        fmt = formats[(spec.name, suite)]
                        extra: dict[str, Any] = {"world": w} if w.distributed else {}
                        if fmt != "chat":
                            extra["prompt_format"] = fmt
                        cell = evaluate_suite(model, tokenizer, suite, settings, checkpoint=spec.name,
                                              on_progress=lambda k: bar.advance(task, k), **extra)
                    except AclarenaError:
                        raise
                    except Exception as e:  # a failing checkpoint must not stop the matrix
                        cell = error_payload(checkpoint=spec.name, suite=suite, domain=domain, role=role,
                                             source="arena", settings=cell_settings(spec.name, suite), error=one_line(e))
                    if not w.is_main or cell is None:  # rank 0 has this rank's share and writes the cell
                        w.run_main(lambda: None)
                        continue
                key = cell_key(spec.name, suite, sids[(spec.name, suite)])
                if w.run_main(functools.partial(_write_cell, store, replace(cell, key=key), text)):
                    computed.add((spec.name, suite))
                elif w.is_main:
                    kept.append({"checkpoint": spec.name, "suite": suite, "error": cell.error or ""})
            del model, tokenizer
    if not w.is_main:
        return None
    rows = []
    with store.reader() as r:
        cells = {c.key: c for c in read_cells(r)}
        for spec in specs:
            for suite in suite_list:
                c = cells.get(cell_key(spec.name, suite, sids[(spec.name, suite)]))
                if c is None:
                    continue
                ci95, chance = cell_ci95(r, c) if c.ok else None, suite_chance(suite)
                rows.append({"checkpoint": spec.name, "suite": suite, "status": c.status, "mean": c.mean,
                             "ci95": ci95, "chance": chance, "at_chance": at_chance(ci95, chance), "std": c.std,
                             "avg_k_mean": c.avg_k_mean, "avg_k_std": c.avg_k_std, "n_items": c.n_items,
                             "n_seeds": c.n_seeds, "samples": c.samples, "error": c.error,
                             "prompt_format": formats[(spec.name, suite)],
                             "computed": (spec.name, suite) in computed, "key": c.key})
    return EvalResult(settings=ident, settings_id=sid, checkpoints=[s.name for s in specs], suites=suite_list, skipped=skipped,
                      cells=rows, over_training_seeds=over_training_seeds(rows, [s.name for s in specs]), samples=settings.samples,
                      kept=kept, writes=tuple(str(r["key"]) for r in rows if r["computed"]), prompt_formats=formats,
                      notes=notes)


class _KeepGoodCell(Exception):
    """The store holds a good cell where a rerun failed: the error cell is not written."""


def _write_cell(store: Any, cell: CellData, text: str | None) -> bool:
    """Write one cell (at its ``key``); an error cell never replaces a good one (checked under the store's writer
    lock). Returns whether it was written."""
    from aclarena.results.capability import write_cells

    def keep_good(r: Any) -> None:
        if not cell.ok and r.has(cell.key) and r.attrs(cell.key).get("status", "ok") == "ok":
            raise _KeepGoodCell

    try:
        write_cells(store, [cell], overwrite=True, manifest_text=text, precondition=keep_good)
    except _KeepGoodCell:
        return False
    return True


def over_training_seeds(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """Mean ± std (ddof 1) over the curricula of `train --seeds N` (``seq-math``, ``seq-math-s1``, ...)."""
    from aclarena.train.naming import replicate_groups

    by = {(r["checkpoint"], r["suite"]): r for r in rows if r["status"] == "ok" and r["mean"] is not None}
    out = []
    for stem, members in replicate_groups(list(names)).items():
        for suite in dict.fromkeys(r["suite"] for r in rows):
            vals = [float(by[(m, suite)]["mean"]) for m in members if (m, suite) in by]
            if len(vals) >= 2:
                out.append({"checkpoint": stem, "suite": suite, "mean": statistics.fmean(vals),
                            "std": statistics.stdev(vals), "n_curricula": len(vals),
                            "members": [m for m in members if (m, suite) in by]})
    return out


def one_line(e: BaseException) -> str:
    """An error cell's text: the exception's first line, with its type unless it is one of ours."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text and not isinstance(e, AclarenaError) else (
        text[0] if text else type(e).__name__)


def import_lm_eval(
    run_dir: RunPath,
    files: Sequence[tuple[str, str]],
    *,
    tags: Mapping[str, tuple[str | None, str]] | None = None,
    metric: Mapping[str, str] | None = None,
    force: bool = False,
    manifest: Manifest | None = None,
) -> ImportResult:
    """Store lm-evaluation-harness results as capability cells: ``files`` are (checkpoint, results JSON)
    pairs; ``tags`` task -> (domain, role); ``metric`` task (or ``*``) -> headline metric. Cells already
    stored are kept unless ``force``; all cells are written in one step."""
    from aclarena.results.capability import key_of as cell_key_of
    from aclarena.results.capability import read_cells, write_cells
    from aclarena.results.lm_eval import import_payloads
    from aclarena.store import ResultsStore

    manifest = manifest_or_load(run_dir, manifest)
    tags = dict(tags or {})
    store = ResultsStore(run_dir)
    existing = set()
    if store.exists():
        with store.reader() as r:
            existing = {c.key for c in read_cells(r)}
    items = []
    rows = []
    seen_tasks: set[str] = set()
    for name, file in files:
        spec = manifest.resolve(name)
        for cell in import_payloads(spec.name, file, tags=tags, metric=dict(metric or {})):
            seen_tasks.add(cell.suite.split("/", 1)[1])
            status = "imported"
            if cell_key_of(cell) in existing and not force:
                status = "already in the store"
            else:
                items.append(cell)
            rows.append({"checkpoint": spec.name, "suite": cell.suite, "metric": cell.extra["metric"],
                         "value": cell.mean, "stderr": cell.extra["stderr"], "items": cell.n_items,
                         "domain": cell.domain, "role": cell.role, "status": status})
    unknown = sorted(set(tags) - seen_tasks)
    if unknown:
        from aclarena.errors import unknown_name

        raise unknown_name("lm-eval task in --lm-eval-task", unknown[0], seen_tasks)
    writes = write_cells(store, items, overwrite=True, manifest_text=manifest_text(run_dir)) if items else []
    return ImportResult(rows, tuple(writes))
