"""``aclarena-diag forgetting``: continual-learning metrics of the capability matrix.

Stage order is the manifest's chain of ``kind = "stage"`` checkpoints from the base; each
stage's domain is measured on its in-domain suite; oracles are the ``kind = "oracle"``
checkpoints of each domain. Formulas and sources: docs/cl-metrics.md.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from aclarena.cli._common import add_verb, manifest_of, print_json, print_table
from aclarena.errors import AclarenaError

LABELS = {
    "average_accuracy": "average accuracy (GEM ACC)",
    "backward_transfer": "backward transfer (GEM BWT)",
    "forward_transfer": "forward transfer (GEM FWT)",
    "forgetting_max": "forgetting, max earlier - final (Chaudhry et al.)",
    "forgetting_first_last": "forgetting, just-learned - final (first-minus-last)",
    "retention_vs_oracle": "retention, final / single-task oracle",
    "average_incremental_accuracy": "average incremental accuracy (iCaRL)",
    "sample_forgetting": "sample-wise forgetting (correct -> wrong)",
    "sample_backward_transfer": "sample-wise backward transfer (wrong -> correct)",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "forgetting",
        help="continual-learning metrics (ACC, BWT, FWT, forgetting, retention, sample-wise) of the capability matrix",
        examples=(
            "aclarena-diag forgetting --run runs/demo",
            "aclarena-diag forgetting --run runs/mine --suite-of math=lm-eval/aime24 --json",
        ),
    )
    p.add_argument("--chain", metavar="NAME", help="last stage of the chain to measure (when the manifest has several)")
    p.add_argument("--suite-of", action="append", default=[], metavar="DOMAIN=SUITE",
                   help="suite measuring a stage's domain (default DOMAIN/id); repeatable")
    p.add_argument("--settings", metavar="ID", help="use only cells of this eval settings id (default: latest cells)")
    p.set_defaults(func=run)


def _nan_none(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def forgetting_report(run_dir: str, manifest: Any, *, chain: str | None = None,
                      suite_of: dict[str, str] | None = None, settings: str | None = None) -> dict[str, Any]:
    """Everything the verb prints, as plain data (also used by tests)."""
    import numpy as np

    from aclarena.diagnostics.cl_metrics import cl_report, peak_drop
    from aclarena.store.capability import chain_data, open_matrix

    with open_matrix(run_dir, manifest, settings=settings) as (r, matrix):
        data = chain_data(matrix, manifest, r, chain=chain, suite_of=suite_of)
    rep = cl_report(data.R, data.tasks, base=data.base, oracle=data.oracle, items=data.items)
    summary = {k: _nan_none(v) for k, v in rep.summary().items()}
    T = len(data.tasks)
    domains = []
    for j, (task, suite) in enumerate(zip(data.tasks, data.suites, strict=True)):
        domains.append({
            "domain": task, "suite": suite,
            "base": _nan_none(float(data.base[j])) if data.base is not None else None,
            "after_own_stage": _nan_none(float(data.R[j, j])),
            "best_before_final": _nan_none(float(np.max(data.R[: T - 1, j]))) if j < T - 1 else None,
            "final": _nan_none(float(data.R[-1, j])),
            "forgetting_max": _nan_none(float(rep.forgetting_max[j])) if j < T - 1 else None,
            "forgetting_first_last": _nan_none(float(rep.forgetting_first_last[j])) if j < T - 1 else None,
            "oracle": data.oracle_names[j],
            "oracle_score": _nan_none(float(data.oracle[j])) if data.oracle is not None else None,
            "retention": _nan_none(float(rep.retention[j])) if rep.retention is not None else None,
            "sample_forgetting": _nan_none(float(rep.sample_forgetting[j]))
            if rep.sample_forgetting is not None and j < T - 1 else None,
            "sample_backward_transfer": _nan_none(float(rep.sample_backward_transfer[j]))
            if rep.sample_backward_transfer is not None and j < T - 1 else None,
        })
    along = matrix.array(data.chain, matrix.suites)
    suites = []
    for j, suite in enumerate(matrix.suites):
        col = along[:, j]
        domain, role = matrix.suite_info.get(suite, (None, "other"))
        finite = col[~np.isnan(col)]
        suites.append({"suite": suite, "domain": domain, "role": role,
                       "scores": [_nan_none(float(x)) for x in col],
                       "peak": _nan_none(float(finite.max())) if finite.size else None,
                       "peak_at": data.chain[int(np.nanargmax(col))] if finite.size else None,
                       "final": _nan_none(float(col[-1])),
                       "peak_drop": _nan_none(peak_drop(col)) if not np.isnan(col).any() else None})
    consolidated = []
    for name, row in data.consolidated.items():
        R_alt = data.R.copy()
        R_alt[-1] = row
        alt = cl_report(R_alt, data.tasks, base=data.base, oracle=data.oracle)
        s = alt.summary()
        consolidated.append({"checkpoint": name, "scores": [_nan_none(float(x)) for x in row],
                             "average_accuracy": _nan_none(s["average_accuracy"]),
                             "backward_transfer": _nan_none(s["backward_transfer"]),
                             "forgetting_max": _nan_none(s["forgetting_max"]),
                             "retention_vs_oracle": _nan_none(s["retention_vs_oracle"])})
    return {"chain": data.chain, "stages": data.stages, "tasks": data.tasks, "suites": data.suites,
            "R": [[_nan_none(float(x)) for x in row] for row in data.R], "summary": summary, "labels": LABELS,
            "domains": domains, "along_chain": suites, "consolidated": consolidated, "notes": data.notes}


def run(args: argparse.Namespace) -> int:
    manifest = manifest_of(args)
    suite_of = {}
    for item in args.suite_of:
        d, sep, s = item.partition("=")
        if not sep or not d or not s:
            raise AclarenaError(f"--suite-of {item!r} must look like DOMAIN=SUITE (e.g. math=lm-eval/aime24)")
        suite_of[d.strip()] = s.strip()
    out = forgetting_report(args.run, manifest, chain=args.chain, suite_of=suite_of, settings=args.settings)
    if args.json:
        print_json(out)
        return 0
    print_table([{"metric": LABELS[k], "value": v} for k, v in out["summary"].items()], ["metric", "value"],
                title="continual-learning metrics, chain " + " -> ".join(out["chain"]),
                caption="higher is better for accuracy, transfer and retention; lower for forgetting")
    print_table(out["domains"], ["domain", "suite", "base", "after_own_stage", "best_before_final", "final",
                                 "forgetting_max", "forgetting_first_last", "oracle_score", "retention",
                                 "sample_forgetting"],
                title="per stage domain")
    cols = ["suite", *out["chain"], "peak_at", "peak_drop"]
    rows = [{"suite": s["suite"], **dict(zip(out["chain"], s["scores"], strict=True)), "peak_at": s["peak_at"],
             "peak_drop": s["peak_drop"]} for s in out["along_chain"]]
    print_table(rows, cols, title="every suite along the chain", caption="peak_drop = best before the end - final")
    if out["consolidated"]:
        print_table(out["consolidated"], ["checkpoint", "average_accuracy", "backward_transfer", "forgetting_max",
                                          "retention_vs_oracle"],
                    title="consolidated models in place of the last stage")
    for note in out["notes"]:
        print(f"note: {note}")
    return 0
