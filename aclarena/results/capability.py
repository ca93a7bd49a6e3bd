"""The ``capability-cell`` result type: the capability matrix in results.h5, one group per (checkpoint, suite,
settings), its payload, and the matrix and chain of stages assembled from it.

Written by ``aclarena-diag eval`` (mini-arena suites) and by its lm-evaluation-harness import
(:mod:`aclarena.results.lm_eval`); read by ``forgetting``, ``compare``, ``flips``, the dashboard's Overview
and Consolidation pages and ``export``.

A cell lives at ``capability/<checkpoint>/<suite key>/<settings id>`` (result type
``capability-cell``, version 0.1.0). Its attributes say what it is (``checkpoint``, ``suite``, ``domain``,
``role`` = id | ood | general | other, ``source`` = arena | lm-eval, ``status`` = ok |
error, ``error``) and what it scored (``mean``, ``std`` over seeds, ``avg_k_mean``,
``avg_k_std``, ``n_items``, ``n_seeds``, ``samples``, ``settings`` as JSON). Its datasets
hold the per-item outcomes the sample-wise metrics need (``greedy``: seeds x items,
``samples``: seeds x items x k, ``item_ids``). docs/store-format.md lists every key. The payload is
:class:`CellData` (made by :func:`cell_payload` and :func:`error_payload`, written by :func:`write_cells`,
read whole by :func:`read_cell`); :func:`read_cells` reads every cell's attributes only (:class:`Cell`, fast)
and :func:`read_items` one cell's per-item outcomes.

This module also assembles what the continual-learning metrics take (plain arrays, see
:func:`chain_data`): the manifest's chain of stages from the base, one in-domain suite per
stage domain, the base row, single-task oracles and consolidated models. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.errors import AclarenaError, ManifestError, unknown_name
from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.store.manifest import CheckpointSpec, Manifest
from aclarena.store.results import ResultsStore, StoreReader

ROOT = "capability"
RESULT_TYPE = "capability-cell"
RESULT_VERSION = "0.1.0"
ROLES = ("id", "ood", "general", "other")
# The default curriculum's order, used to sort suites of known domains first.
DOMAIN_ORDER = ("math", "search", "ecom", "if", "general")


def suite_key(suite: str) -> str:
    """The HDF5 group name of a suite (``math/id`` -> ``math-id``)."""
    return re.sub(r"[^A-Za-z0-9._:+-]", "_", suite.replace("/", "-"))


def settings_id(settings: Mapping[str, Any]) -> str:
    """A short stable id of evaluation settings (the last key part of a cell)."""
    text = json.dumps(dict(settings), sort_keys=True, default=str)
    return "s" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def cell_key(checkpoint: str, suite: str, settings: Mapping[str, Any] | str) -> str:
    sid = settings if isinstance(settings, str) else settings_id(settings)
    return f"{ROOT}/{checkpoint}/{suite_key(suite)}/{sid}"


@dataclass(frozen=True)
class Cell:
    """One (checkpoint, suite, settings) result, without its per-item arrays."""

    key: str
    checkpoint: str
    suite: str
    domain: str | None
    role: str
    source: str
    status: str
    error: str | None
    mean: float
    std: float
    avg_k_mean: float
    avg_k_std: float
    n_items: int
    n_seeds: int
    samples: int
    settings: dict[str, Any]
    written: str
    computed_at: float = 0.0  # seconds since the epoch, sub-second: orders cells written in the same second

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _cell_from_attrs(key: str, a: Mapping[str, Any]) -> Cell:
    settings = a.get("settings", "{}")
    try:
        settings = json.loads(settings) if isinstance(settings, str) else dict(settings)
    except ValueError:
        settings = {}
    domain = a.get("domain") or None
    return Cell(
        key=key, checkpoint=str(a.get("checkpoint")), suite=str(a.get("suite")), domain=domain,
        role=str(a.get("role", "other")), source=str(a.get("source", "arena")), status=str(a.get("status", "ok")),
        error=a.get("error") or None, mean=_float(a.get("mean")), std=_float(a.get("std")),
        avg_k_mean=_float(a.get("avg_k_mean")), avg_k_std=_float(a.get("avg_k_std")),
        n_items=int(a.get("n_items", 0)), n_seeds=int(a.get("n_seeds", 0)), samples=int(a.get("samples", 0)),
        settings=settings, written=str(a.get("written", "")), computed_at=_float(a.get("computed_at", 0.0)),
    )


def read_cells(reader: StoreReader) -> list[Cell]:
    """Every capability cell of the store (attributes only; fast)."""
    if not reader.has(ROOT):
        return []
    out = []
    for key in reader.results(ROOT):
        a = reader.attrs(key)
        if a.get("result-type") == RESULT_TYPE:
            with reader.damaged(key):
                out.append(_cell_from_attrs(key, a))
    return out


def read_items(reader: StoreReader, cell: Cell | str) -> tuple[list[str], np.ndarray] | None:
    """Item ids and greedy per-item scores (seeds x items) of a cell; None when it has none."""
    key = cell.key if isinstance(cell, Cell) else cell
    if not reader.has(f"{key}/greedy"):
        return None
    with reader.damaged(key):
        scores = np.asarray(reader.read(f"{key}/greedy"), dtype=np.float64)
        ids = reader.read(f"{key}/item_ids") if reader.has(f"{key}/item_ids") else [str(i) for i in range(scores.size)]
        return [str(i) for i in ids], scores


def read_outcomes(reader: StoreReader, cell: Cell | str, *, sampled: bool = False) -> np.ndarray | None:
    """A cell's per-item outcomes as float64: greedy (seeds x items) or, ``sampled``, the sampled rollouts'
    (seeds x items x k); None when the cell holds none (an error cell, an import without samples)."""
    key = cell.key if isinstance(cell, Cell) else cell
    name = "samples" if sampled else "greedy"
    if not reader.has(f"{key}/{name}"):
        return None
    return np.asarray(reader.read(f"{key}/{name}"), dtype=np.float64)


def read_item_ids(reader: StoreReader, cell: Cell | str) -> list[str] | None:
    """A cell's item ids (seeds x items of them, row-major); None when it stores none."""
    key = cell.key if isinstance(cell, Cell) else cell
    if not reader.has(f"{key}/item_ids"):
        return None
    return [str(i) for i in reader.read(f"{key}/item_ids")]


def read_replies(reader: StoreReader, cell: Cell | str) -> dict[str, str]:
    """Item id -> the checkpoint's reply (the first seed's transcript) of one cell; {} without transcripts."""
    key = cell.key if isinstance(cell, Cell) else cell
    if not (reader.has(f"{key}/transcripts") and reader.has(f"{key}/item_ids")):
        return {}
    ids = [str(i) for i in reader.read(f"{key}/item_ids")]
    texts = [t.decode() if isinstance(t, bytes) else str(t) for t in reader.read(f"{key}/transcripts")]
    out: dict[str, str] = {}
    for i, t in zip(ids, texts, strict=False):
        out.setdefault(i, t)
    return out


def cell_ci95(reader: StoreReader, cell: Cell | str) -> list[float] | None:
    """95% percentile-bootstrap interval of a cell's greedy score over its items (the per-item
    score averaged over seeds; 1000 resamples, seed 0); None when the cell has no per-item outcomes."""
    from aclarena.diagnostics.bootstrap import bootstrap_mean_ci

    got = read_items(reader, cell)
    if got is None or got[1].size == 0:
        return None
    scores = got[1]
    lo, hi = bootstrap_mean_ci(scores.mean(axis=0) if scores.ndim == 2 else scores)
    return [lo, hi]


def at_chance(ci95: list[float] | None, chance: float) -> bool | None:
    """Whether a score's 95% interval holds ``chance``, the suite's score of guessing
    (:func:`aclarena.envs.suite_chance`); None where guessing scores 0 or there is no interval."""
    if not chance or ci95 is None:
        return None
    return ci95[0] <= chance <= ci95[1]


def at_chance_line(suite: str, chance: float, checkpoints: list[str]) -> str:
    """The one line that names the checkpoints whose score on ``suite`` is at chance (eval's warning,
    forgetting's note)."""
    return (f"{suite} is at chance ({chance:g}, the score of guessing, is inside the 95% interval) on "
            f"{', '.join(checkpoints)}: such a score measures no knowledge, and a fall from it is no forgetting")


@dataclass(frozen=True)
class CellData:
    """One stored capability cell, whole: what it is, what it scored, and its per-item outcomes.

    ``greedy``: seeds x items (float32, scores in [0, 1]) and ``seed_scores`` its per-seed means;
    ``sampled``: seeds x items x k (stored as ``samples``) and ``seed_avg_k``; ``item_ids`` one per greedy
    outcome; ``metrics``: per-item metric arrays by name; ``transcripts`` and ``end_reasons`` per rollout;
    ``extra``: further attributes (an lm-eval import's ``metric``, ``stderr``, source file and versions).
    ``key``: where it is stored (set when read; a writer stores it at :func:`cell_key` of its checkpoint,
    suite and settings unless set).
    """

    checkpoint: str
    suite: str
    domain: str | None
    role: str
    source: str
    status: str
    error: str | None
    settings: dict[str, Any]
    mean: float
    std: float
    avg_k_mean: float
    avg_k_std: float
    n_items: int
    n_seeds: int
    samples: int
    computed_at: float
    greedy: np.ndarray | None = None
    seed_scores: np.ndarray | None = None
    sampled: np.ndarray | None = None
    seed_avg_k: np.ndarray | None = None
    item_ids: list[str] | None = None
    metrics: dict[str, np.ndarray] | None = None
    transcripts: list[str] | None = None
    end_reasons: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    key: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def cell_payload(
    *,
    checkpoint: str,
    suite: str,
    domain: str | None,
    role: str,
    source: str,
    settings: Mapping[str, Any],
    greedy: np.ndarray | None = None,
    samples: np.ndarray | None = None,
    item_ids: list[str] | None = None,
    metrics: Mapping[str, np.ndarray] | None = None,
    transcripts: list[str] | None = None,
    end_reasons: list[str] | None = None,
    mean: float | None = None,
    std: float | None = None,
    extra_attrs: Mapping[str, Any] | None = None,
) -> CellData:
    """An ``ok`` cell.

    ``greedy`` is seeds x items (scores in [0, 1]); ``samples`` seeds x items x k. The
    cell's mean and std are over seeds of the per-seed mean, unless given (imports).
    """
    if role not in ROLES:
        raise ValueError(f"`role` must be one of {ROLES}, got {role!r}")
    n_seeds = n_items = k = 0
    g = per_seed = s = avg = None
    if greedy is not None:
        g = np.asarray(greedy, dtype=np.float32)
        if g.ndim != 2:
            raise ValueError(f"`greedy` must be seeds x items, got shape {g.shape}")
        n_seeds, n_items = g.shape
        per_seed = g.mean(axis=1) if n_items else np.full(n_seeds, np.nan)  # float32 (the mean of float32)
        mean = float(per_seed.mean()) if mean is None else mean
        std = float(per_seed.std(ddof=1)) if std is None and n_seeds > 1 else (0.0 if std is None else std)
        per_seed = per_seed.astype(np.float64)
    avg_k_mean = avg_k_std = float("nan")
    if samples is not None:
        s = np.asarray(samples, dtype=np.float32)
        if s.ndim != 3 or (greedy is not None and s.shape[:2] != (n_seeds, n_items)):
            raise ValueError(f"`samples` must be seeds x items x k, got shape {s.shape}")
        k = s.shape[2]
        avg = s.mean(axis=(1, 2))
        avg_k_mean = float(avg.mean())
        avg_k_std = float(avg.std(ddof=1)) if len(avg) > 1 else 0.0
        avg = avg.astype(np.float64)
    if item_ids is not None and greedy is not None and len(item_ids) != n_seeds * n_items:
        raise ValueError(f"`item_ids` must name seeds x items = {n_seeds * n_items} items, got {len(item_ids)}")
    return CellData(
        checkpoint=checkpoint, suite=suite, domain=domain or None, role=role, source=source, status="ok", error=None,
        settings=dict(settings), mean=float("nan") if mean is None else float(mean),
        std=float("nan") if std is None else float(std), avg_k_mean=avg_k_mean, avg_k_std=avg_k_std,
        n_items=n_items, n_seeds=n_seeds, samples=k, computed_at=time.time(), greedy=g, seed_scores=per_seed,
        sampled=s, seed_avg_k=avg, item_ids=None if item_ids is None else [str(i) for i in item_ids],
        metrics={name: np.asarray(v, dtype=np.float32) for name, v in metrics.items()} if metrics else None,
        transcripts=list(transcripts) if transcripts else None, end_reasons=list(end_reasons) if end_reasons else None,
        extra=dict(extra_attrs or {}),
    )


def error_payload(*, checkpoint: str, suite: str, domain: str | None, role: str, source: str,
                  settings: Mapping[str, Any], error: str) -> CellData:
    """An ``error`` cell: the matrix shows why this checkpoint has no score on this suite."""
    nan = float("nan")
    return CellData(checkpoint=checkpoint, suite=suite, domain=domain or None, role=role, source=source,
                    status="error", error=error.splitlines()[0] if error else "unknown error",
                    settings=dict(settings), mean=nan, std=nan, avg_k_mean=nan, avg_k_std=nan, n_items=0, n_seeds=0,
                    samples=0, computed_at=time.time())


def key_of(cell: CellData) -> str:
    """Where ``cell`` is stored: its ``key``, else :func:`cell_key` of its checkpoint, suite and settings."""
    return cell.key or cell_key(cell.checkpoint, cell.suite, cell.settings)


def write_cells(store: ResultsStore | str | os.PathLike[str], cells: Sequence[CellData], *, overwrite: bool = True,
                manifest_text: str | None = None,
                precondition: Callable[[StoreReader], None] | None = None) -> list[str]:
    """Write ``cells`` in one atomic step (completely or not at all); returns their keys. ``precondition`` is
    checked under the writer lock (``eval`` keeps a good cell where a rerun failed)."""
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    items = [CAPABILITY_CELL.item(key_of(c), c) for c in cells]
    store.write_many(items, overwrite=overwrite, manifest_text=manifest_text, precondition=precondition)
    return [item[0] for item in items]


def read_cell(reader: StoreReader, key: str) -> CellData:
    """The cell at ``key`` with its per-item arrays, upgraded to the current version (a wrong shape is one line
    naming the key)."""
    data: CellData = registry.read(reader, key, RESULT_TYPE)
    return data


# the attributes every cell carries (docs/store-format.md); any other is kept in CellData.extra
_ATTRS = ("checkpoint", "suite", "domain", "role", "source", "status", "error", "settings", "mean", "std",
          "avg_k_mean", "avg_k_std", "n_items", "n_seeds", "samples", "computed_at")
_STORE_ATTRS = ("encoding-type", "encoding-version", "result-type", "result-version", "written")


def encode(p: CellData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    attrs: dict[str, Any] = {"checkpoint": p.checkpoint, "suite": p.suite, "domain": p.domain or "", "role": p.role,
                             "source": p.source, "status": p.status, "error": p.error or "",
                             "settings": json.dumps(p.settings, sort_keys=True)}
    data: dict[str, Any] = {}
    if p.greedy is not None:
        data["greedy"] = p.greedy
    if p.seed_scores is not None:
        data["seed_scores"] = p.seed_scores
    if p.sampled is not None:
        data["samples"] = p.sampled
    if p.seed_avg_k is not None:
        data["seed_avg_k"] = p.seed_avg_k
    if p.item_ids is not None:
        data["item_ids"] = list(p.item_ids) if p.item_ids else np.zeros(0, dtype=np.int64)
    if p.metrics:
        data["metrics"] = dict(p.metrics)
    if p.transcripts:
        data["transcripts"] = list(p.transcripts)
    if p.end_reasons:
        data["end_reasons"] = list(p.end_reasons)
    # in the order the writers have always set them: an ok cell's avg@k after its counts unless it was sampled
    avg_k = {"avg_k_mean": p.avg_k_mean, "avg_k_std": p.avg_k_std}
    counts = {"n_items": p.n_items, "n_seeds": p.n_seeds, "samples": p.samples, "computed_at": p.computed_at}
    if not p.ok:
        attrs |= {"mean": p.mean, "std": p.std} | avg_k | counts
    elif p.sampled is not None:
        attrs |= avg_k | {"mean": p.mean, "std": p.std} | counts
    else:
        attrs |= {"mean": p.mean, "std": p.std} | counts | avg_k
    return data, attrs | p.extra


def decode(s: Stored) -> CellData:
    """A current-version stored cell as its payload; a wrong shape raises (``reader.damaged`` makes it one line)."""
    a, d = s.attrs, s.data
    _expect(str(a.get("status")) in ("ok", "error"), "status is neither ok nor error")
    _expect(str(a.get("role")) in ROLES, f"role is not one of {', '.join(ROLES)}")
    settings = json.loads(a["settings"]) if isinstance(a["settings"], str) else a["settings"]
    _expect(isinstance(settings, dict), "the settings attribute is not a JSON object")
    greedy, sampled = d.get("greedy"), d.get("samples")
    _expect(greedy is None or (isinstance(greedy, np.ndarray) and greedy.ndim == 2), "greedy is not seeds x items")
    _expect(sampled is None or (isinstance(sampled, np.ndarray) and sampled.ndim == 3),
            "samples is not seeds x items x k")
    ids = d.get("item_ids")
    item_ids = None if ids is None else [str(i) for i in ids]
    metrics = d.get("metrics")
    _expect(metrics is None or isinstance(metrics, dict), "metrics is not a group of arrays")
    return CellData(
        checkpoint=str(a["checkpoint"]), suite=str(a["suite"]), domain=a["domain"] or None, role=str(a["role"]),
        source=str(a["source"]), status=str(a["status"]), error=a.get("error") or None, settings=settings,
        mean=float(a["mean"]), std=float(a["std"]), avg_k_mean=float(a["avg_k_mean"]),
        avg_k_std=float(a["avg_k_std"]), n_items=int(a["n_items"]), n_seeds=int(a["n_seeds"]),
        samples=int(a["samples"]), computed_at=float(a.get("computed_at", 0.0)), greedy=greedy,
        seed_scores=d.get("seed_scores"), sampled=sampled, seed_avg_k=d.get("seed_avg_k"), item_ids=item_ids,
        metrics=metrics, transcripts=_strings(d.get("transcripts")), end_reasons=_strings(d.get("end_reasons")),
        extra={k: v for k, v in a.items() if k not in _ATTRS and k not in _STORE_ATTRS}, key=s.key,
    )


CAPABILITY_CELL = registry.register(ResultType(name=RESULT_TYPE, version=RESULT_VERSION, payload=CellData,
                                               encode=encode, decode=decode, upgrades={}))


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # turned into one line naming the key by ``reader.damaged``


def _strings(value: Any) -> list[str] | None:
    return None if value is None else [str(x) for x in value]


def _suite_order(cell: Cell) -> tuple[int, int, str]:
    d = DOMAIN_ORDER.index(cell.domain) if cell.domain in DOMAIN_ORDER else len(DOMAIN_ORDER)
    r = ROLES.index(cell.role) if cell.role in ROLES else len(ROLES)
    return (r, d, cell.suite)


@dataclass
class CapabilityMatrix:
    """Checkpoints x suites: the latest cell of each pair (optionally of one settings id)."""

    checkpoints: list[str]
    suites: list[str]
    cells: dict[tuple[str, str], Cell]
    suite_info: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # suite -> (domain, role)

    def get(self, checkpoint: str, suite: str) -> Cell | None:
        return self.cells.get((checkpoint, suite))

    def value(self, checkpoint: str, suite: str, what: str = "mean") -> float:
        c = self.get(checkpoint, suite)
        return getattr(c, what) if c is not None and c.ok else float("nan")

    def array(self, rows: Iterable[str], cols: Iterable[str], what: str = "mean") -> np.ndarray:
        rows, cols = list(rows), list(cols)
        return np.array([[self.value(r, c, what) for c in cols] for r in rows], dtype=np.float64).reshape(
            len(rows), len(cols))

    def errors(self) -> list[Cell]:
        return [c for c in self.cells.values() if not c.ok]

    def in_domain_suites(self, domain: str) -> list[str]:
        return [s for s in self.suites if self.suite_info.get(s) == (domain, "id")]


def load_matrix(reader: StoreReader | None, manifest: Manifest | None = None, *,
                settings: str | None = None) -> CapabilityMatrix:
    """The capability matrix of a store; rows in manifest order, suites in-domain first."""
    cells = read_cells(reader) if reader is not None else []
    if settings is not None:
        cells = [c for c in cells if c.key.rsplit("/", 1)[-1] == settings]
    latest: dict[tuple[str, str], Cell] = {}
    for c in sorted(cells, key=lambda c: (c.computed_at, c.written)):
        latest[(c.checkpoint, c.suite)] = c
    names = [s.name for s in manifest] if manifest is not None else []
    present = {c.checkpoint for c in latest.values()}
    checkpoints = [n for n in names if n in present] + sorted(present - set(names))
    info: dict[str, tuple[str | None, str]] = {}
    firsts: dict[str, Cell] = {}
    for c in latest.values():
        info.setdefault(c.suite, (c.domain, c.role))
        firsts.setdefault(c.suite, c)
    suites = [c.suite for c in sorted(firsts.values(), key=_suite_order)]
    return CapabilityMatrix(checkpoints=checkpoints, suites=suites, cells=latest, suite_info=info)


@contextmanager
def open_matrix(run_dir: str | os.PathLike[str], manifest: Manifest | None = None, *,
                settings: str | None = None) -> Iterator[tuple[StoreReader, CapabilityMatrix]]:
    """The open store of ``run_dir`` and its capability matrix, or a one-line error saying to run
    ``eval`` first (no results.h5, or no cells in it)."""
    store = ResultsStore(run_dir)
    if not store.exists():
        raise AclarenaError(f"no results.h5 in {run_dir}; run `aclarena-diag eval --run {run_dir}` first")
    with store.reader() as r:
        matrix = load_matrix(r, manifest, settings=settings)
        if not matrix.cells:
            which = f" with settings id {settings!r}" if settings is not None else ""
            raise AclarenaError(f"no capability matrix{which} in {run_dir}; run `aclarena-diag eval --run {run_dir}` "
                                "(or import lm-eval results) first")
        yield r, matrix


# --- the chain of stages ------------------------------------------------------------------------


def stage_chains(manifest: Manifest) -> list[list[CheckpointSpec]]:
    """Every chain base -> stage -> stage ... (kind = stage, following ``parent``), base first."""
    if manifest.base is None:
        raise ManifestError("the manifest names no base checkpoint; set [run] base = \"<name>\"")
    base = manifest.resolve(manifest.base)
    chains: list[list[CheckpointSpec]] = []

    def walk(chain: list[CheckpointSpec]) -> None:
        kids = [manifest.resolve(n) for n in manifest.children(chain[-1].name)]
        kids = [k for k in kids if k.kind == "stage"]
        if not kids:
            chains.append(chain)
        for k in kids:
            walk([*chain, k])

    walk([base])
    return chains


class SeveralChainsError(AclarenaError):
    """A chain was not named on a manifest of several: ``ends`` are their last stages. The line names the
    command line's ``--chain NAME``; :meth:`how` rewords it for another caller (the Python API, a menu)."""

    def __init__(self, ends: Sequence[str], how: str = "--chain NAME") -> None:
        self.ends = list(ends)
        super().__init__(f"the manifest has several chains of stages (ending at {', '.join(self.ends)}); "
                         f"pick one with {how}")

    def how(self, how: str) -> SeveralChainsError:
        return SeveralChainsError(self.ends, how)


def pick_chain(manifest: Manifest, leaf: str | None = None) -> list[CheckpointSpec]:
    """The chain of stages ending at ``leaf`` (default: the only chain)."""
    chains = stage_chains(manifest)
    if leaf is not None:
        manifest.resolve(leaf)
        for chain in chains:
            for i, spec in enumerate(chain):
                if spec.name == leaf:
                    return chain[: i + 1]
        raise unknown_name("last stage of a chain", leaf, [s.name for c in chains for s in c[1:]])
    if len(chains) > 1:
        raise SeveralChainsError([c[-1].name for c in chains])
    return chains[0]


def suite_choices(matrix: CapabilityMatrix, domain: str) -> tuple[str | None, list[str]]:
    """The suite that measures ``domain`` by default (``<domain>/id`` when evaluated, else the first of its
    in-domain suites) and every in-domain suite evaluated for it (the choices of ``--suite-of``)."""
    candidates = matrix.in_domain_suites(domain)
    if f"{domain}/id" in matrix.suites:
        return f"{domain}/id", [f"{domain}/id", *(c for c in candidates if c != f"{domain}/id")]
    return (candidates[0] if candidates else None), list(candidates)


@dataclass
class ChainData:
    """What the continual-learning metrics take, assembled from the matrix and the manifest.

    ``tasks`` are the stage domains in curriculum order, ``suites`` their in-domain suites;
    ``stages`` the checkpoint ending each stage (its last phase); ``R[i, j]`` the score of
    ``stages[i]`` on ``suites[j]``; ``items[i][j]`` its per-item scores (aligned by item id,
    None when missing); ``chain`` every checkpoint of the chain, base first.
    """

    chain: list[str]
    tasks: list[str]
    suites: list[str]
    stages: list[str]
    R: np.ndarray
    base: np.ndarray | None
    oracle: np.ndarray | None
    oracle_names: list[str | None]
    items: list[list[np.ndarray | None]]
    consolidated: dict[str, np.ndarray]
    notes: list[str] = field(default_factory=list)


def chain_data(  # noqa: C901
    matrix: CapabilityMatrix,
    manifest: Manifest,
    reader: StoreReader | None = None,
    *,
    chain: str | None = None,
    suite_of: Mapping[str, str] | None = None,
    what: str = "mean",
) -> ChainData:
    """Assemble the stage-ordered matrix for :func:`aclarena.diagnostics.cl_metrics.cl_report`.

    ``suite_of`` maps a domain to the suite that measures it (default: ``<domain>/id`` when
    evaluated, else the one suite tagged with that domain and role ``id``). ``what`` is the
    score: ``mean`` (greedy) or ``avg_k_mean`` (sampled; per-item outcomes are greedy only).
    """
    if what not in ("mean", "avg_k_mean"):
        raise ValueError(f"`what` must be 'mean' or 'avg_k_mean', got {what!r}")
    specs = pick_chain(manifest, chain)
    names = [s.name for s in specs]
    stages_specs = specs[1:]
    notes: list[str] = []
    if not stages_specs:
        raise AclarenaError("the manifest has no stage after the base (kind = \"stage\"); nothing to measure")
    tasks: list[str] = []
    stages: list[str] = []
    for spec in stages_specs:
        if spec.domain is None:
            raise ManifestError(f"stage {spec.name!r} has no domain; add domain = \"...\" to it in the manifest")
        if tasks and tasks[-1] == spec.domain:
            stages[-1] = spec.name  # a later phase (sft -> rl) of the same stage ends it
            continue
        if spec.domain in tasks:
            raise AclarenaError(f"domain {spec.domain!r} is trained by two separate stages of the chain; the GEM "
                                "metrics need one stage per domain")
        tasks.append(spec.domain)
        stages.append(spec.name)
    suite_of = dict(suite_of or {})
    suites = []
    for d in tasks:
        if d in suite_of:
            s = suite_of[d]
            if s not in matrix.suites:
                raise unknown_name(f"suite for domain {d!r}", s, matrix.suites, hint="run `aclarena-diag eval` first")
        else:
            default, candidates = suite_choices(matrix, d)
            if default is None:
                s = f"{d}/id"
                notes.append(f"no in-domain suite evaluated for {d!r}: its column is empty")
            else:
                s = default
                if len(candidates) > 1:
                    notes.append(f"domain {d!r} has several in-domain suites ({', '.join(candidates)}); using {s} "
                                 "(choose with --suite-of)")
        suites.append(s)
    R = matrix.array(stages, suites, what)
    base_name = names[0]
    base = matrix.array([base_name], suites, what)[0] if any(matrix.get(base_name, s) for s in suites) else None
    oracle_names: list[str | None] = []
    for d in tasks:
        found = [s.name for s in manifest if s.kind == "oracle" and s.domain == d]
        oracle_names.append(found[-1] if found else None)
    oracle = None
    if any(oracle_names):
        oracle = np.array([matrix.value(o, s, what) if o else np.nan
                           for o, s in zip(oracle_names, suites, strict=True)])
    consolidated = {s.name: matrix.array([s.name], suites, what)[0] for s in manifest
                    if s.kind == "consolidated" and any(matrix.get(s.name, x) for x in suites)}
    items: list[list[np.ndarray | None]] = [[None] * len(tasks) for _ in stages]
    if reader is not None and what == "mean":
        for j, suite in enumerate(suites):
            ref_ids: list[str] | None = None
            for i, st in enumerate(stages):
                cell = matrix.get(st, suite)
                got = read_items(reader, cell) if cell is not None and cell.ok else None
                if got is None:
                    continue
                ids, scores = got
                if ref_ids is None:
                    ref_ids = ids
                if ids != ref_ids:
                    notes.append(f"{st} on {suite} was scored on other items than earlier stages; "
                                 "rerun eval with the same settings for sample-wise metrics")
                    continue
                items[i][j] = scores.ravel()
    for i, st in enumerate(stages):
        for j, suite in enumerate(suites):
            if math.isnan(R[i, j]):
                cell = matrix.get(st, suite)
                why = f"error: {cell.error}" if cell is not None and not cell.ok else "not evaluated"
                notes.append(f"{st} on {suite}: {why}")
    return ChainData(chain=names, tasks=tasks, suites=suites, stages=stages, R=R, base=base, oracle=oracle,
                     oracle_names=oracle_names, items=items, consolidated=consolidated, notes=notes)
