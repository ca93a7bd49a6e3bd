"""Import lm-evaluation-harness results into the capability matrix.

``lm_eval --output_path DIR`` writes ``results_<time>.json``::

    {"results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.42,
                           "exact_match_stderr,strict-match": 0.01, ...}, ...},
     "configs": {...}, "versions": {"gsm8k": 3}, "n-shot": {...}, "n-samples": {...}, ...}

and, with ``--log_samples``, ``samples_<task>_<time>.jsonl`` beside it (one JSON line per
document and filter, with ``doc_id``, ``filter`` and the metric values). Each task becomes a
cell of suite ``lm-eval/<task>``: its headline metric (``--lm-eval-metric`` or, in order,
``prompt_level_strict_acc``, ``exact_match`` (strict-match first), ``acc``, ``acc_norm``,
``em``, ``f1``), its stderr, and per-item scores when the samples are there (sample-wise
forgetting needs them). Tag tasks with a domain and role (``aime24=math/id``) so that the
forgetting metrics know which suite measures which stage.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aclarena import jsonl
from aclarena.errors import AclarenaError
from aclarena.results.capability import ROLES, CellData, cell_payload

METRIC_PRIORITY = ("prompt_level_strict_acc", "exact_match", "acc", "acc_norm", "em", "f1")
FILTER_PRIORITY = ("strict-match", "none", "flexible-extract")
SUITE_PREFIX = "lm-eval/"


@dataclass(frozen=True)
class TaskResult:
    """One task of an lm-eval results file."""

    task: str
    metric: str  # "name,filter"
    value: float
    stderr: float
    version: Any = None  # the task's version (the file's "versions"), not the harness's
    n_shot: Any = None
    item_ids: list[str] = field(default_factory=list)
    item_scores: np.ndarray | None = None
    harness_version: str | None = None  # the file's top-level "lm_eval_version"


def _fail(path: Path, why: str) -> AclarenaError:
    return AclarenaError(f"{path} is not an lm-evaluation-harness results file ({why}); pass the results_*.json "
                         "that `lm_eval --output_path DIR` writes")


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def choose_metric(task: str, metrics: Mapping[str, Any], wanted: str | None = None) -> str | None:
    """The headline ``name,filter`` of a task's metrics (``wanted``: ``name`` or ``name,filter``)."""
    keys = [k for k, v in metrics.items() if "," in k and "_stderr," not in k and _number(v) is not None]
    if wanted and "," in wanted:
        return wanted if wanted in keys else None
    for name in (wanted,) if wanted else METRIC_PRIORITY:
        cands = [k for k in keys if k.split(",", 1)[0] == name]
        if cands:
            return min(cands, key=lambda k: (FILTER_PRIORITY.index(k.split(",", 1)[1])
                                             if k.split(",", 1)[1] in FILTER_PRIORITY else 99, k))
    if wanted:
        return None
    return sorted(keys)[0] if keys else None


def read_results(path: str | Path, *, metric: Mapping[str, str] | None = None) -> list[TaskResult]:
    """Parse an lm-eval results file (and its samples files, when present) into task results."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = (e.strerror if isinstance(e, OSError) else None) or e
        raise AclarenaError(f"cannot read lm-eval results {path}: {why}; check the path "
                            "(and that the file is UTF-8 JSON)") from None
    try:
        doc = jsonl.loads(text)
    except jsonl.JsonShapeError as e:
        raise _fail(path, str(e)) from None
    except ValueError as e:
        raise _fail(path, f"not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
        raise _fail(path, 'no "results" object')
    if not doc["results"]:
        raise _fail(path, '"results" is empty')
    metric = dict(metric or {})
    versions: dict[str, Any] = doc["versions"] if isinstance(doc.get("versions"), dict) else {}
    n_shot: dict[str, Any] = doc["n-shot"] if isinstance(doc.get("n-shot"), dict) else {}
    inline_samples: dict[str, Any] = doc["samples"] if isinstance(doc.get("samples"), dict) else {}
    harness = doc.get("lm_eval_version")
    harness = str(harness) if isinstance(harness, str | int | float) and not isinstance(harness, bool) else None
    out = []
    for task, metrics in doc["results"].items():
        if not isinstance(metrics, dict):
            raise _fail(path, f"results of task {task!r} are not an object")
        wanted = metric.get(task) or metric.get("*")
        chosen = choose_metric(task, metrics, wanted)
        if chosen is None:
            if wanted:
                have = sorted(k for k in metrics if "," in k and "_stderr," not in k)
                raise AclarenaError(f"{path}: task {task!r} has no metric {wanted!r}; it has {', '.join(have) or 'none'}")
            raise _fail(path, f"task {task!r} has no numeric metric of the form 'name,filter' such as \"acc,none\"")
        name, filt = chosen.split(",", 1)
        stderr = _number(metrics.get(f"{name}_stderr,{filt}"))
        ids, scores = _samples(path, task, name, filt, inline_samples.get(task))
        out.append(TaskResult(task=task, metric=chosen, value=float(metrics[chosen]),
                              stderr=float("nan") if stderr is None else stderr, version=versions.get(task),
                              n_shot=n_shot.get(task), item_ids=ids, item_scores=scores, harness_version=harness))
    return out


def _samples(path: Path, task: str, name: str, filt: str, inline: Any) -> tuple[list[str], np.ndarray | None]:
    rows: list[dict[str, Any]] = []
    if isinstance(inline, list):
        rows = [r for r in inline if isinstance(r, dict)]
    else:
        stamp = re.sub(r"^results_?", "", path.stem)
        files = sorted(path.parent.glob(f"samples_{task}_*.jsonl"))
        same = [f for f in files if f.stem == f"samples_{task}_{stamp}"]
        chosen = same[0] if same else (files[-1] if files else None)
        if chosen is not None:
            try:
                text = chosen.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise AclarenaError(f"cannot read {chosen}: {getattr(e, 'strerror', None) or e}") from None
            for lineno, line in jsonl.lines(text):  # "\n" only: U+2028 may sit inside strings
                line = line.strip()
                if not line:
                    continue
                try:
                    r = jsonl.loads(line)
                except jsonl.JsonShapeError as e:
                    raise AclarenaError(f"{chosen} line {lineno} cannot be used: {e}") from None
                except ValueError:
                    raise AclarenaError(f"{chosen} line {lineno} is not JSON; is the file complete?") from None
                if isinstance(r, dict):
                    rows.append(r)
    ids: list[str] = []
    vals: list[float] = []
    for r in rows:
        if "filter" in r and r["filter"] != filt:
            continue
        v = _number(r.get(name))
        if v is None:
            continue
        ids.append(str(r.get("doc_id", len(ids))))
        vals.append(v)
    return (ids, np.array(vals, dtype=np.float64)) if vals else ([], None)


def parse_tag(text: str) -> tuple[str, tuple[str | None, str]]:
    """``TASK=DOMAIN[/ROLE]`` -> ``(task, (domain, role))``; ``general`` alone means the general role."""
    if "=" not in text:
        raise AclarenaError(f"--lm-eval-task {text!r} must look like TASK=DOMAIN or TASK=DOMAIN/ROLE (e.g. aime24=math/id)")
    task, tag = (x.strip() for x in text.split("=", 1))
    domain, _, role = tag.partition("/")
    if not role:
        role = "general" if domain == "general" else "id"
    if role not in ROLES or not task or not domain:
        raise AclarenaError(f"--lm-eval-task {text!r}: role must be one of {', '.join(ROLES)} (e.g. aime24=math/id)")
    return task, (domain, role)


def import_payloads(
    checkpoint: str,
    path: str | Path,
    *,
    tags: Mapping[str, tuple[str | None, str]] | None = None,
    metric: Mapping[str, str] | None = None,
) -> list[CellData]:
    """The capability cell of every task of an lm-eval results file (suite ``lm-eval/<task>``; its ``extra``
    attributes say where it came from, :func:`import_info`)."""
    path = Path(path)
    results = read_results(path, metric=metric)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    out = []
    for r in results:
        domain, role = (tags or {}).get(r.task, (None, "other"))
        settings = {"source": "lm-eval", "task": r.task, "metric": r.metric, "file_sha256": digest}
        greedy = r.item_scores[None, :] if r.item_scores is not None else None
        cell = cell_payload(
            checkpoint=checkpoint, suite=SUITE_PREFIX + r.task, domain=domain, role=role, source="lm-eval",
            settings=settings, greedy=greedy, item_ids=r.item_ids if greedy is not None else None,
            mean=r.value, std=float("nan"),
            extra_attrs={"metric": r.metric, "stderr": r.stderr, "lm_eval_task": r.task, "source_file": str(path),
                         "lm_eval_task_version": json.dumps(r.version), "lm_eval_harness_version": r.harness_version or "",
                         "n_shot": json.dumps(r.n_shot)},
        )
        if not math.isfinite(r.value):
            raise AclarenaError(f"{path}: task {r.task!r} metric {r.metric} is not a finite number")
        out.append(cell)
    return out


def import_info(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """What an imported lm-eval cell records about its source, from the cell's attributes.

    ``task_version`` is the task's version (the results file's ``"versions"``); ``harness_version``
    the lm-evaluation-harness version that wrote the file (``""`` when unknown). Stores written
    before 2026-12-01 kept the task version under the misleading name ``lm_eval_version`` and no
    harness version: they read back the same, with ``harness_version`` ``""``.
    """
    def js(value: Any) -> Any:
        try:
            return json.loads(value) if isinstance(value, str) else value
        except ValueError:
            return value

    task_version = attrs.get("lm_eval_task_version", attrs.get("lm_eval_version"))
    return {"task": attrs.get("lm_eval_task"), "metric": attrs.get("metric"), "stderr": attrs.get("stderr"),
            "source_file": attrs.get("source_file"), "task_version": js(task_version),
            "harness_version": str(attrs.get("lm_eval_harness_version", "") or ""), "n_shot": js(attrs.get("n_shot"))}
