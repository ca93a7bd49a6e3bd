"""Result tables of the README and docs, generated from committed result files (results as data).

Every table of measured numbers in ``README.md`` and ``docs/*.md`` sits between two marker
comments that name the table and the file it comes from::

    <!-- results: demo-stages from docs/results/demo.json -->
    | stage | ... |
    <!-- /results -->

``python tools/docs_results.py`` (``make docs-results``) re-renders every block from its
file; ``--check`` only says which blocks differ (exit 1), which is what the unit test runs. The
files under ``docs/results/`` are strict JSON (no NaN or infinities) written by the commands
that measured them: ``summary.json`` of ``aclarena-diag demo`` (copy it to
``docs/results/demo.json``) and ``findings.json`` of ``aclarena-diag study``
(``docs/results/findings.json``). A block whose file is not committed says which file and
command would fill it, instead of numbers nobody can trace.

A repository tool, not part of the installed package: ``REPO`` is the checkout this file sits in.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aclarena import jsonl
from aclarena.diagnostics.early_warning import PREDICTOR_LABELS, drop_label

REPO = Path(__file__).resolve().parents[1]
RESULTS = "docs/results"
MARKDOWN = ("README.md", "docs/*.md")
BLOCK_RE = re.compile(
    r"(?P<open><!-- results: (?P<table>[a-z0-9-]+) from (?P<source>[^\s>]+) -->\n)(?P<body>.*?)(?P<close><!-- /results -->)",
    re.DOTALL,
)

DEMO_CMD = ("aclarena-diag demo --out runs/demo && cp runs/demo/summary.json docs/results/demo.json "
            "&& make docs-results")
TIMING_CMD = "python benchmarks/demo_time.py --json-out docs/results/demo_timing.json && make docs-results"
ORDERS_CMD = ("aclarena-diag study --orders pairs --config examples/quick.toml --run runs/orders-quick --seeds 3 "
              "&& cp runs/orders-quick/orders.json docs/results/orders_quick.json && make docs-results")
ORDERS_MINI_CMD = ("benchmarks/orders_mini.sh runs/orders && cp runs/orders/orders_latin.json "
                   "docs/results/orders_mini_latin.json && make docs-results")
STUDY_TIMING_CMD = ("python benchmarks/study_time.py --root runs/study-time --json-out docs/results/study_timing.json "
                    "&& make docs-results")
STUDY_CMD = ("aclarena-diag study --run runs/study --seeds 3 && cp runs/study/findings.json "
             "docs/results/findings.json && make docs-results")


class ResultsError(ValueError):
    """A result file or a marker block that cannot be rendered (one line: what and where)."""


def strict_json(path: Path) -> Any:
    """Read ``path`` as strict JSON (:func:`aclarena.jsonl.strict_json`), failing as a :class:`ResultsError`."""
    try:
        return jsonl.strict_json(path)
    except jsonl.StrictJsonError as e:
        raise ResultsError(str(e)) from None


def _num(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{float(x):.{digits}f}"


def _with_ci(x: Any, ci: Any) -> str:
    """``0.26 [0.18, 0.35]``: a score and its 95% interval (the interval only where recorded)."""
    return _num(x) + (f" [{_num(ci[0])}, {_num(ci[1])}]" if ci and _num(x) != "-" else "")


def _p(p: Any) -> str:
    """A p-value to two significant digits."""
    return "-" if p is None else f"{float(p):.2g}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _provenance(data: Mapping[str, Any], source: str, command: str) -> str:
    made = data.get("made_by") or {}
    bits = []
    if made.get("command"):
        bits.append(f"`{made['command']}`")
    if made.get("date"):
        bits.append(str(made["date"]))
    if made.get("machine"):
        bits.append(str(made["machine"]))
    how = ", ".join(bits) if bits else f"`{command.split(' && ')[0]}`"
    return f"\n*Generated from `{source}` (made by {how}) by `make docs-results`.*\n"


# --- renderers: one per table name ------------------------------------------------------------


def demo_stages(data: Mapping[str, Any]) -> str:
    """Each stage's in-domain score over its parent's, after its SFT, after the stage, its oracle."""
    rows = [["base", "", "", "", "", "", _num(data.get("base_general"))]] if "base_general" in data else []
    for r in data["stages"]:
        parent = _num(r.get("parent_score")) + (" (base)" if r.get("parent") == "base" else "")
        rows.append([r["stage"], r["suite"], parent, _num(r.get("after_sft")),
                     _with_ci(r.get("score"), r.get("score_ci95")), _with_ci(r.get("oracle"), r.get("oracle_ci95")),
                     _num(r.get("general"))])
    return _table(["stage", "in-domain suite", "parent's score", "after its SFT", "after the stage", "its oracle",
                   "general after the stage"], rows)


def demo_lead_time(data: Mapping[str, Any]) -> str:
    """The drift monitor's lead time per domain and predictor (the demo's ecom stage)."""
    rows = []
    for r in data.get("lead_time") or []:
        rows.append([r["domain"], PREDICTOR_LABELS.get(r["predictor"], r["predictor"]),
                     "never" if r.get("warn_step") is None else str(r["warn_step"]),
                     drop_label(r.get("drop_step"), r.get("drop_reachable")),
                     "-" if r.get("lead") is None else str(r["lead"])])
    return _table(["domain", "predictor", "first warning (step)", "significant drop (step)", "lead (steps)"], rows)


def demo_comparison(data: Mapping[str, Any]) -> str:
    """The consolidation comparison (``compare``) of the demo's run, greedy accuracy per suite."""
    cmp = data.get("comparison")
    if not cmp:
        raise ResultsError("the demo summary has no `comparison` (the compare step did not run)")
    suites = list(cmp["in_domain"]) + list(cmp["out_of_domain"])
    rows = [[r["label"], *(_num((r["cells"].get(s) or {}).get("mean")) for s in suites)] for r in cmp["rows"]]
    return _table(["model", *suites], rows)


def demo_forgetting(data: Mapping[str, Any]) -> str:
    """The e-commerce stage's effect on the earlier skills, then the continual-learning metrics."""
    eff = data.get("ecom_effect") or {}
    suites = [s for s in ("math/id", "search/id", "general") if s in eff]
    paired = any("lost" in (eff[s] or {}) for s in suites)  # item-by-item counts recorded (newer summaries)
    headers = ["suite (before → after the e-commerce stage)", "before", "after"]
    headers += ["lost / gained", "McNemar p (drop)"] if paired else []
    rows = []
    for s in suites:
        e = eff[s] or {}
        row = [f"{s} ({eff.get('before', '?')} → {eff.get('after', '?')})", _with_ci(e.get("before"), e.get("before_ci95")),
               _with_ci(e.get("after"), e.get("after_ci95"))]
        if paired:
            row += [f"{e['lost']} / {e['gained']} of {e['n']}" if "lost" in e else "-", _p(e.get("p_drop"))]
        rows.append(row)
    out = _table(headers, rows) if rows else ""
    cl = data.get("forgetting") or {}
    names = {"average_accuracy": "ACC (mean final in-domain score)", "backward_transfer": "BWT (backward transfer)",
             "forward_transfer": "FWT (forward transfer)", "forgetting_max": "forgetting (mean max drop)",
             "retention_vs_oracle": "retention vs oracle"}
    cl_rows = [[label, _num(cl.get(k))] for k, label in names.items() if k in cl]
    return out + ("\n" + _table(["continual-learning metric", "value"], cl_rows) if cl_rows else "")


def demo_displacement(data: Mapping[str, Any]) -> str:
    """SFT vs RL parameter displacement per stage (‖Δθ‖₂ of each phase's update)."""
    rows = [[r["stage"], _num(r.get("sft")), _num(r.get("rl"), 3),
             "undefined (RL moved 0)" if r.get("ratio") is None else f"{_num(r.get('ratio'), 1)}×"]
            for r in data.get("sft_rl") or []]
    overall = data.get("sft_rl_overall")
    if overall is not None:
        rows.append(["pooled over stages with both phases", "", "", f"{_num(overall, 1)}×"])
    return _table(["stage", "SFT ‖Δθ‖₂", "RL ‖Δθ‖₂", "SFT / RL"], rows)


def demo_tokens(data: Mapping[str, Any]) -> str:
    """Token drift of later checkpoints on the reference's generations (tokens --ref seq-math)."""
    td = data.get("token_drift") or {}
    rows = [[r["checkpoint"], _num(r.get("kl_share_high")), _num(r.get("barely_moved_low")), _num(r.get("kl_mean"), 3)]
            for r in td.get("checkpoints") or []]
    high = td.get("high")  # the tokens verb's rule for "high entropy", e.g. "q=0.06" (the top 6%)
    rule = f"{float(high[2:]):.0%}" if isinstance(high, str) and high.startswith("q=") else str(high)
    return _table(["checkpoint", f"share of KL at the top {rule} entropy positions",
                   "low-entropy positions barely moved", "mean KL (nats)"], rows)


def demo_signatures(data: Mapping[str, Any]) -> str:
    """The drift signature of each phase and stage on its parent's own generations, with intervals."""
    block = data.get("signatures")
    if not block:
        return "*No drift signatures in this file: the demo's signatures step did not run (`errors` says why).*\n"

    def cell(v: Any) -> str:
        return _with_ci(v[0], v[1:]) if isinstance(v, list) and v[1] is not None else _num(v[0] if v else None)

    rows = [[r["update"], r["kind"], r["domain"], str(r["n_sequences"]), cell(r["kl_share_high"]),
             cell(r["barely_moved_low"]), cell(r["kl_share_first_k"]), _num(r.get("first_k_share"))]
            for r in block.get("updates", [])]
    k = (block.get("settings") or {}).get("first_k", 12)
    none = "".join(f"\n*No signature: {f}.*\n" for f in block.get("failed") or [])
    return _table(["update", "kind", "domain", "sequences", "share of KL at the top 6% entropy positions",
                   "low-entropy positions barely moved", f"share of KL at the first {k} reply tokens",
                   f"first {k} tokens' share of positions"], rows) + none


def demo_times(data: Mapping[str, Any]) -> str:
    """Wall time of the demo's parts (this invocation) and of each training phase (when it was trained)."""
    rows = [[k, f"{_num(v, 0)} s"] for k, v in (data.get("step_times") or {}).items()]
    rows.append(["total (this invocation)", f"{_num(data.get('total_s'), 0)} s"])
    phases = [[p["name"], "-" if p.get("steps") is None else str(p["steps"]),
               "-" if p.get("time_s") is None else f"{_num(p['time_s'], 0)} s", p.get("status", "")]
              for p in data.get("phase_times") or []]
    return (_table(["part", "wall time"], rows) + "\n"
            + _table(["phase", "steps", "training time", "status"], phases))


def demo_findings(data: Mapping[str, Any]) -> str:
    """The default demo's findings, one line each (shown, not shown, not measured) with the study's beside, and
    the wall time of the invocation that made them."""
    mark = {True: "shown", False: "**not shown**", None: "not measured"}
    rows = [[mark[f["shown"]], f["line"], f.get("study") or ""] for f in data.get("findings") or []]
    t = data.get("timing") or {}
    wall = (f"\nWall time of the whole invocation: **{_num(t.get('wall_s'), 0)} s** (load average "
            f"{t.get('load_before', '?')} before); training {_num(data.get('training_s'), 0)} s.\n") if t else ""
    return _table(["", f"this run ({data.get('preset')}, seed {data.get('seed', '-')}, "
                       f"{data.get('eval_tasks_per_suite')} tasks per suite)", "the study (Qwen3-8B), beside"], rows) + wall


def findings_table(data: Mapping[str, Any]) -> str:
    """The study's findings beside the mini arena's: mean ± spread over seeds per row."""
    n = len(data.get("seeds") or [])
    rows = []
    for r in data["rows"]:
        vals = [v for v in r.get("values", []) if v is not None]
        if r.get("mean") is None:
            mini = "-"
        else:
            spread = f" ± {_num(r.get('spread'), r.get('digits', 2))}" if r.get("spread") is not None else ""
            mini = f"{_num(r['mean'], r.get('digits', 2))}{spread}"
        digits = r.get("digits", 2)
        ivs = r.get("intervals") or [None] * len(r.get("values", []))
        per_seed = ", ".join(
            "-" if v is None else _num(v, digits) + ("" if not iv or None in iv
                                                     else f" [{_num(iv[0], digits)}, {_num(iv[1], digits)}]")
            for v, iv in zip(r.get("values", []), ivs, strict=True))
        rows.append([r["finding"], r["quantity"], r.get("study") or "-", mini, per_seed,
                     f"{len(vals)}/{n}" if n else str(len(vals))])
    return _table(["finding", "quantity", "study", "mini arena (mean ± std over seeds)", "per seed",
                   "seeds measured"], rows)


def study_timing(data: Mapping[str, Any]) -> str:
    """Issue 42: the old and the new study side by side (benchmarks/study_time.py), per part and in all."""
    jobs = data["jobs"]
    old, new = jobs["old"], jobs["new"]
    parts = list(dict.fromkeys([*old["parts_s"], *new["parts_s"]]))

    def ratio(a: Any, b: Any) -> str:
        return "-" if a is None or not b else f"{a / b:.2f}"

    def secs(x: Any) -> str:
        return "-" if x is None else f"{x:,.0f} s"

    def at_stop(job: Mapping[str, Any]) -> float:  # a stopped segment's wall time past its finished parts
        return sum(g["wall_s"] - sum((g.get("parts_s") or {}).values()) for g in job["segments"]
                   if g.get("status") == "killed")

    st = data["settings"]
    # one seed: the study runs no validation (it fits on one seed and reports on the others)
    unrun = {"validation"} if st["seeds"] < 2 else set()
    rows = [[k, secs(old["parts_s"].get(k)), secs(new["parts_s"].get(k)),
             ratio(new["parts_s"].get(k), old["parts_s"].get(k))] if k not in unrun else
            [k, "not run (one seed)", "not run (one seed)", "-"] for k in parts]
    if at_stop(old) or at_stop(new):
        rows.append(["part in progress at a stop (its time when it finished is above)", secs(at_stop(old)),
                     secs(at_stop(new)), "-"])
    rows.append(["**wall time, start to end**", f"**{secs(old['wall_s'])}**", f"**{secs(new['wall_s'])}**",
                 f"**{_num(data.get('ratio_new_old'))}**"])
    segs = max(len(old["segments"]), len(new["segments"]))
    return (_table(["part", f"old: {st['old_commit'][:7]}, {st['old_config']}",
                    f"new: {st['new_commit'][:7]}, {st['new_config']}", "new / old"], rows)
            + f"\n{st['seeds']} seed{'' if st['seeds'] == 1 else 's'}, -n {st['n']}, --lead-n {st['lead_n']}, "
            f"--lead-stage {st['lead_stage']}; "
            f"{st['threads']} torch thread(s) per study, the two started together; {segs} segment(s) "
            f"(a study stopped part-way resumes and reads back what it finished; a part's time adds up its "
            f"segments, the wall time every segment's). Target: new / old at most {data['target_ratio']}.\n")


def study_by_seed(data: Mapping[str, Any]) -> str:
    """Issue 42: the study timed one seed at a time (benchmarks/study_by_seed.py), each seed side by side."""
    rows = [[str(s["seed"]), s["date"], s["new_commit"][:7], f"{s['study_s']['old']:,.0f} + {s['validation_s']['old']:,.0f}",
             f"{s['study_s']['new']:,.0f} + ~{s['validation_s']['new']:,.0f}", f"{s['old_s']:,.0f} s",
             f"{s['new_s']:,.0f} s", f"{s['ratio']:.2f}"] for s in data["seeds"]]
    lo, hi = data["ratio_range"]
    rows.append([f"**{len(data['seeds'])} seeds**", "", "", "", "", f"**{data['old_s']:,.0f} s**",
                 f"**{data['new_s']:,.0f} s**", f"**{data['ratio_new_old']:.2f}** (seeds {lo:.2f}-{hi:.2f})"])
    st = data["seeds"][0]["settings"]
    return (_table(["seed", "measured", "new commit", "old: study + validation (s)", "new: study + validation (s)",
                    "old", "new", "new / old"], rows)
            + f"\nOld: {st['old_commit'][:7]} with {st['old_recipe']}; new: {st['new_recipe']} (each seed's copy with "
            f"its `[run] seed`). -n {st['n']}, --lead-n {st['lead_n']}, --lead-stage {st['lead_stage']}, "
            f"{st['threads']} torch thread(s) per side, both sides of a seed started together (its study, then its "
            f"validation). {data['how']}. One run per seed, no interval beyond the seeds' range. Target: new / old at "
            f"most {data['target_ratio']}.\n")


def monitor_validation(data: Mapping[str, Any]) -> str:
    """The early warning fitted on one seed and reported on the others."""
    v = data.get("validation")
    if not v:
        return ("*No held-out validation in this file: the study did not measure the monitor's series per seed "
                "(aclarena.diagnostics.warning_validation does the maths).*\n")
    if v.get("status", "ok") != "ok":
        return f"*No held-out validation in this file: {v.get('reason') or 'not run'}.*\n"
    rows = []
    for r in v["predictors"]:
        rows.append([PREDICTOR_LABELS.get(r["predictor"], r["predictor"]), _num(r.get("threshold"), 3),
                     _num(r.get("lead_mean"), 1), str(r.get("detected", 0)), str(r.get("false_alarms", 0)),
                     str(r.get("misses", 0)), _num(r.get("r2"), 2)])
    table = _table(["predictor", "threshold (fit on seed " + ",".join(str(s) for s in v.get("fit_seeds", [])) + ")",
                    "mean lead (steps)", "drops warned", "false alarms", "misses", "R² vs drop"], rows)
    held = v.get("series") or {}
    if v.get("held_out_seeds"):
        table += (f"\nReported on seeds {', '.join(str(s) for s in v['held_out_seeds'])} only"
                  + (f" ({held.get('held_out')} domain series, {held.get('held_out_drops')} with a significant drop)"
                     if held else "")
                  + "; R² over every evaluation of every seed.\n")
    for note in v.get("notes") or []:
        table += f"\n*Note: {note}.*\n"
    return table


def _frac(k: Any, n: Any) -> str:
    return "-" if not n else f"{k}/{n}"


def warning_validation(data: Mapping[str, Any]) -> str:
    """Issue 44: every predictor and the two baselines, thresholds fitted on the fit cells, judged on the held-out ones."""
    v = data.get("validation") or {}
    if not v.get("rows"):
        return "*No validation in this file: no cell was measured.*\n"
    rows = []
    for r in [*v["rows"], *v["baselines"]]:
        h = r["held_out"]
        lead = "-" if h.get("lead_median") is None else (
            f"{_num(h['lead_median'], 1)} [{h['lead_range'][0]}, {h['lead_range'][1]}]")
        rows.append([PREDICTOR_LABELS.get(r["predictor"], r["predictor"]) + (" **(beats both baselines)**"
                                                                            if r["predictor"] in v.get("beats", []) else ""),
                     "-" if r.get("threshold") is None else f"{r['threshold']:.3g}",
                     _frac(h["detected"], h["drops"]) + (f" [{_num(h['detection_ci'][0])}, {_num(h['detection_ci'][1])}]"
                                                         if h.get("detection_ci") else ""),
                     lead, f"{h['late']} / {h['missed']}",
                     _frac(h["false_alarms"], h["without_drop"]) + (
                         f" [{_num(h['false_alarm_ci'][0])}, {_num(h['false_alarm_ci'][1])}]"
                         if h.get("false_alarm_ci") else ""),
                     _num(h.get("score"))])
    fit, held = v["fit"], v["held_out"]
    out = _table(["predictor", "threshold (fit cells)", "held-out drops warned in time [95% CI]",
                  "lead, steps: median [range]", "late / never", "false alarms per stage without a drop [95% CI]",
                  "score (detection - false-alarm rate)"], rows)
    out += (f"\nThresholds fitted on {', '.join(fit['cells'])} ({fit['drops']} of {fit['series']} with a significant "
            f"drop); judged on {', '.join(held['cells'])} ({held['drops']} with a significant drop, "
            f"{held['without_drop']} without). "
            + ("Predictors whose held-out score beats both baselines: "
               + ", ".join(PREDICTOR_LABELS.get(b, b) for b in v["beats"]) + "."
               if v.get("beats") else "**No predictor beats both baselines on the held-out cells.**") + "\n")
    cells = data.get("cells") or {}
    crow = []
    for c in v.get("cells", []):
        res = cells.get(c["cell"]) or {}
        pts = (res.get("ground_truth") or {}).get(c["domain"]) or []
        n = (data.get("settings") or {}).get("n")
        start = pts[0] if pts else {}
        end = pts[-1] if pts else {}
        before = "-" if c["drop_step"] is None else str(sum(1 for q in pts[1:] if q["step"] < c["drop_step"]))
        cost = res.get("cost") or {}
        crow.append([c["cell"], "fit" if c["fit"] else "held out",
                     f"{round(start.get('accuracy', 0) * (n or 0))}/{n}" if pts and n else "-",
                     f"{_num(start.get('accuracy'))} -> {_num(end.get('accuracy'))}",
                     drop_label(c["drop_step"]), before, str(len(pts)),
                     f"{_num(cost.get('ground_truth_s'), 0)} s / {_num((cost.get('monitor_checks_s') or 0) + (cost.get('monitor_setup_s') or 0), 0)} s"])
    out += "\n" + _table(["cell", "split", "math solved at the stage start", "math accuracy start -> end",
                          "first significant drop (step)", "evaluations before it", "evaluations",
                          "ground truth / monitor (wall)"], crow)
    c = data.get("costs") or {}

    def rng(x: Any, digits: int = 0) -> str:
        return "-" if not x else f"{_num(x['median'], digits)} s [{_num(x['min'], digits)}, {_num(x['max'], digits)}]"

    if c:
        out += (f"\nCost per cell (median [range] over {c.get('cells')} cells, wall seconds on the shared machine): "
                f"ground truth {rng(c.get('ground_truth_s'))} ({rng(c.get('per_evaluation_s'), 1)} per evaluation of "
                f"{(data.get('settings') or {}).get('n')} items), monitor set-up and checks {rng(c.get('monitor_s'))} "
                f"({rng(c.get('per_check_s'), 2)} per check), the whole cell {rng(c.get('cell_wall_s'))}"
                + (f"; CPU {rng(c.get('cell_cpu_s'))} per cell, {_num(c.get('cpu_s_total'), 0)} s in all"
                   if c.get("cell_cpu_s") else "") + ".\n")
    return out


def warning_validation_line(data: Mapping[str, Any]) -> str:
    """docs/results.md's one paragraph on issue 44's validation: the best predictor, the baselines, the verdict
    (its link is relative to docs/)."""
    v = data.get("validation") or {}
    if not v.get("rows"):
        return "*No validation in this file: no cell was measured.*\n"
    held = v["held_out"]

    def said(r: Mapping[str, Any]) -> str:
        h = r["held_out"]
        lead = "" if h.get("lead_median") is None else (
            f", lead {_num(h['lead_median'], 1)} steps [{h['lead_range'][0]}, {h['lead_range'][1]}]")
        name = PREDICTOR_LABELS.get(r["predictor"], r["predictor"]).removeprefix("baseline: ")
        return (f"{name}: {h['detected']}/{h['drops']} drops warned in "
                f"time{lead}, {h['false_alarms']}/{h['without_drop']} false alarms")

    def score(r: Mapping[str, Any]) -> float:
        x = r["held_out"].get("score")
        return -math.inf if x is None else float(x)

    best = max(v["rows"], key=score)
    first, loss = v["baselines"]
    verdict = ("beats both baselines" if v.get("beats") else "**no predictor beats both baselines**")
    ties = [PREDICTOR_LABELS.get(b["predictor"], b["predictor"]).removeprefix("baseline: ") for b in (first, loss)
            if score(b) == score(best)]
    if ties and not v.get("beats"):
        verdict += f" (the best ties {' and '.join(ties)} on its score)"
    return (f"- **The early warning, held out with negative controls** (issue 44; quick arena, {held['drops']} held-out "
            f"stages with a significant drop and {held['without_drop']} without; thresholds fitted on the seed-0 stages): "
            f"best {said(best)}; baselines {said(first)}, {said(loss)}: {verdict} "
            f"([monitor.md](monitor.md#validation-lead-times-and-false-alarms-on-held-out-runs), "
            f"`warning_validation.json`).\n")


def _ci_row(r: Mapping[str, Any] | None, digits: int = 2) -> str:
    """``-0.12 [-0.30, 0.06]``: a mean over seeds and its 95% t interval (the interval where there is one)."""
    if not r or r.get("mean") is None:
        return "-"
    iv = f" [{_num(r['low'], digits)}, {_num(r['high'], digits)}]" if r.get("low") is not None else ""
    return _num(r["mean"], digits) + iv


def orders_table(data: Mapping[str, Any]) -> str:
    """An order study (``study --orders``): each pair's interference and transfer, each order's final average
    accuracy and BWT, per seed and as a mean with its 95% t interval over seeds, then the findings in words."""
    f = data["findings"]
    pairs = {(p["first"], p["second"]): p for p in data.get("pairs") or []}
    rows = []
    for r in f["matrix"]["pairs"]:
        p = pairs.get((r["first"], r["second"]), {})
        rows.append([f"{r['first']} → {r['second']}", _ci_row(r), ", ".join(_num(v) for v in r["values"]),
                     _ci_row(r["transfer"]), ", ".join(_p(x) for x in p.get("p_drop", [])) or "-",
                     *(", ".join(_num(x, d) for x in p.get(k, [])) or "-"
                       for k, d in (("cos", 2), ("sft_rl", 1), ("kl_share_high", 2)))])
    text = _table(["pair a → b", "interference (a's drop)", "per seed", "transfer (b's gain)",
                   "McNemar p of a's drop, per seed", "cos of the two updates, per seed", "b's SFT/RL ‖Δθ‖, per seed",
                   "b's KL share at the top 6% entropy positions, per seed"], rows)
    return text + "\n" + _orders_ranked(f) + _findings_lines(data, skip=("    ",))


def _orders_ranked(f: Mapping[str, Any], predicted: bool = False) -> str:
    """Each order's final average accuracy and BWT (mean [95% t interval], BWT per seed), and with ``predicted``
    the BWT the pairs' interference predicts for it."""
    pred = {tuple(r["order"]): r.get("predicted_bwt") for r in f["pairwise_prediction"]["orders"]}
    rows = [[" → ".join(o["order"]), _ci_row(o["final_avg"]), _ci_row(o["bwt"]),
             ", ".join(_num(v) for v in o["bwt"]["values"]), *([_ci_row(pred.get(tuple(o["order"])))] if predicted
                                                              else [])] for o in f["orders"]["orders"]]
    return _table(["order", "final average accuracy", "BWT", "BWT per seed",
                   *(["BWT predicted by the pairs' interference"] if predicted else [])], rows)


def _findings_lines(data: Mapping[str, Any], skip: tuple[str, ...]) -> str:
    """The order study's findings in words as a list, but the lines starting with ``skip``."""
    from aclarena.diagnostics.orders import summary_lines

    return "\n" + "\n".join(f"- {line.strip()}" for line in summary_lines(data)[1:] if not line.startswith(skip)) + "\n"


def orders_ranking(data: Mapping[str, Any]) -> str:
    """An order study of full orders (``latin``, ``all``): the harm each stage causes with position controlled,
    each domain's final forgetting by its position, the orders ranked, and the pairwise matrix's prediction of each order's BWT, then the findings in words but
    the pairs' (the pairs design's table holds them)."""
    f = data["findings"]
    h = f["harm"]
    share = h.get("p_most_harmful") or {}
    text = _table([f"stage (positions {', '.join(map(str, h.get('positions', [])))})", "forgetting it causes",
                   "per seed", "most harmful in (seed resamples)"],
                  [[r["stage"], _ci_row(r), ", ".join(_num(v) for v in r["values"]),
                    "-" if share.get(r["stage"]) is None else f"{share[r['stage']]:.0%}"] for r in h.get("stages", [])])
    by = {(r["domain"], r["position"]): r for r in f.get("by_position") or []}
    positions = sorted({q for _, q in by})
    if by:
        text += "\n" + _table(["domain's final forgetting, by its position", *map(str, positions)],
                              [[d, *(_ci_row(by.get((d, q))) for q in positions)]
                               for d in dict.fromkeys(d for d, _ in by)])
    return text + "\n" + _orders_ranked(f, predicted=True) + _findings_lines(data, skip=("    ", "  interference"))


def test_tiers(data: Mapping[str, Any]) -> str:
    """Each test tier's command, its test counts and its wall time."""
    rows = []
    for r in data["tiers"]:
        counts = ("-" if r.get("passed") is None
                  else f"{r['passed']} passed, {r.get('skipped', 0)} skipped, {r.get('deselected', 0)} deselected")
        rows.append([r["tier"], f"`{r['command']}`", counts, f"{_num(r.get('seconds'), 0)} s", r.get("source", "")])
    return _table(["tier", "command", "tests", "wall time", "source"], rows)


TESTS_CMD = "python -m pytest tests/unit, then make test-fast, timed (docs/testing.md)"
VALIDATION_CMD = ("python benchmarks/warning_validation.py --from runs/demo --out runs/val "
                  "--json-out docs/results/warning_validation.json && make docs-results")

def dashboard_latency(data: Mapping[str, Any]) -> str:
    """benchmarks/dashboard_compare.py: each page's controls, today's main beside this code, medians."""
    def ms(r: Any) -> str:
        if not isinstance(r, Mapping) or not r.get("n"):
            return "-"
        return (f"{r['median_ms']:,.0f} ms ({r['min_ms']:,.0f}-{r['max_ms']:,.0f}; server {r['server_ms']:,.0f}, "
                f"draw {r['draw_ms']:,.0f}, {r['kB']:,.0f} kB)")

    def load(r: Any) -> str:
        return "-" if not isinstance(r, Mapping) or not r.get("n") else \
            f"{r['median_ms']:,.0f} ms ({r['min_ms']:,.0f}-{r['max_ms']:,.0f})"

    rows = []
    for page, controls in data["pages"].items():
        for control, r in controls.items():
            if not isinstance(r, Mapping):
                continue
            n = max(r.get("base", {}).get("n", 0), r.get("head", {}).get("n", 0))
            if control == "load":  # navigation to every figure drawn: not a control change, no target
                rows.append([page, "page load", str(n), load(r.get("base")), load(r.get("head")),
                             _num(r.get("head/base")), "-"])
                continue
            meets = r.get("head meets the target")
            rows.append([page, control, str(n), ms(r.get("base")), ms(r.get("head")), _num(r.get("head/base")),
                         f"{controls['target_ms']:.0f} ms" + ("" if meets is None else " (met)" if meets else
                                                               " (missed)")])
    m = data["machine"]
    trees = data["trees"]
    return (_table(["page", "control", "n", f"main ({trees.get('base', '-')})", f"this code ({trees.get('head', '-')})",
                    "ratio", "target"], rows)
            + f"\nLoad average {m['load_before'][0]:.1f} before, {m['load_after'][0]:.1f} after, on {m['cpus']} CPUs; "
            f"{data['seconds']:,} s in all; {m['note']}. Not measured: "
            + "; ".join(f"{k} ({v})" for k, v in data.get("not_measured", {}).items()) + ".\n")


RENDERERS: dict[str, tuple[Callable[[Mapping[str, Any]], str], str]] = {
    "dashboard-latency": (dashboard_latency, "python benchmarks/dashboard_compare.py --run RUN --base MAIN "
                                             "--rounds 4 --changes 4 --json docs/results/dashboard_latency.json "
                                             "&& make docs-results"),
    "demo-stages": (demo_stages, DEMO_CMD),
    "demo-lead-time": (demo_lead_time, DEMO_CMD),
    "demo-comparison": (demo_comparison, DEMO_CMD),
    "demo-forgetting": (demo_forgetting, DEMO_CMD),
    "demo-displacement": (demo_displacement, DEMO_CMD),
    "demo-tokens": (demo_tokens, DEMO_CMD),
    "demo-times": (demo_times, DEMO_CMD),
    "demo-signatures": (demo_signatures, DEMO_CMD),
    "demo-findings": (demo_findings, TIMING_CMD),
    "findings": (findings_table, STUDY_CMD),
    "monitor-validation": (monitor_validation, STUDY_CMD),
    "study-timing": (study_timing, STUDY_TIMING_CMD),
    "study-by-seed": (study_by_seed, "python benchmarks/study_by_seed.py --seed TIMING VALIDATION ... --json-out FILE "
                                     "&& make docs-results"),
    "test-tiers": (test_tiers, TESTS_CMD),
    "warning-validation": (warning_validation, VALIDATION_CMD),
    "warning-validation-line": (warning_validation_line, VALIDATION_CMD),
    "orders": (orders_table, ORDERS_CMD),
    "orders-ranking": (orders_ranking, ORDERS_MINI_CMD),
}


@dataclass(frozen=True)
class Block:
    file: Path
    table: str
    source: str
    body: str
    rendered: str

    @property
    def stale(self) -> bool:
        return self.body != self.rendered


def render_block(table: str, source: str, repo: Path = REPO) -> str:
    """The text that belongs between the markers of ``table`` from ``source`` (a repo-relative path)."""
    if table not in RENDERERS:
        raise ResultsError(f"unknown results table {table!r}; known: {', '.join(sorted(RENDERERS))}")
    if not source.startswith(RESULTS + "/"):
        raise ResultsError(f"results table {table!r} names {source}; result files live under {RESULTS}/")
    fn, command = RENDERERS[table]
    path = repo / source
    if not path.is_file():
        return f"*To be regenerated from `{source}` by `{command}`.*\n"
    data = strict_json(path)
    try:
        text = fn(data)
    except (KeyError, TypeError) as e:
        raise ResultsError(f"{source}: cannot render {table!r}: missing or malformed field {e}") from None
    return text + _provenance(data, source, command)


def _markdown(repo: Path, files: Sequence[Path] | None) -> Sequence[Path]:
    """``files``, or every README and docs page that may hold marker blocks."""
    return files if files is not None else sorted({p for pattern in MARKDOWN for p in repo.glob(pattern)})


def blocks(repo: Path = REPO, files: Sequence[Path] | None = None) -> list[Block]:
    """Every marker block of the README and docs, with what it holds and what it should hold."""
    out = []
    for f in _markdown(repo, files):
        text = f.read_text(encoding="utf-8")
        for m in BLOCK_RE.finditer(text):
            out.append(Block(file=f, table=m["table"], source=m["source"], body=m["body"],
                             rendered=render_block(m["table"], m["source"], repo)))
    return out


def regenerate(repo: Path = REPO, files: Sequence[Path] | None = None) -> list[Path]:
    """Rewrite every stale block in place; returns the files changed."""
    changed = []
    for f in _markdown(repo, files):
        text = f.read_text(encoding="utf-8")

        def sub(m: re.Match[str]) -> str:
            return m["open"] + render_block(m["table"], m["source"], repo) + m["close"]

        new = BLOCK_RE.sub(sub, text)
        if new != text:
            f.write_text(new, encoding="utf-8")
            changed.append(f)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/docs_results.py", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report stale blocks (exit 1 if any)")
    ap.add_argument("--repo", default=str(REPO), help="repository root (default: this checkout)")
    args = ap.parse_args(argv)
    repo = Path(args.repo)
    try:
        if args.check:
            stale = [b for b in blocks(repo) if b.stale]
            for b in stale:
                print(f"{b.file.relative_to(repo)}: table {b.table!r} differs from {b.source}; run make docs-results",
                      file=sys.stderr)
            return 1 if stale else 0
        for f in regenerate(repo):
            print(f"rewrote {f.relative_to(repo)}")
    except ResultsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
