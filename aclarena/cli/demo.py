"""``aclarena-diag demo``: the embedded default, the whole loop on the mini arena.

Trains the mini curriculum and its single-task oracles into ``--out`` (``train``), scores the
chain on the in-domain suites and the general one (``eval``; the
out-of-domain suites are left out to keep the demo near 15 minutes on 2 cores: ``aclarena-diag
eval --run DIR --suites ood`` adds them), freezes seq-math's generations (``probe``) and scores every
later checkpoint on them (``tokens``), measures task vectors (``vectors``), SFT and RL
displacement (``displacement``) and the continual-learning metrics (``forgetting``), then
prints what the study measures, as found on the mini arena, and the dashboard command.

Each step is the verb itself (called through :func:`aclarena.cli.main` with ``--json``), so a
rerun skips every finished phase and result. The summary, with the time of every phase and
step, is stored in results.h5 under ``demo/summary`` and written to ``summary.json`` in the run
folder (plain JSON, for copying the numbers into a report exactly).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from aclarena.cli._common import add_verb, fmt, print_json, print_table
from aclarena.diagnostics.early_warning import drop_label, drop_reachable_in
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


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "demo",
        help="the embedded default: train the mini curriculum and oracles, run every analysis, print a summary",
        examples=(
            "aclarena-diag demo",
            "aclarena-diag demo --out runs/demo2 --seed 1",
            "aclarena-diag demo --preset tiny --out runs/tiny   # toy size, about 2 minutes",
        ),
        run_option=False,
    )
    p.add_argument("--out", "--run", dest="out", default="runs/demo", metavar="DIR",
                   help="run folder (default runs/demo); rerun to resume")
    p.add_argument("--preset", default="mini", choices=("mini", "tiny"),
                   help="mini: the demo curriculum (default); tiny: every phase at toy size")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="curriculum seed (default: the preset's)")
    p.add_argument("-n", type=int, default=None, metavar="N",
                   help="evaluation tasks per suite (default 50 for mini, 4 for tiny)")
    p.add_argument("--trl", action="append", default=[], metavar="[sft.|rl.|base.]FIELD=VALUE",
                   help="trl override on top of the preset (repeatable)")
    p.add_argument("--full", action="store_true",
                   help="also the consolidations that train (SDFT, MLE, MMOPD), after the merges")
    p.set_defaults(func=run)


def verb(argv: list[str]) -> tuple[int, Any, str]:
    """Run a verb with ``--json``; returns (exit code, parsed JSON or None, its error output)."""
    from aclarena.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*argv, "--json"])
        except SystemExit as e:  # a usage error, e.g. a verb this install does not have
            code = int(e.code or 0) if not isinstance(e.code, str) else 2
    text = out.getvalue().strip()
    data = None
    if text:
        with contextlib.suppress(ValueError):
            data = json.loads(text)
    return code, data, err.getvalue().strip()


def _require(name: str, code: int, data: Any, err: str) -> Any:
    if code != 0 or data is None:
        line = err.splitlines()[-1] if err else f"exit code {code}"
        raise AclarenaError(f"the demo's {name} step failed: {line}")
    return data


def run(args: argparse.Namespace) -> int:
    from aclarena.cli.train import print_phase_table
    from aclarena.progress import status
    from aclarena.train.config import load_config
    from aclarena.train.curriculum import run_curriculum
    from aclarena.train.presets import preset_path

    t_start = time.monotonic()
    out = Path(args.out)
    path = preset_path(args.preset)
    cfg = load_config(path, overrides=args.trl)
    if args.seed is not None:
        from dataclasses import replace

        if args.seed < 0:
            raise AclarenaError(f"--seed must be >= 0, got {args.seed}")
        cfg = replace(cfg, seed=args.seed)
    n = args.n if args.n is not None else (50 if args.preset == "mini" else 4)
    if n < 1:
        raise AclarenaError(f"-n must be >= 1, got {n}")
    show = not args.json
    steps: dict[str, float] = {}

    t = time.monotonic()
    trained = run_curriculum(cfg, out, show_progress=show, config_text=path.read_text(encoding="utf-8"))
    steps["train"] = time.monotonic() - t
    rows = trained.rows()
    if not args.json:
        print_phase_table(rows, title=f"mini-arena curriculum ({args.preset}) in {out}")

    run_dir = str(out)
    stage_ends = [r["name"] for r in rows if r["kind"] == "stage" and _is_stage_end(r["name"], rows)]
    sft_ends = [r["name"] for r in rows if r["kind"] == "stage" and r["name"] not in stage_ends]
    oracles = [r["name"] for r in rows if r["kind"] == "oracle" and _is_stage_end(r["name"], rows)]
    results: dict[str, Any] = {}

    def step(name: str, argv: list[str], what: str, *, required: bool = True) -> Any:
        t0 = time.monotonic()
        with status(f"demo: {what}", enabled=show):
            code, data, err = verb(argv)
        steps[name] = steps.get(name, 0.0) + time.monotonic() - t0
        if required:
            return _require(name, code, data, err)
        return data if code == 0 else {"error": err.splitlines()[-1] if err else f"exit code {code}"}

    base_eval = ["eval", "--run", run_dir, "-n", str(n), "--samples", "0", "--seeds", "0"]
    results["eval_chain"] = step("eval", [*base_eval, "--checkpoints", ",".join(["base", *stage_ends]),
                                          "--suites", "id,general"],
                                 f"evaluating base and {len(stage_ends)} stages on every suite", required=False)
    if sft_ends:
        results["eval_sft"] = step("eval", [*base_eval, "--checkpoints", ",".join(sft_ends), "--suites", "id"],
                                   f"evaluating {len(sft_ends)} SFT phase ends in domain", required=False)
    if oracles:
        results["eval_oracles"] = step("eval", [*base_eval, "--checkpoints", ",".join(oracles), "--suites", "id"],
                                       f"evaluating {len(oracles)} oracles in domain", required=False)
    if "seq-math" in stage_ends:
        from aclarena.probes.probe_set import list_probe_sets
        from aclarena.store import ResultsStore

        probe_n = "32" if args.preset == "mini" else "4"
        if "seq-math" not in list_probe_sets(ResultsStore(run_dir)):  # a rerun keeps the frozen generations
            results["probe"] = step("probe", ["probe", "--run", run_dir, "--ref", "seq-math", "--domain", "math",
                                              "-n", probe_n, "--max-new-tokens", "64"], "freezing seq-math's generations",
                                    required=False)
        results["tokens"] = step("tokens", ["tokens", "--run", run_dir, "--ref", "seq-math"],
                                 "token drift of later checkpoints on seq-math's generations", required=False)
    results["vectors"] = step("vectors", ["vectors", "--run", run_dir], "task vectors", required=False)
    results["displacement"] = step("displacement", ["displacement", "--run", run_dir], "displacement",
                                   required=False)
    results["forgetting"] = step("forgetting", ["forgetting", "--run", run_dir], "forgetting metrics",
                                 required=False)
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
        lead_n, lead_every = ("50", "5") if args.preset == "mini" else ("6", "2")
        results["lead_time"] = step("lead_time", ["monitor", "--run", run_dir, "--lead-time", "--stage", "ecom",
                                                  "-n", lead_n, "--eval-every", lead_every],
                                    "lead time of the drift warnings (retraining the ecom stage)", required=False)
    # consolidations, then the comparison table (docs/consolidation.md): the merges every time (seconds),
    # the methods that train (SDFT, MLE, MMOPD) with --full
    methods = ["merge-uniform", "merge-ties"] + (["sdft", "mle", "mmopd"] if args.full else [])
    made: list[dict[str, Any]] = []
    for method in methods:
        r = step("consolidate", ["consolidate", "--run", run_dir, "--method", method], f"consolidating ({method})",
                 required=False)
        made += (r or {}).get("outputs", [])
    shared = [o["checkpoint"] for o in made if o["method"] != "mle"]
    if shared:
        results["eval_consolidated"] = step("eval", [*base_eval, "--checkpoints", ",".join(shared),
                                                     "--suites", "id,general"],
                                            f"evaluating {len(shared)} consolidated models on every suite",
                                            required=False)
    for o in made:
        if o["method"] == "mle":  # an MLE expert answers only the contexts routed to it: its own domain's suites
            step("eval", [*base_eval, "--checkpoints", o["checkpoint"], "--suites", o["domain"]],
                 f"evaluating {o['checkpoint']} in its domain", required=False)
    results["compare"] = step("compare", ["compare", "--run", run_dir], "comparison table", required=False)
    summary = _plain(build_summary(rows, results, stage_ends, steps, time.monotonic() - t_start, args.preset, n))
    from aclarena.reproducibility import made_by

    cmd = f"aclarena-diag demo --preset {args.preset} --seed {cfg.seed} -n {n}" + (" --full" if args.full else "")
    summary["made_by"] = made_by(cmd)  # docs/results/demo.json is this file: its tables cite the command
    _store(out, summary)
    if args.json:
        print_json({"out": str(out), "summary": summary, "phases": rows})
    else:
        print_summary(summary, run_dir)
    return 0


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
        "forgetting": (forg or {}).get("summary"), "phase_times": phases,
        "lead_time": [{**{k: r.get(k) for k in ("domain", "predictor", "metric", "warn_step", "drop_step", "lead")},
                       "drop_reachable": drop_reachable_in(lead, r["domain"])} for r in (lead or {}).get("table", [])],
        "training_s": sum(p["time_s"] or 0.0 for p in phases), "step_times": steps, "total_s": total_s,
        "errors": errors, "study": STUDY,
        "comparison": results["compare"] if isinstance(results.get("compare"), dict) and "rows" in results["compare"]
        else None,
    }


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


def _score(x: Any, ci: Any = None) -> str:
    """A score with its 95% interval when known: ``0.26 [0.18, 0.35]``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def print_summary(s: dict[str, Any], run_dir: str) -> None:
    print()
    print_table([{"stage": r["stage"], "suite": r["suite"], "parent": r["parent"], "before": _score(r["parent_score"]),
                  "after SFT": _score(r["after_sft"]), "after stage": _score(r["score"], r.get("score_ci95")),
                  "oracle": _score(r["oracle"], r.get("oracle_ci95"))}
                 for r in s["stages"]],
                ["stage", "suite", "parent", "before", "after SFT", "after stage", "oracle"],
                title=f"each stage's in-domain score over its parent's (greedy, {s['eval_tasks_per_suite']} tasks)")
    e = s.get("ecom_effect")
    if e:
        print_table([{"suite": k, "before": _score(v["before"], v.get("before_ci95")),
                      "after": _score(v["after"], v.get("after_ci95")),
                      "lost": f"{v['lost']} / {v['gained']}" if "lost" in v else "-",
                      "p": fmt(v["p_drop"], 2) if "p_drop" in v else "-"}
                     for k, v in e.items() if isinstance(v, dict)],
                    ["suite", "before", "after", "lost", "p"],
                    headers=["suite", "before", "after", "lost / gained", "McNemar p (drop)"],
                    title=f"the ecom stage's effect on earlier skills ({e['before']} -> {e['after']})",
                    caption=f"study: {STUDY['ecom_effect']}")
    if s["sft_rl"]:
        print_table([{"stage": r["stage"], "SFT/RL": fmt(r["ratio"], 3) if r["ratio"] is not None else "-",
                      "‖Δθ‖ SFT": fmt(r["sft"], 3), "‖Δθ‖ RL": fmt(r["rl"], 3)} for r in s["sft_rl"]],
                    ["stage", "SFT/RL", "‖Δθ‖ SFT", "‖Δθ‖ RL"], title="SFT/RL parameter displacement per stage",
                    caption=f"study: {STUDY['sft_rl']}")
    drift = s["token_drift"]["checkpoints"]
    if drift:
        print_table([{"checkpoint": r["checkpoint"], "share": _score(r["kl_share_high"]),
                      "barely": _score(r["barely_moved_low"]), "kl": fmt(r["kl_mean"], 3)} for r in drift],
                    ["checkpoint", "share", "barely", "kl"],
                    headers=["checkpoint", "KL share at high-entropy positions", "low-entropy positions barely moved",
                             "mean KL"],
                    title=f"token drift on seq-math's generations (high = {s['token_drift']['high']})",
                    caption=f"study: {STUDY['high_entropy']}")
    if s.get("lead_time"):
        print_table([{**r, "warned": "never" if r["warn_step"] is None else r["warn_step"],
                      "drop": drop_label(r["drop_step"], r.get("drop_reachable")),
                      "lead": "-" if r["lead"] is None else r["lead"]} for r in s["lead_time"]],
                    ["domain", "predictor", "warned", "drop", "lead"],
                    headers=["domain", "predictor", "first warning (step)", "significant drop (step)", "lead (steps)"],
                    title="lead time of the drift warnings, ecom stage (aclarena-diag monitor --lead-time)")
    cmp = s.get("comparison")
    if cmp:
        suites = cmp["in_domain"] + cmp["out_of_domain"]
        print_table([{"model": r["label"], **{x: _score((r["cells"].get(x) or {}).get("mean")) for x in suites}}
                     for r in cmp["rows"]],
                    ["model", *suites], headers=["model", *(f"{x} (id)" if x in cmp["in_domain"] else x for x in suites)],
                    title="consolidations vs the sequential end point and the oracles (greedy accuracy)",
                    caption="study (Qwen3-8B): MMOPD the most balanced shared-weight model; SDFT recovers search and "
                            "loses IF; the uniform merge loses most on e-commerce and IF; MLE near each oracle in-domain")
    times = [{"phase": p["name"], "status": p["status"], "steps": p["steps"],
              "time": "-" if p["time_s"] is None else f"{p['time_s']:.1f} s"} for p in s["phase_times"]]
    print_table(times, ["phase", "status", "steps", "time"], title="phase times")
    other = ", ".join(f"{k} {v:.1f} s" for k, v in s["step_times"].items())
    print(f"total {s['total_s']:.1f} s ({other})")
    for k, v in s["errors"].items():
        print(f"note: the {k} step did not finish: {v}", file=sys.stderr)
    print(f"\nSummary as JSON: {Path(run_dir) / SUMMARY_FILE}")
    print(f"Explore: aclarena-diag dashboard --run {run_dir}")
