"""Small pieces every analysis shares: where a run is, its manifest, JSON-safe numbers, frames."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from aclarena.errors import AclarenaError
from aclarena.store.manifest import Manifest, load_manifest, manifest_path

RunPath = str | os.PathLike[str]

OptionsT = TypeVar("OptionsT")
#: an update or task vector as its two checkpoints: ``(plus, minus)``, ``θ_plus − θ_minus``
Difference = tuple[str, str]
#: two differences whose cosine ``vectors --pair`` measures
Pair = tuple[Difference, Difference]


def options_of(cls: type[OptionsT], options: OptionsT | None, settings: dict[str, Any]) -> OptionsT:
    """An analysis's options: ``options``, or ``cls`` made from its fields given as keywords (checked as the class
    checks them), or ``cls``'s defaults; both at once is one line."""
    if settings:
        if options is not None:
            article = "an" if cls.__name__[0] in "AEIOU" else "a"
            raise AclarenaError(f"give the options either as {article} {cls.__name__} or as keywords, not both")
        return cls(**settings)
    return options if options is not None else cls()


def manifest_or_load(run_dir: RunPath, manifest: Manifest | None) -> Manifest:
    """``manifest`` when given (a caller that already read it), else the run's aclarena.toml."""
    return manifest if manifest is not None else load_manifest(run_dir)


def manifest_text(run_dir: RunPath) -> str | None:
    """The run's aclarena.toml as written (recorded in the store with each result), None if unreadable."""
    try:
        return manifest_path(run_dir).read_text(encoding="utf-8")
    except OSError:
        return None


def num(x: Any) -> float | None:
    """A float, with None, NaN and inf as None (strict JSON)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Made:
    """One checkpoint a consolidation or a repair made (or reused): its name, method, replicate and, for an MLE
    expert, its domain (:meth:`ConsolidateResult.made <aclarena.analysis.consolidate.ConsolidateResult.made>`,
    :meth:`RepairRunResult.made <aclarena.analysis.repair.RepairRunResult.made>`)."""

    checkpoint: str
    method: str
    replicate: int = 0
    domain: str | None = None


def nums(a: Any) -> list[Any]:
    """A nested list of floats with NaN/inf as None (strict JSON)."""
    arr = np.asarray(a, dtype=float)
    out = arr.astype(object)
    out[~np.isfinite(arr)] = None
    result: list[Any] = out.tolist()
    return result


def nan_none(x: Any) -> Any:
    """``x`` with a float NaN replaced by None."""
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def jsonable(x: Any) -> Any:
    """``x`` as JSON would carry it: arrays and numpy numbers as lists and floats, tuples as lists, keys as
    text, paths as text, non-finite floats as None (what every verb's ``--json`` prints)."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    return x


def frame(rows: Iterable[Mapping[str, Any]], columns: list[str] | None = None) -> Any:
    """A pandas DataFrame of ``rows`` (pandas is imported here, on first use)."""
    import pandas as pd

    rows = list(rows)
    return pd.DataFrame(rows, columns=columns) if columns is not None else pd.DataFrame(rows)


def prompt_format_of(spec: Any, manifest: Manifest, run_dir: RunPath, *, suite: str | None = None,
                     template: bool | None = None, info: Any = None) -> tuple[str, str | None]:
    """How checkpoint ``spec`` is prompted (on ``suite``): its ``prompt_format`` in the manifest, else the
    suite's (``[suites.NAME] prompt_format``), else detected from its tokenizer (``template``: whether it
    has a chat template; read from the checkpoint's files when not given). Returns the format and the one
    line saying it was detected as ``plain`` (None otherwise); ``chat`` asked for a tokenizer without a
    template is an AclarenaError of one line (:func:`aclarena.models.chat.choose_prompt_format`)."""
    from aclarena.models.chat import choose_prompt_format

    suite_spec = manifest.suites.get(suite) if suite is not None else None
    if spec.prompt_format is not None:
        requested, where = spec.prompt_format, f"[checkpoints.{spec.name}] prompt_format"
    elif suite_spec is not None and suite_spec.prompt_format is not None:
        requested, where = suite_spec.prompt_format, f"[suites.{suite}] prompt_format"
    else:
        requested, where = None, None
    if template is None:
        if info is None:
            from aclarena.models.checkpoint import inspect

            info = inspect(spec, manifest, run_dir, allow_pickle=True)
        template = info.chat_template
    return choose_prompt_format(requested, template, checkpoint=spec.name, where=where)
