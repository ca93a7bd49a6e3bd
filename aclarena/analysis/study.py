"""The study's findings over several seeds: train, evaluate, analyse, one findings table.

:func:`run_study` trains ``seeds`` curricula of one config from one shared base
(``train --seeds N``: replicate ``r`` appends ``-s<r>`` to its names), evaluates every stage end,
SFT end and oracle in domain (and the chain on ``general``), freezes each replicate's seq-math
generations and scores its later checkpoints on them (``tokens``), measures parameter
displacement, then writes ``findings.json`` (strict JSON) in the run folder: one row per
finding, the value of every seed, their mean and sample standard deviation, and the study's
number beside it. Every part is resumable (finished phases, eval cells and token scores are
skipped on a rerun) and timed (``part_times``).

The analyses run as ``aclarena-diag`` verbs through a ``run_verb(argv) -> (code, json, error)``
that the caller supplies (the CLI passes its own; the analysis layer never imports the CLI).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.errors import AclarenaError

FINDINGS_FILE = "findings.json"
VerbRunner = Callable[[list[str]], tuple[int, Any, str]]

# The study's numbers (ACLArena, arXiv 2609.23989; design.md), beside each row.
STUDY = {
    "ecom_math": "AIME 23.3 -> 6.0",
    "ecom_search": "NQ 45.2 -> 14.6",
    "sft_rl": "SFT moves parameters 3-7x more than RL",
    "kl_share_high": "forgetting concentrates at ~6% high-entropy positions",
    "barely_moved_low": "~94% of low-entropy positions barely move",
}


@dataclass
class StudyResult:
    """What :func:`run_study` found: per-seed values and the findings rows."""

    out: Path
    seeds: list[int]
    rows: list[dict[str, Any]]
    part_times: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "rows": self.rows, "part_times": self.part_times, "errors": self.errors}

    def to_pandas(self) -> Any:
        """DataFrame, one row per finding: finding, quantity, study, values (per seed), mean, spread."""
        from aclarena.analysis._common import frame

        return frame(self.rows)


def mean_spread(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1) of the finite values; spread None below two values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def finding_row(finding: str, quantity: str, study: str | None, values: Sequence[float | None],
                digits: int = 2) -> dict[str, Any]:
    m, s = mean_spread(values)
    return {"finding": finding, "quantity": quantity, "study": study, "values": [_finite(v) for v in values],
            "mean": m, "spread": s, "digits": digits}


def _finite(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def suffix(r: int) -> str:
    from aclarena.train.naming import replicate_suffix

    return replicate_suffix(r)


def cells_of(*evals: Any) -> dict[tuple[str, str], float]:
    """(checkpoint, suite) -> greedy mean, from ``eval --json`` outputs."""
    out: dict[tuple[str, str], float] = {}
    for e in evals:
        for c in (e or {}).get("cells", []) if isinstance(e, dict) else []:
            if c.get("status") == "ok" and c.get("mean") is not None:
                out[(c["checkpoint"], c["suite"])] = float(c["mean"])
    return out


def findings(seeds: Sequence[int], stages: Sequence[str], cells: dict[tuple[str, str], float],
             updates: Sequence[dict[str, Any]], drift: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings rows from per-replicate measurements (pure: tested on synthetic inputs).

    Args:
        seeds: the replicates (0, 1, ...), their names suffixed ``-s<r>`` for r >= 1.
        stages: the curriculum's domains in order.
        cells: (checkpoint, suite) -> greedy accuracy.
        updates: ``displacement --json``'s ``updates`` (checkpoint, parent, phase, kind, domain, norm).
        drift: replicate -> the ``tokens`` row (``kl_share_high``, ``barely_moved_low``) of the
            checkpoint after the ecom stage, on that replicate's seq-math generations.
    """
    rows: list[dict[str, Any]] = []
    reps = list(range(len(seeds)))
    if "ecom" in stages and stages.index("ecom") > 0:
        before = f"seq-{stages[stages.index('ecom') - 1]}"
        for dom, key in (("math", "ecom_math"), ("search", "ecom_search")):
            if dom not in stages[: stages.index("ecom")]:
                continue
            for when, ck in (("before", before), ("after", "seq-ecom")):
                vals = [cells.get((ck + suffix(r), f"{dom}/id")) for r in reps]
                rows.append(finding_row("the ecom stage's effect on earlier skills",
                                        f"{dom}/id {when} the ecom stage ({ck})", STUDY[key] if when == "after" else None,
                                        vals))
    norms = {u["checkpoint"]: u.get("norm") for u in updates if u.get("kind") == "stage"}
    for d in stages:
        vals = []
        for r in reps:
            sft, rl = norms.get(f"seq-{d}-sft{suffix(r)}"), norms.get(f"seq-{d}{suffix(r)}")
            vals.append(sft / rl if sft is not None and rl not in (None, 0) else None)
        if any(v is not None for v in vals) or any(f"seq-{d}-sft{suffix(r)}" in norms for r in reps):
            rows.append(finding_row("SFT vs RL displacement", f"{d}: ||dθ|| SFT / ||dθ|| RL", STUDY["sft_rl"], vals, 1))
    if drift:
        rows.append(finding_row("token drift at high-entropy positions",
                                "share of KL at the top 6% entropy positions (seq-ecom on seq-math's generations)",
                                STUDY["kl_share_high"], [(drift.get(r) or {}).get("kl_share_high") for r in reps]))
        rows.append(finding_row("token drift at high-entropy positions",
                                "low-entropy positions that barely move (seq-ecom on seq-math's generations)",
                                STUDY["barely_moved_low"], [(drift.get(r) or {}).get("barely_moved_low") for r in reps]))
    for d in stages:
        vals = [cells.get((f"seq-{d}{suffix(r)}", f"{d}/id")) for r in reps]
        orc = [cells.get((f"oracle-{d}{suffix(r)}", f"{d}/id")) for r in reps]
        if any(v is not None for v in vals + orc):
            rows.append(finding_row("in-domain scores", f"{d}/id after its stage (seq-{d})", None, vals))
            rows.append(finding_row("in-domain scores", f"{d}/id of its oracle (oracle-{d})", None, orc))
    return rows


def run_study(cfg: Any, out: str | os.PathLike[str], *, seeds: int, run_verb: VerbRunner, n: int = 100,
              show_progress: bool = False, config_text: str | None = None,
              on_part: Callable[[str, float], None] | None = None) -> StudyResult:
    """Train ``seeds`` curricula of ``cfg`` into ``out``, evaluate, analyse; write findings.json.

    ``n`` tasks per suite (greedy); ``on_part(name, seconds)`` is called after each part.
    """
    from aclarena.train.curriculum import run_curriculum

    if seeds < 1:
        raise AclarenaError(f"--seeds must be >= 1, got {seeds}")
    if n < 1:
        raise AclarenaError(f"-n must be >= 1, got {n}")
    out = Path(out)
    times: dict[str, float] = {}
    errors: dict[str, str] = {}

    def part(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            times[name] = times.get(name, 0.0) + time.monotonic() - t0
            if on_part is not None:
                on_part(name, time.monotonic() - t0)

    def verb(name: str, argv: list[str]) -> Any:
        code, data, err = run_verb(argv)
        if code != 0 or data is None:
            errors[name] = (err.splitlines()[-1] if err else f"exit code {code}")
            return None
        return data

    trained = part("train", lambda: run_curriculum(cfg, out, seeds=seeds, show_progress=show_progress,
                                                   config_text=config_text))
    names = {r.job.name for r in trained.records}
    stages = [s.domain for s in cfg.stages]
    reps = list(range(seeds))
    run = str(out)
    ev = ["eval", "--run", run, "-n", str(n), "--samples", "0", "--seeds", "0"]

    def evaluate() -> list[Any]:
        chain = [f"seq-{d}{suffix(r)}" for r in reps for d in stages if f"seq-{d}{suffix(r)}" in names]
        others = [f"{k}-{d}{x}{suffix(r)}" for r in reps for d in stages for k, x in (("seq", "-sft"), ("oracle", ""))
                  if f"{k}-{d}{x}{suffix(r)}" in names]
        res = [verb("eval", [*ev, "--checkpoints", ",".join(["base", *chain]), "--suites", "id,general"])]
        if others:
            res.append(verb("eval", [*ev, "--checkpoints", ",".join(others), "--suites", "id"]))
        return res

    evals = part("eval", evaluate)
    drift: dict[int, dict[str, Any]] = {}

    def tokens() -> None:
        from aclarena.probes.probe_set import list_probe_sets
        from aclarena.store import ResultsStore

        frozen = set(list_probe_sets(ResultsStore(out))) if (out / "results.h5").exists() else set()
        for r in reps:
            ref = f"seq-math{suffix(r)}"
            if ref not in names or "ecom" not in stages:
                continue
            if ref not in frozen and verb(f"probe{suffix(r)}", ["probe", "--run", run, "--ref", ref, "--domain", "math",
                                                                "-n", str(min(n, 32)), "--max-new-tokens", "64"]) is None:
                continue
            data = verb(f"tokens{suffix(r)}", ["tokens", "--run", run, "--ref", ref])
            for row in (data or {}).get("checkpoints", []):
                if row.get("checkpoint") == f"seq-ecom{suffix(r)}":
                    drift[r] = row

    part("tokens", tokens)
    disp = part("displacement", lambda: verb("displacement", ["displacement", "--run", run]))
    rows = findings([cfg.seed + r for r in reps], stages, cells_of(*evals), (disp or {}).get("updates", []), drift)
    result = StudyResult(out=out, seeds=[cfg.seed + r for r in reps], rows=rows, part_times=times, errors=errors)
    write_findings(result, command=f"aclarena-diag study --run {out} --seeds {seeds} -n {n}")
    return result


def write_findings(result: StudyResult, *, command: str) -> Path:
    """``findings.json`` in the run folder, strict JSON, written whole then renamed."""
    import json

    from aclarena.docs_results import made_by

    data = {**result.to_json(), "made_by": made_by(command)}
    path = result.out / FINDINGS_FILE
    tmp = path.with_name(f".{FINDINGS_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        raise AclarenaError(f"cannot write {path}: {e.strerror or e}; free space or fix permissions, then rerun "
                            "(finished work is kept)") from None
    return path
