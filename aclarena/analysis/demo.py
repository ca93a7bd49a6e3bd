"""The demo: the mini curriculum end to end, then every analysis, and its summary (``aclarena-diag demo``).

:func:`run_demo` trains the mini curriculum and its single-task oracles into ``out``
(:func:`~aclarena.train.curriculum.run_curriculum`), scores the chain on the in-domain suites and the
general one (:func:`~aclarena.analysis.eval.evaluate`; the out-of-domain suites are left out to keep the
demo near 15 minutes on 2 cores: ``aclarena-diag eval --run DIR --suites ood`` adds them), freezes
seq-math's generations (:func:`~aclarena.analysis.probe.freeze_probe`) and scores every later checkpoint
on them (:func:`~aclarena.analysis.tokens.tokens`), measures task vectors, SFT and RL displacement and the
continual-learning metrics, pairs the e-commerce stage's effect item by item, measures the lead time of
the drift warnings, consolidates (the merges; SDFT, MLE and MMOPD with ``full``) and compares.

Each step calls the analysis layer's function for the matching verb, with the verb's defaults, so a
rerun skips every finished phase and result; a step that fails is recorded in the summary's ``errors``
(the line the verb would print) and the other steps go on. The summary (:func:`build_summary`), with the
time of every phase and step, is stored in results.h5 under ``demo/summary`` and written to
``summary.json`` in the run folder (plain JSON, for copying the numbers into a report exactly).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.analysis import steps as analyses
from aclarena.analysis.steps import attempt
from aclarena.diagnostics.early_warning import drop_reachable_in
from aclarena.errors import AclarenaError

# The study's numbers (design.md), printed beside the mini arena's.
STUDY = {
    "ecom_effect": "AIME 23.3 -> 6.0, NQ 45.2 -> 14.6",
    "sft_rl": "SFT moves parameters 3-7x more than RL",
    "high_entropy": "~94% of low-entropy positions barely move; forgetting concentrates at ~6% high-entropy positions",
}
#: the suites whose change over the e-commerce stage the summary reports (the study's AIME and NQ, and MMLU)
ECOM_SUITES = ("math/id", "search/id", "general")
SUMMARY_KEY = "demo/summary"
SUMMARY_FILE = "summary.json"
#: the consolidations of every demo (seconds) and those ``full`` adds (they train)
MERGES = ("merge-uniform", "merge-ties")
TRAINED = ("sdft", "mle", "mmopd")

#: ``report(what)``: a context around each analysis step (the CLI shows a spinner or a timing line)
StepReport = Callable[[str], AbstractContextManager[Any]]


@dataclass
class DemoResult:
    """What :func:`run_demo` did: the run folder, the summary (stored and in ``summary.json``) and one
    row per trained phase."""

    out: Path
    summary: dict[str, Any]
    phases: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What ``aclarena-diag demo --json`` prints."""
        return {"out": str(self.out), "summary": self.summary, "phases": self.phases}


def demo_config(preset: str = "mini", *, seed: int | None = None, trl: Sequence[str] = ()) -> tuple[Any, Path]:
    """The preset's curriculum config with ``trl`` overrides and ``seed``, and the preset's file."""
    from dataclasses import replace

    from aclarena.train.config import load_config
    from aclarena.train.presets import preset_path

    path = preset_path(preset)
    cfg = load_config(path, overrides=list(trl))
    if seed is not None:
        if seed < 0:
            raise AclarenaError(f"--seed must be >= 0, got {seed}")
        cfg = replace(cfg, seed=seed)
    return cfg, path


def run_demo(
    out: str | os.PathLike[str] = "runs/demo",
    *,
    preset: str = "mini",
    seed: int | None = None,
    n: int | None = None,
    trl: Sequence[str] = (),
    full: bool = False,
    show_progress: bool = False,
    on_trained: Callable[[list[dict[str, Any]]], None] | None = None,
    report: StepReport | None = None,
) -> DemoResult:
    """Train the preset's curriculum into ``out`` and run every analysis on it; store and return the summary.

    ``n``: evaluation tasks per suite (default 50 for ``mini``, 4 for ``tiny``); ``trl``: trl overrides
    (``[sft.|rl.|base.]FIELD=VALUE``); ``full``: also the consolidations that train. ``on_trained(rows)``
    is called once the curriculum is trained, ``report(what)`` around each analysis step.
    """
    from aclarena.progress import quiet_libraries
    from aclarena.train.curriculum import run_curriculum

    t_start = time.monotonic()
    out = Path(out)
    cfg, path = demo_config(preset, seed=seed, trl=trl)
    n = n if n is not None else (50 if preset == "mini" else 4)
    if n < 1:
        raise AclarenaError(f"-n must be >= 1, got {n}")
    steps: dict[str, float] = {}

    t = time.monotonic()
    trained = run_curriculum(cfg, out, show_progress=show_progress, config_text=path.read_text(encoding="utf-8"))
    steps["train"] = time.monotonic() - t
    rows = trained.rows()
    if on_trained is not None:
        on_trained(rows)
    quiet_libraries()  # the steps' own library output stays out of the demo's

    run_dir = str(out)
    stage_ends = [r["name"] for r in rows if r["kind"] == "stage" and _is_stage_end(r["name"], rows)]
    results = _analyses(run_dir, rows, stage_ends, steps, preset=preset, n=n, full=full, report=report)
    summary = _plain(build_summary(rows, results, stage_ends, steps, time.monotonic() - t_start, preset, n))
    from aclarena.reproducibility import made_by

    cmd = f"aclarena-diag demo --preset {preset} --seed {cfg.seed} -n {n}" + (" --full" if full else "")
    summary["made_by"] = made_by(cmd)  # docs/results/demo.json is this file: its tables cite the command
    _store(out, summary)
    return DemoResult(out=out, summary=summary, phases=rows)


def _analyses(run_dir: str, rows: list[dict[str, Any]], stage_ends: list[str], steps: dict[str, float], *,
              preset: str, n: int, full: bool, report: StepReport | None) -> dict[str, Any]:
    """Every analysis step on the trained run, as plain data by step (``{"error": line}`` for a failed one);
    each step's time is added to ``steps``."""
    sft_ends = [r["name"] for r in rows if r["kind"] == "stage" and r["name"] not in stage_ends]
    oracles = [r["name"] for r in rows if r["kind"] == "oracle" and _is_stage_end(r["name"], rows)]
    results: dict[str, Any] = {}

    def step(name: str, verb: str, fn: Callable[[], Any], what: str) -> Any:
        t0 = time.monotonic()
        with report(what) if report is not None else contextlib.nullcontext():
            data, error = attempt(verb, fn)
        steps[name] = steps.get(name, 0.0) + time.monotonic() - t0
        return data if error is None else {"error": error}

    def evaluate(checkpoints: Sequence[str], suites: str) -> dict[str, Any]:
        return analyses.eval_cells(run_dir, checkpoints, suites, n)

    results["eval_chain"] = step("eval", "eval", lambda: evaluate(["base", *stage_ends], "id,general"),
                                 f"evaluating base and {len(stage_ends)} stages on every suite")
    if sft_ends:
        results["eval_sft"] = step("eval", "eval", lambda: evaluate(sft_ends, "id"),
                                   f"evaluating {len(sft_ends)} SFT phase ends in domain")
    if oracles:
        results["eval_oracles"] = step("eval", "eval", lambda: evaluate(oracles, "id"),
                                       f"evaluating {len(oracles)} oracles in domain")
    if "seq-math" in stage_ends:
        from aclarena.probes.probe_set import list_probe_sets
        from aclarena.store import ResultsStore

        if "seq-math" not in list_probe_sets(ResultsStore(run_dir)):  # a rerun keeps the frozen generations
            results["probe"] = step("probe", "probe", lambda: analyses.probe(run_dir, "seq-math", "math", 32 if preset == "mini" else 4),
                                    "freezing seq-math's generations")
        results["tokens"] = step("tokens", "tokens", lambda: analyses.tokens(run_dir, "seq-math"),
                                 "token drift of later checkpoints on seq-math's generations")
    # issue 31: every SFT and RL phase and stage signed on its parent's own generations (before the
    # consolidations exist, so only the chain's updates); analysis/signatures.py, docs/tokens.md section 8
    results["signatures"] = step("signatures", "signatures",
                                 lambda: analyses.signatures(run_dir, 32 if preset == "mini" else 8),
                                 "drift signatures of the SFT and RL phases")
    results["vectors"] = step("vectors", "vectors", lambda: analyses.vectors(run_dir), "task vectors")
    results["displacement"] = step("displacement", "displacement", lambda: analyses.displacement(run_dir), "displacement")
    results["forgetting"] = step("forgetting", "forgetting", lambda: analyses.forgetting(run_dir), "forgetting metrics")
    if "seq-ecom" in stage_ends:
        from aclarena.analysis.flips import paired_change

        t0 = time.monotonic()  # per-item pairs of the e-commerce stage's effect (reads the store; no model)
        try:
            results["paired"] = paired_change(run_dir, _stage_parent_of("seq-ecom", rows, stage_ends), "seq-ecom",
                                              ECOM_SUITES)
        except AclarenaError as e:  # an unreadable matrix: the summary says so, the other steps go on
            results["paired"] = {"error": str(e)}
        steps["forgetting"] = steps.get("forgetting", 0.0) + time.monotonic() - t0
        # tiny: 6 items, the fewest whose total loss can pass Holm over the stage's 3 evaluations; mini: the
        # monitor's defaults (20 items every 10 steps could not reach significance over the 200-step ecom stage)
        lead_n, lead_every = (50, 5) if preset == "mini" else (6, 2)
        results["lead_time"] = step("lead_time", "monitor", lambda: analyses.lead_time(run_dir, "ecom", lead_n, lead_every),
                                    "lead time of the drift warnings (retraining the ecom stage)")
    # consolidations, then the comparison table (docs/consolidation.md): the merges every time (seconds),
    # the methods that train (SDFT, MLE, MMOPD) with --full
    methods = list(MERGES) + (list(TRAINED) if full else [])
    made: list[dict[str, Any]] = []
    for method in methods:
        r = step("consolidate", "consolidate", functools.partial(analyses.consolidate, run_dir, method),
                 f"consolidating ({method})")
        made += (r or {}).get("outputs", [])
    shared = [o["checkpoint"] for o in made if o["method"] != "mle"]
    if shared:
        results["eval_consolidated"] = step("eval", "eval", lambda: evaluate(shared, "id,general"),
                                            f"evaluating {len(shared)} consolidated models on every suite")
    for o in made:
        if o["method"] == "mle":  # an MLE expert answers only the contexts routed to it: its own domain's suites
            step("eval", "eval", functools.partial(evaluate, [o["checkpoint"]], o["domain"]),
                 f"evaluating {o['checkpoint']} in its domain")
    results["compare"] = step("compare", "compare", lambda: analyses.compare(run_dir), "comparison table")
    return results


# --- the summary -------------------------------------------------------------------------------------------


def _is_stage_end(name: str, rows: list[dict[str, Any]]) -> bool:
    """The last phase of its stage: no row of the same kind and domain has it as parent (the next
    stage's first phase has it as parent too, but another domain)."""
    row = next(r for r in rows if r["name"] == name)
    return not any(r["parent"] == name and r["kind"] == row["kind"] and r["domain"] == row["domain"] for r in rows)


def _stage_parent_of(name: str, rows: list[dict[str, Any]], stage_ends: list[str]) -> str:
    """The previous stage's end (or the base): the parent of the stage that ``name`` ends."""
    by_name = {r["name"]: r for r in rows}
    p = by_name[name]["parent"]
    while p in by_name and by_name[p]["kind"] == "stage" and p not in stage_ends:
        p = by_name[p]["parent"]
    return p


def _cells(*evals: Any) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], list[float]]]:
    """Each (checkpoint, suite) cell's greedy score and its 95% bootstrap interval over items."""
    out: dict[tuple[str, str], float] = {}
    ci: dict[tuple[str, str], list[float]] = {}
    for e in evals:
        if not isinstance(e, dict):
            continue
        for c in e.get("cells", []):
            if c.get("status") == "ok" and c.get("mean") is not None:
                out[(c["checkpoint"], c["suite"])] = float(c["mean"])
                if c.get("ci95") is not None:
                    ci[(c["checkpoint"], c["suite"])] = [float(x) for x in c["ci95"]]
    return out, ci


def build_summary(rows: list[dict[str, Any]], results: dict[str, Any], stage_ends: list[str],
                  steps: dict[str, float], total_s: float, preset: str, n: int) -> dict[str, Any]:
    """The study's measurements as found on this run (plain data; printed and stored)."""
    cells, ci = _cells(results.get("eval_chain"), results.get("eval_sft"), results.get("eval_oracles"))
    by_name = {r["name"]: r for r in rows}

    stages = []
    for name in stage_ends:
        d = by_name[name]["domain"]
        parent = _stage_parent_of(name, rows, stage_ends)
        suite = f"{d}/id"
        sft = next((r["name"] for r in rows if r["kind"] == "stage" and r["parent"] == parent
                    and r["domain"] == d and r["name"] != name), None)
        stages.append({"stage": name, "domain": d, "suite": suite, "parent": parent,
                       "parent_score": cells.get((parent, suite)), "score": cells.get((name, suite)),
                       "score_ci95": ci.get((name, suite)), "after_sft": cells.get((sft, suite)) if sft else None,
                       "oracle": cells.get((f"oracle-{d}", suite)), "oracle_ci95": ci.get((f"oracle-{d}", suite)),
                       "general": cells.get((name, "general"))})
    ecom = None
    if "seq-ecom" in stage_ends:
        before = _stage_parent_of("seq-ecom", rows, stage_ends)
        paired = results.get("paired") if isinstance(results.get("paired"), dict) else {}
        ecom = {"before": before, "after": "seq-ecom",
                **{s: {"before": cells.get((before, s)), "after": cells.get(("seq-ecom", s)),
                       "before_ci95": ci.get((before, s)), "after_ci95": ci.get(("seq-ecom", s)),
                       **{k: v for k, v in (paired or {}).get(s, {}).items() if k != "error"}}
                   for s in ECOM_SUITES}}
    disp = results.get("displacement") if isinstance(results.get("displacement"), dict) else {}
    sft_rl = [{"stage": r["stage"], "ratio": r.get("ratio"), "sft": r.get("sft"), "rl": r.get("rl")}
              for r in (disp or {}).get("sft_rl", [])]
    tok = results.get("tokens") if isinstance(results.get("tokens"), dict) else {}
    drift = [{"checkpoint": r.get("checkpoint"), "kl_share_high": r.get("kl_share_high"),
              "barely_moved_low": r.get("barely_moved_low"), "kl_mean": r.get("kl_mean")}
             for r in (tok or {}).get("checkpoints", []) if r.get("kl_share_high") is not None]
    forg = results.get("forgetting") if isinstance(results.get("forgetting"), dict) else {}
    lead = results.get("lead_time") if isinstance(results.get("lead_time"), dict) else {}
    phases = [{"name": r["name"], "status": r["status"], "steps": r["steps"], "time_s": r["time_s"]} for r in rows]
    errors = {k: v["error"] for k, v in results.items() if isinstance(v, dict) and "error" in v}
    return {
        "preset": preset, "eval_tasks_per_suite": n, "stages": stages, "ecom_effect": ecom,
        "base_general": cells.get(("base", "general")),
        "sft_rl": sft_rl, "sft_rl_overall": (disp or {}).get("sft_rl_overall"),
        "token_drift": {"high": (tok or {}).get("high"), "checkpoints": drift},
        "signatures": _signatures(results.get("signatures")),
        "forgetting": (forg or {}).get("summary"), "phase_times": phases,
        "lead_time": [{**{k: r.get(k) for k in ("domain", "predictor", "metric", "warn_step", "drop_step", "lead")},
                       "drop_reachable": drop_reachable_in(lead or {}, r["domain"])} for r in (lead or {}).get("table", [])],
        "training_s": sum(p["time_s"] or 0.0 for p in phases), "step_times": steps, "total_s": total_s,
        "errors": errors, "study": STUDY,
        "comparison": results["compare"] if isinstance(results.get("compare"), dict) and "rows" in results["compare"]
        else None,
    }


def _signatures(data: Any) -> dict[str, Any] | None:
    """Issue 31: the summary's ``signatures`` block (None when the step did not run or failed)."""
    if not isinstance(data, dict) or "updates" not in data:
        return None
    from aclarena.analysis.signatures import demo_block

    return demo_block(data)


def _store(out: Path, summary: dict[str, Any]) -> None:
    from aclarena.store import Json, ResultsStore

    summary = _plain(summary)
    ResultsStore(out).write(SUMMARY_KEY, {"summary": Json(summary)}, result_type="demo-summary", overwrite=True)
    # written whole, then renamed: a reader never sees half a file
    tmp = out / "summary.json.tmp"
    try:
        tmp.write_text(json.dumps(summary, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        tmp.replace(out / SUMMARY_FILE)
    except OSError as e:
        raise AclarenaError(f"cannot write {out / SUMMARY_FILE}: {e.strerror or e}; free space or fix the "
                            f"folder's permissions, then rerun (finished work is kept)") from None


def _plain(x: Any) -> Any:
    """Strict JSON values: NaN and infinities become null (``jq`` and browsers reject them)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)


