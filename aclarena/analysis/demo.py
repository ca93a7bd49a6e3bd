"""The demo: a shipped curriculum end to end, then every analysis, and its summary (``aclarena-diag demo``).

:func:`run_demo` trains a shipped curriculum (``quick`` by default: math then search, in minutes;
``mini``: the study's four stages) and its single-task oracles into ``out``
(:func:`~aclarena.train.curriculum.run_curriculum`), scores the chain on the in-domain suites and the
general one (:func:`~aclarena.analysis.eval.evaluate`; the out-of-domain suites are left out to keep the
demo short: ``aclarena-diag eval --run DIR --suites ood`` adds them), freezes
seq-math's generations (:func:`~aclarena.analysis.probe.freeze_probe`) and scores every later checkpoint
on them (:func:`~aclarena.analysis.tokens.tokens`), signs every phase, measures task vectors, SFT and RL
displacement and the continual-learning metrics, pairs every later stage's effect on each earlier skill
item by item, measures the lead time of the drift warnings (the ``mini`` recipe's e-commerce stage),
consolidates (the merges; SDFT, MLE and MMOPD with ``full``), repairs the stage that forgot most
(svd-restore) and compares. :func:`findings` says, one line each, which of the study's findings this run
shows and which it does not.

Each step calls the analysis layer's function for the matching verb, with the verb's defaults
(:mod:`aclarena.analysis.steps`: its typed result), so a rerun skips every finished phase and result; a step
that fails is recorded in the summary's ``errors`` (the line the verb would print) and the other steps go
on. Checkpoints are picked by the trained phases' manifest fields (kind, domain, parent), never by name.
The summary (:func:`build_summary`), with the time of every phase and step, is stored in results.h5 under
``demo/summary`` (:mod:`aclarena.results.demo`) and written to ``summary.json`` in the run folder (plain JSON,
for copying the numbers into a report exactly).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shlex
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.analysis import steps as analyses
from aclarena.analysis._common import Made, Pair, jsonable, num
from aclarena.analysis.steps import Failed, attempt
from aclarena.diagnostics.early_warning import drop_reachable_in
from aclarena.errors import AclarenaError
from aclarena.train.naming import repair_name

# The study's numbers (design.md), printed beside the mini arena's.
STUDY = {
    "ecom_effect": "the e-commerce stage drops AIME 23.3 -> 6.0, NQ 45.2 -> 14.6",
    "sft_rl": "SFT moves parameters 3-7x more than RL",
    "high_entropy": "~94% of low-entropy positions barely move; forgetting concentrates at ~6% high-entropy positions",
    "cosines": "stage updates only partly aligned with their single-task oracles",
    "consolidation": "each shared-weight consolidation recovers some skills and hurts others",
}
#: the suites whose change over the e-commerce stage the summary reports (the study's AIME and NQ, and MMLU)
ECOM_SUITES = ("math/id", "search/id", "general")
#: the domains of the token reference's stage and of the stage whose drop the demo tests
REF_DOMAIN, ECOM_DOMAIN = "math", "ecom"
SUMMARY_FILE = "summary.json"
#: the consolidations of every demo (seconds) and those ``full`` adds (they train)
MERGES = ("merge-uniform", "merge-ties")
TRAINED = ("sdft", "mle", "mmopd")
#: the repair of the stage that forgot most: svd-restore of this share of its update's singular directions
REPAIR_PERCENT = 25.0
#: the demo's own record of what it trains in its folder (preset, seed, trl overrides): a rerun with other
#: settings is refused before anything is written
SETTINGS_FILE = "demo-settings.json"
#: a one-sided paired test at this level counts as a significant drop (the monitor's ground truth too)
ALPHA = 0.05
#: an RL phase concentrates its drift when the lower 95% bound of its KL share at the top-entropy positions
#: exceeds this many times their share of positions (chance)
CHANCE_FACTOR = 3.0

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


def demo_config(preset: str = "quick", *, seed: int | None = None, trl: Sequence[str] = ()) -> tuple[Any, Path]:
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


def sizes(preset: str) -> tuple[int, int]:
    """Evaluation tasks per suite and sequences per drift signature of a preset's demo (tiny: toy sizes)."""
    return (4, 8) if preset == "tiny" else (50, 32)


def check_folder(out: Path, preset: str, seed: int, trl: Sequence[str]) -> None:
    """Refuse, before anything is written, a folder that holds a demo of other settings (preset, seed, trl
    overrides) or something the demo did not make; a folder of the same settings is resumed."""
    if not out.exists():
        return
    if not out.is_dir():
        raise AclarenaError(f"--out {out} is a file, not a folder; name a new folder")
    asked = {"preset": preset, "seed": seed, "trl": list(trl)}
    recorded = out / SETTINGS_FILE
    if recorded.is_file():
        try:
            got = json.loads(recorded.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise AclarenaError(f"{recorded} is unreadable ({e}); name another --out (nothing was changed)") from None
        got = got if isinstance(got, dict) else {}
        if {k: got.get(k) for k in asked} != asked:
            theirs = f"--preset {got.get('preset')} --seed {got.get('seed')}" + "".join(
                f" --trl {t}" for t in got.get("trl") or [])
            raise AclarenaError(f"{out} holds the demo of other settings ({theirs}); rerun with those to resume it, "
                                f"or name another --out (nothing was changed)")
        return
    from aclarena.train.curriculum import CONFIG_COPY

    copy = out / CONFIG_COPY
    if copy.is_file():  # a demo folder from before the settings file: its curriculum's run name says the preset
        import tomllib

        try:
            name = tomllib.loads(copy.read_text(encoding="utf-8")).get("run", {}).get("name")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError, RecursionError):
            name = None
        if name != preset:
            raise AclarenaError(f"{out} holds a run of curriculum {name!r}, not the {preset!r} demo; name another "
                                f"--out, or rerun with --preset {name} (nothing was changed)")
        return
    if any(out.iterdir()):
        raise AclarenaError(f"{out} is not empty and holds no demo run; name a new or empty --out folder "
                            f"(nothing was changed)")


def _record_settings(out: Path, preset: str, seed: int, trl: Sequence[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / SETTINGS_FILE
    if path.is_file():
        return
    tmp = out / f".{SETTINGS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"preset": preset, "seed": seed, "trl": list(trl)}) + "\n", encoding="utf-8")
    tmp.replace(path)


def run_demo(
    out: str | os.PathLike[str] = "runs/demo",
    *,
    preset: str = "quick",
    seed: int | None = None,
    n: int | None = None,
    trl: Sequence[str] = (),
    full: bool = False,
    show_progress: bool = False,
    on_trained: Callable[[list[dict[str, Any]]], None] | None = None,
    report: StepReport | None = None,
) -> DemoResult:
    """Train the preset's curriculum into ``out`` and run every analysis on it; store and return the summary.

    ``n``: evaluation tasks per suite (default 50; 4 for ``tiny``); ``trl``: trl overrides
    (``[sft.|rl.|base.]FIELD=VALUE``); ``full``: also the consolidations that train. ``on_trained(rows)``
    is called once the curriculum is trained, ``report(what)`` around each analysis step.
    """
    from aclarena.progress import quiet_libraries
    from aclarena.train.curriculum import run_curriculum

    t_start = time.monotonic()
    out = Path(out)
    cfg, path = demo_config(preset, seed=seed, trl=trl)
    n = n if n is not None else sizes(preset)[0]
    if n < 1:
        raise AclarenaError(f"-n must be >= 1, got {n}")
    check_folder(out, preset, cfg.seed, trl)
    _record_settings(out, preset, cfg.seed, trl)
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
    summary["seed"] = cfg.seed
    from aclarena.reproducibility import made_by

    cmd = (f"aclarena-diag demo --preset {preset} --seed {cfg.seed} -n {n}" + (" --full" if full else "")
           + "".join(f" --trl {shlex.quote(t)}" for t in trl))  # the whole recipe: --trl changes the training
    summary["made_by"] = made_by(cmd)  # docs/results/demo.json is this file: its tables cite the command
    _store(out, summary)
    return DemoResult(out=out, summary=summary, phases=rows)


def _analyses(run_dir: str, rows: list[dict[str, Any]], stage_ends: list[str], steps: dict[str, float], *,
              preset: str, n: int, full: bool, report: StepReport | None) -> dict[str, Any]:
    """Every analysis step on the trained run, its typed result by step (:class:`~aclarena.analysis.steps.Failed`
    for a failed one); each step's time is added to ``steps``."""
    sft_ends = [r["name"] for r in rows if r["kind"] == "stage" and r["name"] not in stage_ends]
    oracles = [r["name"] for r in rows if r["kind"] == "oracle" and _is_stage_end(r["name"], rows)]
    results: dict[str, Any] = {}

    def step(name: str, verb: str, fn: Callable[[], Any], what: str) -> Any:
        t0 = time.monotonic()
        with report(what) if report is not None else contextlib.nullcontext():
            data, error = attempt(verb, fn)
        steps[name] = steps.get(name, 0.0) + time.monotonic() - t0
        return data if error is None else Failed(error)

    def evaluate(checkpoints: Sequence[str], suites: Any) -> Any:
        return analyses.eval_cells(run_dir, checkpoints, suites, n)

    # the in-domain suites of the curriculum's own domains (a quick run trains no e-commerce: its long episodes
    # would be most of the evaluation time), and the general one
    by_name = {r["name"]: r for r in rows}
    in_domain = ",".join(dict.fromkeys(f"{by_name[e]['domain']}/id" for e in stage_ends))
    results["eval_chain"] = step("eval", "eval", lambda: evaluate(["base", *stage_ends], f"{in_domain},general"),
                                 f"evaluating base and {len(stage_ends)} stages on every suite")
    if sft_ends:
        results["eval_sft"] = step("eval", "eval", lambda: evaluate(sft_ends, in_domain),
                                   f"evaluating {len(sft_ends)} SFT phase ends in domain")
    if oracles:
        results["eval_oracles"] = step("eval", "eval", lambda: evaluate(oracles, in_domain),
                                       f"evaluating {len(oracles)} oracles in domain")
    ref = stage_end_of(REF_DOMAIN, rows, stage_ends)
    if ref is not None:
        from aclarena.results.probes import list_probe_sets
        from aclarena.store import ResultsStore

        if ref not in list_probe_sets(ResultsStore(run_dir)):  # a rerun keeps the frozen generations
            results["probe"] = step("probe", "probe", lambda: analyses.probe(run_dir, ref, REF_DOMAIN, sizes(preset)[1]),
                                    f"freezing {ref}'s generations")
        results["tokens"] = step("tokens", "tokens", lambda: analyses.tokens(run_dir, ref),
                                 f"token drift of later checkpoints on {ref}'s generations")
    # issue 31: every SFT and RL phase and stage signed on its parent's own generations (before the
    # consolidations exist, so only the chain's updates); analysis/signatures.py, docs/tokens.md section 8
    # the chain's updates only, named: a rerun (after the merges and the repair exist) reads them back instead of
    # signing the consolidations too (`aclarena-diag signatures --run DIR` signs those)
    results["signatures"] = step("signatures", "signatures",
                                 lambda: analyses.signatures(run_dir, sizes(preset)[1], chain_updates(rows, stage_ends)),
                                 "drift signatures of the SFT and RL phases")
    pairs = stage_oracle_pairs(rows, stage_ends)
    results["vectors"] = step("vectors", "vectors", lambda: analyses.vectors(run_dir, [p["pair"] for p in pairs]),
                              "task vectors")
    results["vector_pairs"] = pairs
    results["displacement"] = step("displacement", "displacement", lambda: analyses.displacement(run_dir), "displacement")
    results["forgetting"] = step("forgetting", "forgetting", lambda: analyses.forgetting(run_dir), "forgetting metrics")
    from aclarena.analysis.paired import paired_change

    t0 = time.monotonic()  # per-item pairs of every later stage's effect on each earlier skill (the store; no model)
    results["stage_effects"] = _stage_effects(run_dir, rows, stage_ends)
    ecom = stage_end_of(ECOM_DOMAIN, rows, stage_ends)
    if ecom is not None:
        try:
            results["paired"] = paired_change(run_dir, _stage_parent_of(ecom, rows, stage_ends), ecom, ECOM_SUITES)
        except AclarenaError as e:  # an unreadable matrix: the summary says so, the other steps go on
            results["paired"] = Failed(str(e))
    steps["forgetting"] = steps.get("forgetting", 0.0) + time.monotonic() - t0
    if ecom is not None:
        # tiny: 6 items, the fewest whose total loss can pass Holm over the stage's 3 evaluations; mini: the
        # monitor's defaults (20 items every 10 steps could not reach significance over the 200-step ecom stage)
        lead_n, lead_every = (50, 5) if preset == "mini" else (6, 2)
        results["lead_time"] = step("lead_time", "monitor", lambda: analyses.lead_time(run_dir, ECOM_DOMAIN, lead_n,
                                                                                        lead_every),
                                    "lead time of the drift warnings (retraining the ecom stage)")
    # consolidations, then the comparison table (docs/consolidation.md): the merges every time (seconds),
    # the methods that train (SDFT, MLE, MMOPD) with --full
    methods = list(MERGES) + (list(TRAINED) if full else [])
    made: list[Made] = []
    for method in methods:
        r = step("consolidate", "consolidate", functools.partial(analyses.consolidate, run_dir, method),
                 f"consolidating ({method})")
        made += [] if r is None or isinstance(r, Failed) else r.made()
    target = _repair_target(results["stage_effects"], rows, stage_ends)
    if target is not None:  # the stage that forgot most, repaired without data (docs/consolidation.md)
        old, new = target
        r = step("repair", "repair", functools.partial(analyses.repair, run_dir, old, new, repair_name(new),
                                                       REPAIR_PERCENT),
                 f"repairing {new} (svd-restore {REPAIR_PERCENT:g}% of its update from {old})")
        made += [] if r is None or isinstance(r, Failed) else r.made()
    shared = [o.checkpoint for o in made if o.method != "mle"]
    if shared:
        results["eval_consolidated"] = step("eval", "eval", lambda: evaluate(shared, f"{in_domain},general"),
                                            f"evaluating {len(shared)} consolidated models on every suite")
    for o in made:
        if o.method == "mle":  # an MLE expert answers only the contexts routed to it: its own domain's suites
            step("eval", "eval", functools.partial(evaluate, [o.checkpoint], o.domain),
                 f"evaluating {o.checkpoint} in its domain")
    results["compare"] = step("compare", "compare", lambda: analyses.compare(run_dir), "comparison table")
    return results


def chain_updates(rows: list[dict[str, Any]], stage_ends: list[str]) -> list[str]:
    """The chain's updates as ``signatures`` names them: each stage phase (the update into it), then each stage of
    several phases as ``PARENT..END``."""
    phases = [r["name"] for r in rows if r["kind"] == "stage" and r["parent"] is not None]
    whole = [f"{p}..{e}" for e in stage_ends
             if (p := _stage_parent_of(e, rows, stage_ends)) != next(r["parent"] for r in rows if r["name"] == e)]
    return phases + whole


def stage_oracle_pairs(rows: list[dict[str, Any]], stage_ends: list[str]) -> list[dict[str, Any]]:
    """``vectors --pair`` of each stage's update (its end minus its parent) with every oracle's direction (the
    oracle's end minus the base), but with an oracle that is the stage itself (the first stage's oracle reuses
    its folder: their cosine is 1 by construction)."""
    by_name = {r["name"]: r for r in rows}
    base = next((r["name"] for r in rows if r["kind"] == "base"), None)
    oracles = [r for r in rows if r["kind"] == "oracle" and _is_stage_end(r["name"], rows)]
    if base is None:
        return []
    out = []
    for name in stage_ends:
        parent = _stage_parent_of(name, rows, stage_ends)
        for o in oracles:
            if o.get("same_as") == name:
                continue
            out.append({"stage": name, "parent": parent, "domain": by_name[name]["domain"], "oracle": o["name"],
                        "oracle_domain": o["domain"], "base": base, "pair": f"{name}-{parent}:{o['name']}-{base}"})
    return out


def _stage_effects(run_dir: str, rows: list[dict[str, Any]], stage_ends: list[str]) -> list[dict[str, Any]]:
    """Each later stage's effect on each earlier stage's in-domain suite, item by item (flips' paired counts
    and the one-sided exact McNemar p of a drop); a pair that cannot be made carries its ``error`` line."""
    from aclarena.analysis.paired import paired_change

    by_name = {r["name"]: r for r in rows}
    out: list[dict[str, Any]] = []
    for i, name in enumerate(stage_ends[1:], start=1):
        before = _stage_parent_of(name, rows, stage_ends)
        suites = list(dict.fromkeys(f"{by_name[e]['domain']}/id" for e in stage_ends[:i]
                                    if by_name[e]["domain"] != by_name[name]["domain"]))
        try:
            paired = paired_change(run_dir, before, name, suites)
        except AclarenaError as e:
            paired = {s: {"error": str(e)} for s in suites}
        out += [{"stage": name, "before": before, "suite": s, **v} for s, v in paired.items()]
    return out


def _repair_target(effects: list[dict[str, Any]], rows: list[dict[str, Any]],
                   stage_ends: list[str]) -> tuple[str, str] | None:
    """(OLD, NEW) of the stage whose drop of an earlier skill is the most significant (more items lost than
    gained); the last stage when none lost more than it gained; None for a one-stage curriculum."""
    drops = [e for e in effects if e.get("p_drop") is not None and e.get("lost", 0) > e.get("gained", 0)]
    if drops:
        e = min(drops, key=lambda e: (e["p_drop"], stage_ends.index(e["stage"])))
        return e["before"], e["stage"]
    if len(stage_ends) < 2:
        return None
    return _stage_parent_of(stage_ends[-1], rows, stage_ends), stage_ends[-1]


# --- the summary -------------------------------------------------------------------------------------------


def stage_end_of(domain: str, rows: list[dict[str, Any]], stage_ends: list[str]) -> str | None:
    """The end of the chain's stage of ``domain`` (None when the curriculum has none)."""
    by_name = {r["name"]: r for r in rows}
    return next((e for e in stage_ends if by_name[e]["domain"] == domain), None)


def oracle_of(domain: str, rows: list[dict[str, Any]]) -> str | None:
    """The end of ``domain``'s single-task oracle (None when none was trained)."""
    return next((r["name"] for r in rows if r["kind"] == "oracle" and r["domain"] == domain
                 and _is_stage_end(r["name"], rows)), None)


def _ok(results: dict[str, Any], key: str) -> Any:
    """The result of step ``key``; None when it did not run or failed."""
    v = results.get(key)
    return None if isinstance(v, Failed) else v


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
    """Each (checkpoint, suite) cell's greedy score and its 95% bootstrap interval over items (of the ``eval``
    results; a step that did not run or failed is None or :class:`~aclarena.analysis.steps.Failed`)."""
    out: dict[tuple[str, str], float] = {}
    ci: dict[tuple[str, str], list[float]] = {}
    for e in evals:
        if e is None or isinstance(e, Failed):
            continue
        out |= e.scores()
        ci |= e.intervals()
    return out, ci


def build_summary(rows: list[dict[str, Any]], results: dict[str, Any], stage_ends: list[str],
                  steps: dict[str, float], total_s: float, preset: str, n: int) -> dict[str, Any]:
    """The study's measurements as found on this run, from the steps' typed results (plain data; printed and
    stored: the one place they become JSON)."""
    cells, ci = _cells(results.get("eval_chain"), results.get("eval_sft"), results.get("eval_oracles"),
                       results.get("eval_consolidated"))
    by_name = {r["name"]: r for r in rows}

    stages = []
    for name in stage_ends:
        d = by_name[name]["domain"]
        parent = _stage_parent_of(name, rows, stage_ends)
        suite = f"{d}/id"
        oracle = oracle_of(d, rows)
        sft = next((r["name"] for r in rows if r["kind"] == "stage" and r["parent"] == parent
                    and r["domain"] == d and r["name"] != name), None)
        stages.append({"stage": name, "domain": d, "suite": suite, "parent": parent,
                       "parent_score": cells.get((parent, suite)), "score": cells.get((name, suite)),
                       "score_ci95": ci.get((name, suite)), "after_sft": cells.get((sft, suite)) if sft else None,
                       "oracle": cells.get((oracle, suite)) if oracle else None,
                       "oracle_ci95": ci.get((oracle, suite)) if oracle else None,
                       "general": cells.get((name, "general"))})
    ecom = None
    after = stage_end_of(ECOM_DOMAIN, rows, stage_ends)
    if after is not None:
        before = _stage_parent_of(after, rows, stage_ends)
        paired = _ok(results, "paired") or {}  # analysis.paired's counts by suite
        ecom = {"before": before, "after": after,
                **{s: {"before": cells.get((before, s)), "after": cells.get((after, s)),
                       "before_ci95": ci.get((before, s)), "after_ci95": ci.get((after, s)),
                       **{k: v for k, v in paired.get(s, {}).items() if k != "error"}}
                   for s in ECOM_SUITES}}
    disp = _ok(results, "displacement")
    per, overall = ([], None) if disp is None else disp.sft_rl()[:2]
    sft_rl = [{"stage": r.stage, "ratio": num(r.ratio), "sft": num(r.sft), "rl": num(r.rl)} for r in per]
    tok = _ok(results, "tokens")
    drift = [{"checkpoint": name, "kl_share_high": num(d.kl_share_high),
              "barely_moved_low": num(d.barely_moved_low), "kl_mean": num(d.kl_mean)}
             for name, d in (tok.summaries.items() if tok is not None else ()) if num(d.kl_share_high) is not None]
    forg = _ok(results, "forgetting")
    lead = _ok(results, "lead_time") or {}  # the lead-time measurement is plain data (train.lead_time)
    phases = [{"name": r["name"], "status": r["status"], "steps": r["steps"], "time_s": r["time_s"]} for r in rows]
    errors = {k: v.line for k, v in results.items() if isinstance(v, Failed)}
    effects = [{**e, "before_score": cells.get((e["before"], e["suite"])), "after_score": cells.get((e["stage"], e["suite"])),
                "before_ci95": ci.get((e["before"], e["suite"])), "after_ci95": ci.get((e["stage"], e["suite"]))}
               for e in results.get("stage_effects") or []]
    vec = _ok(results, "vectors")
    compared = _ok(results, "compare")
    cmp = None if compared is None else jsonable(compared.to_dict())
    summary = {
        "preset": preset, "eval_tasks_per_suite": n, "stages": stages, "ecom_effect": ecom,
        "base_general": cells.get(("base", "general")),
        "sft_rl": sft_rl, "sft_rl_overall": None if disp is None else num(overall),
        "token_drift": {"high": None if tok is None else tok.high, "checkpoints": drift},
        "signatures": _signatures(results.get("signatures")),
        "forgetting": None if forg is None else dict(forg.metrics), "phase_times": phases,
        "lead_time": [{**{k: r.get(k) for k in ("domain", "predictor", "metric", "warn_step", "drop_step", "lead")},
                       "drop_reachable": drop_reachable_in(lead, r["domain"])} for r in lead.get("table", [])],
        "training_s": sum(p["time_s"] or 0.0 for p in phases), "step_times": steps, "total_s": total_s,
        "errors": errors, "study": STUDY, "comparison": cmp,
        "stage_effects": effects,
        "oracle_cosines": oracle_cosines({} if vec is None else vec.asked_cosines(),
                                         results.get("vector_pairs") or []),
        "repairs": [] if compared is None else jsonable([r.to_dict() for r in compared.repairs]),
    }
    summary["findings"] = findings(summary)
    return summary


def _pair_of(p: dict[str, Any]) -> Pair:
    """The two differences of a :func:`stage_oracle_pairs` entry: the stage's update and the oracle's direction."""
    return (p["stage"], p["parent"]), (p["oracle"], p["base"])


def oracle_cosines(cos: dict[Pair, float | None], pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each stage update's cosine with its own domain's oracle direction and with the other oracles' (``cos``: the
    ``vectors`` cosines of the pairs of :func:`stage_oracle_pairs`); only stages with an oracle of their own
    domain."""
    out = []
    for stage in dict.fromkeys(p["stage"] for p in pairs):
        mine = [p for p in pairs if p["stage"] == stage]
        own = [p for p in mine if p["oracle_domain"] == p["domain"]]
        if not own or _pair_of(own[0]) not in cos:
            continue
        out.append({"stage": stage, "update": f"{stage} - {own[0]['parent']}", "domain": own[0]["domain"],
                    "oracle": own[0]["oracle"], "own": cos[_pair_of(own[0])],
                    "others": {p["oracle"]: cos.get(_pair_of(p)) for p in mine if p is not own[0]}})
    return out


# --- the findings: which of the study's measurements this run shows, one line each ---------------------------------


def _ci_text(x: float | None, ci: Sequence[float] | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def findings(s: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per finding of the study the demo checks: ``shown`` (True, False, or None where nothing could be
    measured), the run's own numbers in ``line`` and the study's beside them in ``study``. A finding that does
    not show says so; none is left out."""
    return [_f_forgetting(s), _f_signatures(s), _f_displacement(s), _f_cosines(s), _f_consolidation(s), _f_repair(s)]


def _finding(key: str, shown: bool | None, line: str, study: str | None = None) -> dict[str, Any]:
    return {"finding": key, "shown": shown, "line": line, "study": study}


def _f_forgetting(s: dict[str, Any]) -> dict[str, Any]:
    paired = [e for e in s.get("stage_effects") or [] if e.get("p_drop") is not None]
    if not paired:
        why = next((e["error"] for e in s.get("stage_effects") or [] if e.get("error")), "no later stage was paired")
        return _finding("forgetting", None, f"a later stage lowering an earlier skill: not measured ({why})",
                        STUDY["ecom_effect"])

    def text(e: dict[str, Any]) -> str:
        return (f"{e['stage']} lowers {e['suite']} {_ci_text(e['before_score'], e['before_ci95'])} -> "
                f"{_ci_text(e['after_score'], e['after_ci95'])}: {e['lost']} items lost, {e['gained']} gained of "
                f"{e['n']}, one-sided exact McNemar p = {e['p_drop']:.2g}")

    partial = [e for e in paired if e["p_drop"] < ALPHA and (e.get("after_score") or 0.0) > 0.0]
    if partial:
        best = min(partial, key=lambda e: e["p_drop"])
        more = f" (and {len(partial) - 1} more)" if len(partial) > 1 else ""
        return _finding("forgetting", True, f"a later stage lowers an earlier skill, not all of it: {text(best)}{more}",
                        STUDY["ecom_effect"])
    best = min(paired, key=lambda e: e["p_drop"])
    erased = best["p_drop"] < ALPHA
    return _finding("forgetting", False,
                    "no later stage lowers an earlier skill significantly without erasing it"
                    f"{' (it erases it)' if erased else ''}: the strongest, {text(best)}", STUDY["ecom_effect"])


def _f_signatures(s: dict[str, Any]) -> dict[str, Any]:
    block = s.get("signatures") or {}
    ups = block.get("updates") or []
    rl = [u for u in ups if u["kind"] == "rl"]
    sft = [u for u in ups if u["kind"] == "sft"]
    if not rl:
        failed = "; ".join(block.get("failed") or []) or "no RL phase was signed"
        return _finding("rl_drift_concentrated", None, f"drift concentrated at high-entropy tokens: not measured "
                        f"({failed})", STUDY["high_entropy"])

    def text(u: dict[str, Any]) -> str:
        v, lo, hi = u["kl_share_high"]
        return f"{u['update']} {v:.2f} [{lo:.2f}, {hi:.2f}]"

    chance = max(u["high_share"] for u in rl)
    below = [u for u in rl if u["kl_share_high"][1] <= CHANCE_FACTOR * u["high_share"]]
    line = (f"KL share at the top-entropy positions (chance {chance:.2f}, {ups[0]['n_sequences']} sequences): RL "
            + ", ".join(map(text, rl)) + "; SFT " + (", ".join(map(text, sft)) or "-"))
    missed = ", ".join(u["update"] for u in below) + f" not above {CHANCE_FACTOR:g}x chance; " if below else ""
    failed = "".join(f"; no signature: {f}" for f in block.get("failed") or [])
    return _finding("rl_drift_concentrated", not below and not block.get("failed"), f"{missed}{line}{failed}",
                    STUDY["high_entropy"])


def _f_displacement(s: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in s.get("sft_rl") or [] if r.get("ratio") is not None]
    if not rows:
        return _finding("sft_moves_more", None, "SFT vs RL displacement: not measured", STUDY["sft_rl"])
    line = "SFT moves the weights " + ", ".join(f"{r['ratio']:.1f}x ({r['stage']})" for r in rows) + " as far as RL"
    return _finding("sft_moves_more", all(r["ratio"] > 1 for r in rows), line, STUDY["sft_rl"])


def _f_cosines(s: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in s.get("oracle_cosines") or [] if r.get("own") is not None and r["others"]]
    if not rows:
        return _finding("oracle_alignment", None, "stage updates vs their oracles: not measured (no stage with a "
                        "trained oracle of its own and another to compare with)", STUDY["cosines"])
    line = "; ".join(f"{r['update']}: cos {r['own']:.2f} with {r['oracle']}, "
                     + ", ".join(f"{c:.2f} with {o}" for o, c in r["others"].items() if c is not None) for r in rows)
    partly = all(0.0 < r["own"] < 1.0 and all(c is None or r["own"] > c for c in r["others"].values()) for r in rows)
    return _finding("oracle_alignment", partly, f"each stage update is closer to its own oracle than to the others: "
                    f"{line}" if partly else f"not every stage update is partly aligned with its own oracle over the "
                    f"others: {line}", STUDY["cosines"])


def _f_consolidation(s: dict[str, Any]) -> dict[str, Any]:
    cmp = s.get("comparison") or {}
    rows = {r["label"]: r for r in cmp.get("rows", [])}
    seq = next((r for r in cmp.get("rows", []) if r.get("role") == "end"), None)
    merged = [r for r in cmp.get("rows", []) if r.get("method") and r["method"].startswith("merge")]
    if not merged or seq is None:
        return _finding("consolidation", None, "consolidation: not measured (no merge or no sequential end point "
                        "in the comparison)", STUDY["consolidation"])

    def mean(r: dict[str, Any], suite: str) -> float | None:
        return (r["cells"].get(suite) or {}).get("mean")

    r = rows.get("merge-uniform", merged[0])
    parts, up, down = [], 0, 0
    for suite in cmp.get("in_domain", []):
        a, b = mean(r, suite), mean(seq, suite)
        if a is None or b is None:
            continue
        parts.append(f"{suite} {a:.2f} (sequential end {b:.2f})")
        up += a > b
        down += a < b
    return _finding("consolidation", bool(up and down), f"{r['label']} recovers {up} and loses {down} in-domain "
                    f"skills against the sequential end: " + ", ".join(parts), STUDY["consolidation"])


def _f_repair(s: dict[str, Any]) -> dict[str, Any]:
    reps = s.get("repairs") or []
    if not reps:
        why = s.get("errors", {}).get("repair")
        return _finding("repair", None, f"training-free repair: not measured{f' ({why})' if why else ''}")
    r = reps[0]
    parts = []
    for k in ("healing", "preservation", "non_damage", "target_retention"):
        v = r.get(k) or {}
        ci = v.get("ci95")
        text = _ci_text(v.get("value"), ci if ci and None not in ci else None)
        parts.append(f"{k.replace('_', '-')} {'n/a (no items of that kind)' if text == '-' else text}")
    return _finding("repair", True, f"{r.get('checkpoint')} (the update {r.get('from')} -> {r.get('to')}): "
                    + ", ".join(parts))


def _signatures(result: Any) -> dict[str, Any] | None:
    """Issue 31: the summary's ``signatures`` block of the step's
    :class:`~aclarena.analysis.signatures.SignaturesResult` (None when the step did not run or failed)."""
    if result is None or isinstance(result, Failed):
        return None
    from aclarena.analysis.signatures import demo_block

    return demo_block(jsonable(result.to_dict()))


def _store(out: Path, summary: dict[str, Any]) -> None:
    from aclarena.results.demo import DemoSummaryData, write_demo_summary

    payload = DemoSummaryData.from_json(_plain(summary))
    write_demo_summary(out, payload)
    summary = payload.to_json()  # the same keys and values: summary.json holds what the store holds
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


