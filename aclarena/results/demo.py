"""The ``demo-summary`` result type: ``aclarena-diag demo``'s summary, its payload, and how it is stored.

One group ``demo/summary`` (result type ``demo-summary``, version 0.1.0) whose JSON element ``summary``
holds what the run folder's ``summary.json`` holds (docs/store-format.md). :mod:`aclarena.analysis.demo`
makes the summary (``build_summary``), turns it into the payload (:class:`DemoSummaryData`) and writes it
with :func:`write_demo_summary`; :func:`read_demo_summary` reads it back. Plain JSON here: no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from aclarena.results import registry
from aclarena.store.results import ResultsStore, StoreReader

STORE_KEY = "demo/summary"
RESULT_TYPE = "demo-summary"
RESULT_VERSION = "0.1.0"


@dataclass(frozen=True)
class DemoSummaryData:
    """The demo's summary, one field per top-level key of ``summary.json``, in its order (the values as the
    demo made them: plain JSON, NaN already null).

    ``stages``: per stage end its parent, suite and scores; ``ecom_effect``: the e-commerce stage's effect per
    suite (None without one); ``sft_rl``, ``sft_rl_overall``: the SFT/RL displacement ratios; ``token_drift``,
    ``signatures``, ``forgetting``, ``lead_time``, ``comparison``, ``stage_effects``, ``oracle_cosines``,
    ``repairs``: each step's block (None where a step did not run or failed, as the demo writes it);
    ``phase_times``, ``training_s``, ``step_times``, ``total_s``: where the time went; ``errors``: the line of
    each failed step by step; ``study``: the study's numbers printed beside the run's; ``findings``: one entry
    per finding (``finding``, ``shown``, ``line``, ``study``); ``seed`` and ``made_by`` (the command, date and
    machine) are absent (None) in a summary stored without them.
    """

    preset: str
    eval_tasks_per_suite: int
    stages: list[dict[str, Any]]
    ecom_effect: dict[str, Any] | None
    base_general: float | None
    sft_rl: list[dict[str, Any]]
    sft_rl_overall: float | None
    token_drift: dict[str, Any]
    signatures: dict[str, Any] | None
    forgetting: dict[str, Any] | None
    phase_times: list[dict[str, Any]]
    lead_time: list[dict[str, Any]]
    training_s: float
    step_times: dict[str, float]
    total_s: float
    errors: dict[str, str]
    study: dict[str, str]
    comparison: dict[str, Any] | None
    stage_effects: list[dict[str, Any]]
    oracle_cosines: list[dict[str, Any]]
    repairs: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    seed: int | None = None
    made_by: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The summary as ``summary.json`` holds it (the same keys in the same order; ``seed`` and ``made_by``
        only when present)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in out.items() if k not in OPTIONAL or v is not None}

    @classmethod
    def from_json(cls, data: Any) -> DemoSummaryData:
        """A summary as ``summary.json`` holds it; a missing key or a value of the wrong kind raises
        (``reader.damaged`` makes it one line); keys of a newer minor version are left out."""
        if not isinstance(data, dict):
            raise ValueError(f"not a demo summary: a {type(data).__name__}, not an object")
        missing = [k for k in KINDS if k not in data and k not in OPTIONAL]
        if missing:
            raise ValueError(f"not a demo summary: no {', '.join(missing)}")
        for key, kinds in KINDS.items():
            value = data.get(key)
            if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
                raise ValueError(f"demo summary's {key} is a {type(value).__name__}, not "
                                 f"{' or '.join(k.__name__ for k in kinds)}")
        values: dict[str, Any] = {k: data.get(k) for k in KINDS}
        return cls(**values)


_NUMBER = (int, float)
_NONE = type(None)
#: the JSON kinds each key may hold (None only where the demo writes null for a step that did not run)
KINDS: dict[str, tuple[type, ...]] = {
    "preset": (str,), "eval_tasks_per_suite": (int,), "stages": (list,), "ecom_effect": (dict, _NONE),
    "base_general": (*_NUMBER, _NONE), "sft_rl": (list,), "sft_rl_overall": (*_NUMBER, _NONE),
    "token_drift": (dict,), "signatures": (dict, _NONE), "forgetting": (dict, _NONE), "phase_times": (list,),
    "lead_time": (list,), "training_s": _NUMBER, "step_times": (dict,), "total_s": _NUMBER, "errors": (dict,),
    "study": (dict,), "comparison": (dict, _NONE), "stage_effects": (list,), "oracle_cosines": (list,),
    "repairs": (list,), "findings": (list,), "seed": (int, _NONE), "made_by": (dict, _NONE),
}
#: the keys a summary MAY lack (``run_demo`` adds them after ``build_summary``)
OPTIONAL = ("seed", "made_by")


def read_demo_summary(reader: StoreReader | None) -> DemoSummaryData | None:
    """The stored demo summary of an open results store (None when there is none)."""
    data: DemoSummaryData | None = registry.read_if_stored(reader, STORE_KEY, RESULT_TYPE)
    return data


def write_demo_summary(store: ResultsStore | str | os.PathLike[str], payload: DemoSummaryData) -> str:
    """Write ``payload`` at :data:`STORE_KEY` (replacing the summary there), completely or not at all."""
    registry.write(store, RESULT_TYPE, STORE_KEY, payload, overwrite=True)
    return STORE_KEY


DEMO_SUMMARY = registry.register(registry.json_type(RESULT_TYPE, RESULT_VERSION, DemoSummaryData, "summary"))
