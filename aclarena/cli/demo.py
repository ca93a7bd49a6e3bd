"""``aclarena-diag demo``: the embedded default, the whole loop on the mini arena.

Trains a shipped curriculum (``quick`` by default: math then search, minutes on 2 cores; ``mini``: the
study's four stages) and its single-task oracles into ``--out``, scores the chain on the in-domain
suites and the general one (``aclarena-diag eval --run DIR --suites ood`` adds the out-of-domain
ones), signs every phase, measures task vectors, SFT and RL displacement and the continual-learning
metrics, merges and repairs, then prints which of the study's findings this run shows, with its own
numbers first and the study's beside them, and the dashboard command. A rerun skips every finished
phase and result. The work, and the summary stored in results.h5 (``demo/summary``) and in
``summary.json``, is :func:`aclarena.analysis.demo.run_demo`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aclarena.analysis.demo import STUDY, SUMMARY_FILE
from aclarena.cli._common import add_verb, fmt, print_json, print_phase_table, print_table
from aclarena.diagnostics.early_warning import drop_label
from aclarena.train.presets import DEFAULT, PRESETS


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "demo",
        help="the embedded default: train the mini curriculum and oracles, run every analysis, print a summary",
        examples=(
            "aclarena-diag demo                                 # the quick curriculum, minutes",
            "aclarena-diag demo --out runs/demo2 --seed 1",
            "aclarena-diag demo --preset mini --out runs/mini   # the study's four stages, over an hour",
            "aclarena-diag demo --preset tiny --out runs/tiny   # toy size, about 2 minutes",
        ),
        run_option=False,
    )
    p.add_argument("--out", "--run", dest="out", default="runs/demo", metavar="DIR",
                   help="run folder (default runs/demo); rerun to resume")
    p.add_argument("--preset", default=DEFAULT, metavar="NAME",
                   help=f"the curriculum: quick (default: math then search, minutes), mini (the study's four stages), "
                        f"tiny (every phase at toy size); one of {', '.join(PRESETS)}")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="curriculum seed (default: the preset's)")
    p.add_argument("-n", type=int, default=None, metavar="N",
                   help="evaluation tasks per suite (default 50; 4 for tiny)")
    p.add_argument("--trl", action="append", default=[], metavar="[sft.|rl.|base.]FIELD=VALUE",
                   help="trl override on top of the preset (repeatable)")
    p.add_argument("--full", action="store_true",
                   help="also the consolidations that train (SDFT, MLE, MMOPD), after the merges")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.demo import run_demo
    from aclarena.progress import status

    show = not args.json

    def on_trained(rows: list[dict[str, Any]]) -> None:
        if not args.json:
            print_phase_table(rows, title=f"mini-arena curriculum ({args.preset}) in {Path(args.out)}")

    @contextlib.contextmanager
    def report(what: str) -> Iterator[None]:
        with status(f"demo: {what}", enabled=show):  # a spinner on a terminal, start/end lines in a log
            yield

    result = run_demo(args.out, preset=args.preset, seed=args.seed, n=args.n, trl=args.trl, full=args.full,
                      show_progress=show, on_trained=on_trained, report=report)
    if args.json:
        print_json(result.to_dict())
    else:
        print_summary(result.summary, str(result.out))
    return 0


def _score(x: Any, ci: Any = None) -> str:
    """A score with its 95% interval when known: ``0.26 [0.18, 0.35]``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _print_signatures(block: dict[str, Any] | None) -> None:
    """Issue 31: one row per phase, its KL shares and barely-moved fraction with intervals; then a line for
    each update without a signature (e.g. an RL phase that did not move)."""
    if not block:
        return
    for line in block.get("failed") or []:
        print(f"warning: no drift signature for {line}", file=sys.stderr)
    if not block["updates"]:
        return

    def ci(v: list[float]) -> str:
        return f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]"

    k = block["settings"].get("first_k")
    print_table([{"update": r["update"], "kind": r["kind"], "high": ci(r["kl_share_high"]),
                  "barely": ci(r["barely_moved_low"]), "first": f"{ci(r['kl_share_first_k'])} ({r['first_k_share']:.2f})",
                  "area": ci(r["concentration_area"])} for r in block["updates"]],
                ["update", "kind", "high", "barely", "first", "area"],
                headers=["update", "kind", "KL share top 6%", "barely moved (low)", f"KL share first {k} (chance)",
                         "conc. area"],
                title="drift signature of each phase on its parent's own generations (95% intervals over sequences)",
                caption=f"study: {STUDY['high_entropy']}")


def _print_findings(s: dict[str, Any]) -> None:
    """The study's findings as found on this run, one line each: shown, not shown, or not measured."""
    found = s.get("findings") or []
    if not found:
        return
    print(f"\nwhat this run shows ({s['preset']}, seed {s.get('seed', '-')}, {s['eval_tasks_per_suite']} tasks per suite):")
    for f in found:
        mark = {True: "shown", False: "NOT shown", None: "not measured"}[f["shown"]]
        print(f"- {mark}: {f['line']}")
        if f.get("study"):
            print(f"    study (Qwen3-8B): {f['study']}")


def print_summary(s: dict[str, Any], run_dir: str) -> None:
    print()
    print_table([{"stage": r["stage"], "suite": r["suite"], "parent": r["parent"], "before": _score(r["parent_score"]),
                  "after SFT": _score(r["after_sft"]), "after stage": _score(r["score"], r.get("score_ci95")),
                  "oracle": _score(r["oracle"], r.get("oracle_ci95"))}
                 for r in s["stages"]],
                ["stage", "suite", "parent", "before", "after SFT", "after stage", "oracle"],
                title=f"each stage's in-domain score over its parent's (greedy, {s['eval_tasks_per_suite']} tasks)")
    effects = [e for e in s.get("stage_effects") or [] if "error" not in e]
    if effects:
        print_table([{"stage": e["stage"], "suite": e["suite"], "before": _score(e["before_score"], e.get("before_ci95")),
                      "after": _score(e["after_score"], e.get("after_ci95")),
                      "lost": f"{e['lost']} / {e['gained']} of {e['n']}", "p": fmt(e["p_drop"], 2)} for e in effects],
                    ["stage", "suite", "before", "after", "lost", "p"],
                    headers=["stage", "earlier skill", "before", "after", "lost / gained", "McNemar p (drop)"],
                    title="each later stage's effect on earlier skills, item by item (one-sided exact paired test)",
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
    _print_signatures(s.get("signatures"))
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
    _print_findings(s)
    for k, v in s["errors"].items():
        print(f"note: the {k} step did not finish: {v}", file=sys.stderr)
    print(f"\nSummary as JSON: {Path(run_dir) / SUMMARY_FILE}")
    print(f"Explore: aclarena-diag dashboard --run {run_dir}")
