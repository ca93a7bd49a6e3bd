"""``aclarena-diag displacement``: how far each update moved the weights, SFT against RL, and how sparsely.

One streamed pass over every (checkpoint, parent) pair of the run sums, per tensor, ``‖Δθ‖²``,
``‖θ_parent‖²`` and the number of entries with ``|Δθ| > tol`` for each tolerance, exactly and
after rounding to bfloat16 (``displacement/stats``); norms, relative norms, sparsity curves per
layer and the SFT/RL ratio per stage are derived from it (``displacement/summary``).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from aclarena.cli._common import add_verb, fmt, manifest_of, print_json, print_table

RESULT_VERSION = "0.1.0"
STATS_KEY = "displacement/stats"
SUMMARY_KEY = "displacement/summary"
VIEWS = {"all": False, "no-embeddings": True}


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "displacement",
        help="SFT vs RL parameter displacement per stage, per layer and tensor, and update sparsity",
        description=(
            "For every checkpoint with a parent: ‖Δθ‖₂ and ‖Δθ‖₂/‖θ_parent‖₂ (all floating weights, per layer, per "
            "tensor), the fraction of entries that moved by more than each tolerance, exactly and after rounding "
            "both weights to bfloat16 (bf16 rounding hides small updates), and the SFT/RL displacement ratio of "
            "each stage with both phases. One pass reads each file once; an interrupted pass resumes."
        ),
        examples=(
            "aclarena-diag displacement --run runs/demo",
            "aclarena-diag displacement --run runs/demo --tolerances 0,1e-6,1e-5 --by layer",
            "aclarena-diag displacement --run runs/demo --json",
        ),
    )
    p.add_argument("--tolerances", default="0,1e-8,1e-7,1e-6,1e-5,1e-4,1e-3", metavar="LIST",
                   help="comma-separated |Δθ| thresholds for the sparsity sweep (default: 0,1e-8,…,1e-3)")
    p.add_argument("--by", choices=("global", "tensor", "layer"), default="global",
                   help="view: all weights (default), per layer block, or per tensor")
    p.add_argument("--exclude-embeddings", action="store_true",
                   help="leave out the input embeddings and the output head")
    p.add_argument("--checkpoints", metavar="NAMES",
                   help="comma-separated checkpoints whose updates to measure (default: all with a parent)")
    p.add_argument("--save-every", type=float, default=120.0, metavar="SECONDS",
                   help="save finished tensors this often so an interrupted pass resumes (default: 120)")
    p.add_argument("--force", action="store_true", help="recompute even if a finished result matches")
    p.set_defaults(func=run)


def parse_tolerances(text: str) -> tuple[float, ...]:
    from aclarena.errors import AclarenaError

    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise AclarenaError(f"--tolerances {text!r} is not a comma-separated list of numbers (e.g. 0,1e-6,1e-5)") from None
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        raise AclarenaError(f"--tolerances {text!r} must list finite numbers >= 0 (e.g. 0,1e-6,1e-5)")
    return tuple(sorted(set(values)))


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from aclarena.cli._params import (
        CHUNK_ELEMENTS,
        finish_parts,
        nonfinite_error,
        open_plan,
        parent_of,
        progress_enabled,
        require_parents,
        resumable_pass,
        selection,
        settings_hash,
        stored_fingerprint,
    )
    from aclarena.diagnostics.displacement import (
        DisplacementAccumulator,
        sft_rl_excluded,
        sft_rl_ratios,
        summarize_displacement,
    )
    from aclarena.errors import AclarenaError
    from aclarena.store import Json, ResultsStore

    if args.save_every < 0:
        raise AclarenaError(f"--save-every must be >= 0 seconds, got {args.save_every}")
    tolerances = parse_tolerances(args.tolerances)
    manifest = manifest_of(args)
    names = selection(manifest, args.checkpoints)
    require_parents(manifest, names)
    wanted = set(s.name for s in manifest.resolve_many(args.checkpoints)) if args.checkpoints else set(names)
    children = [n for n in names if n in wanted and parent_of(manifest, n) is not None]
    if not children:
        raise AclarenaError("no checkpoint with a parent to measure; set `parent` in the manifest "
                            "(displacement is θ − θ_parent)")
    store = ResultsStore(args.run)
    plan = open_plan(manifest, args.run, names)
    try:
        columns = plan.dense + plan.adapters
        col = {n: i for i, n in enumerate(columns)}
        parents = [parent_of(manifest, c) for c in children]
        pairs = [(col[c], col[p]) for c, p in zip(children, parents, strict=True)]
        settings = {"result": "displacement-stats", "version": RESULT_VERSION, "columns": columns,
                    "on": plan.adapter_on, "pairs": [[c, p] for c, p in zip(children, parents, strict=True)],
                    "fingerprints": [plan.fingerprints[n] for n in columns], "tolerances": list(tolerances),
                    "chunk": CHUNK_ELEMENTS}
        key = settings_hash(settings)
        if stored_fingerprint(store, STATS_KEY) == key and not args.force:
            stats = store.read(STATS_KEY)
            computed = False
        else:
            on_cols = [col[o] for o in plan.adapter_on]

            def start(tensor: str) -> DisplacementAccumulator:
                return DisplacementAccumulator(pairs, tolerances, n_dense=len(plan.dense),
                                               adapters=list(zip(on_cols, plan.loras_of(tensor), strict=True)))

            def finish(tensor: str, acc: DisplacementAccumulator) -> dict[str, np.ndarray]:
                r = acc.result()
                for p, (c, q) in enumerate(pairs):
                    if not math.isfinite(r.sq_parent[p]):
                        raise nonfinite_error(columns[q], tensor)
                    if not math.isfinite(r.sq_delta[p]):
                        raise nonfinite_error(columns[c], tensor)
                return {"numel": np.asarray(r.numel, dtype=np.int64), "sq_delta": r.sq_delta,
                        "sq_parent": r.sq_parent, "changed": r.changed, "changed_bf16": r.changed_bf16,
                        "max_abs": r.max_abs}

            rows = resumable_pass(store, "displacement", key, plan, start, finish, save_every=args.save_every,
                                  show_progress=progress_enabled(args), what="displacement")
            tensors = list(rows)
            n_p, n_j = len(pairs), len(tolerances)

            def stack(f: str, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
                return np.stack([np.asarray(rows[t][f]) for t in tensors]) if tensors else np.zeros((0, *shape), dtype)

            stats = {
                "tensors": tensors, "children": children, "parents": parents, "tolerances": np.asarray(tolerances),
                "numel": np.array([int(rows[t]["numel"]) for t in tensors], dtype=np.int64),
                "sq_delta": stack("sq_delta", (n_p,)), "sq_parent": stack("sq_parent", (n_p,)),
                "changed": stack("changed", (n_p, n_j), np.int64), "changed_bf16": stack("changed_bf16", (n_p, n_j), np.int64),
                "max_abs": stack("max_abs", (n_p,)),
            }
            store.write(STATS_KEY, {**stats, "tensors": Json(tensors), "children": Json(children),
                                    "parents": Json(parents), "settings": Json(settings)},
                        result_type="displacement-stats", result_version=RESULT_VERSION,
                        attrs={"fingerprint": key, "settings": settings}, overwrite=True)
            finish_parts(store, "displacement")
            computed = True
    finally:
        plan.close()

    specs = [manifest.resolve(c) for c in children]
    # SFT and RL updates of the curriculum's stages only (not oracles or consolidations); a stage
    # with both phases has two entries sharing a domain
    phases = [s.phase if s.kind == "stage" else None for s in specs]
    stages = [s.domain if s.kind == "stage" else None for s in specs]
    summaries = {}
    for view, ex in VIEWS.items():
        summaries[view] = summarize_displacement(
            stats["tensors"], stats["numel"], stats["sq_delta"], stats["sq_parent"], stats["changed"],
            stats["changed_bf16"], tolerances, exclude_embeddings=ex)
    ratio_rows = {}
    for view, s in summaries.items():
        per, overall = sft_rl_ratios(list(s.norm), phases, stages)
        ratio_rows[view] = (per, overall, sft_rl_excluded(list(s.norm), phases, stages))
    # ratio_rule 2: the overall SFT/RL ratio pools only stages with both phases and a non-zero RL update
    sum_settings = {"stats": key, "children": children, "phases": phases, "stages": stages,
                    "kinds": [s.kind for s in specs], "version": RESULT_VERSION, "ratio_rule": 2}
    sum_key = settings_hash(sum_settings)
    if stored_fingerprint(store, SUMMARY_KEY) != sum_key:
        store.write(SUMMARY_KEY, {view: summary_data(s, children, parents, specs, *ratio_rows[view])
                                  for view, s in summaries.items()},
                    result_type="displacement-summary", result_version=RESULT_VERSION,
                    attrs={"fingerprint": sum_key, "settings": sum_settings}, overwrite=True)

    view = "no-embeddings" if args.exclude_embeddings else "all"
    s = summaries[view]
    per, overall, excluded = ratio_rows[view]
    if args.json:
        print_json({"run": manifest.name, "by": args.by, "exclude_embeddings": args.exclude_embeddings,
                    "computed": computed, **summary_json(s, children, parents, specs, per, overall, args.by),
                    "sft_rl_excluded": [{"stage": st, "reason": why} for st, why in excluded]})
    else:
        print_summary(s, children, parents, specs, per, overall, args.by, computed)
        for st, why in excluded:
            print(f"note: stage {st!r} is not in the overall SFT/RL ratio ({why})")
    return 0


def summary_data(s: Any, children: list[str], parents: list[str], specs: list[Any], per: list[Any],
                 overall: float, excluded: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """A :class:`DisplacementSummary` as store elements."""
    import numpy as np

    from aclarena.store import Json

    return {
        "children": Json(children), "parents": Json(parents),
        "phases": Json([sp.phase for sp in specs]), "kinds": Json([sp.kind for sp in specs]),
        "domains": Json([sp.domain for sp in specs]),
        "tolerances": np.asarray(s.tolerances, dtype=np.float64),
        "norm": s.norm, "rel": s.rel, "changed_frac": s.changed_frac, "changed_frac_bf16": s.changed_frac_bf16,
        "group_labels": Json(s.group_labels), "norm_group": s.norm_group, "rel_group": s.rel_group,
        "changed_frac_group": s.changed_frac_group,
        "tensor_labels": Json(s.tensor_labels), "norm_tensor": s.norm_tensor, "rel_tensor": s.rel_tensor,
        "ratios": Json([{"stage": r.stage, "sft": r.sft, "rl": r.rl, "ratio": _num(r.ratio), "pooled": r.pooled}
                        for r in per]),
        "overall_ratio": float(overall),
        "ratio_excluded": Json([{"stage": st, "reason": why} for st, why in excluded or []]),
    }


def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _rows(s: Any, children: list[str], parents: list[str], specs: list[Any], by: str) -> list[dict[str, Any]]:
    out = []
    if by == "global":
        groups, norm, rel = ["all"], s.norm[None], s.rel[None]
    elif by == "layer":
        groups, norm, rel = s.group_labels, s.norm_group, s.rel_group
    else:
        groups, norm, rel = s.tensor_labels, s.norm_tensor, s.rel_tensor
    for gi, g in enumerate(groups):
        for p, (c, par, sp) in enumerate(zip(children, parents, specs, strict=True)):
            out.append({"group": g, "checkpoint": c, "parent": par, "phase": sp.phase, "kind": sp.kind,
                        "norm": _num(norm[gi, p]), "rel": _num(rel[gi, p])})
    return out


def summary_json(s: Any, children: list[str], parents: list[str], specs: list[Any], per: list[Any], overall: float,
                 by: str) -> dict[str, Any]:
    return {
        "tolerances": list(s.tolerances),
        "updates": [{"checkpoint": c, "parent": p, "phase": sp.phase, "kind": sp.kind, "domain": sp.domain,
                     "norm": _num(s.norm[i]), "rel": _num(s.rel[i]),
                     "changed_frac": [_num(x) for x in s.changed_frac[i]],
                     "changed_frac_bf16": [_num(x) for x in s.changed_frac_bf16[i]]}
                    for i, (c, p, sp) in enumerate(zip(children, parents, specs, strict=True))],
        "view": _rows(s, children, parents, specs, by),
        "sft_rl": [{"stage": r.stage, "sft": r.sft, "rl": r.rl, "ratio": _num(r.ratio), "pooled": r.pooled}
                   for r in per],
        "sft_rl_overall": _num(overall),
    }


def print_summary(s: Any, children: list[str], parents: list[str], specs: list[Any], per: list[Any], overall: float,
                  by: str, computed: bool) -> None:
    rows = _rows(s, children, parents, specs, by)
    keys = (["group"] if by != "global" else []) + ["checkpoint", "parent", "phase", "norm", "rel"]
    heads = [{"norm": "‖Δθ‖₂", "rel": "‖Δθ‖₂/‖θ_parent‖₂"}.get(k, k) for k in keys]
    print_table(rows, keys, headers=heads, title=f"displacement ({by}; {'computed' if computed else 'reused'})")
    tol_cols = [f"> {fmt(t, 1) if t else '0'}" for t in s.tolerances]
    srows = []
    for i, c in enumerate(children):
        for mode, arr in (("exact", s.changed_frac), ("bf16", s.changed_frac_bf16)):
            r: dict[str, Any] = {"checkpoint": c, "mode": mode}
            for j, col in enumerate(tol_cols):
                r[col] = float(arr[i, j])
            srows.append(r)
    print_table(srows, ["checkpoint", "mode", *tol_cols],
                title="fraction of entries that moved by more than each tolerance (sparsity = 1 − fraction)")
    if per:
        print_table([{"stage": r.stage, "sft": r.sft, "rl": r.rl, "ratio": r.ratio} for r in per],
                    ["stage", "sft", "rl", "ratio"], headers=["stage", "‖Δθ_SFT‖", "‖Δθ_RL‖", "SFT / RL"],
                    title="SFT vs RL displacement per stage (study: SFT moves parameters 3–7× more)")
    if math.isfinite(overall):
        pooled = ", ".join(r.stage for r in per if r.pooled)
        print(f"mean SFT update / mean RL update over the stages with both phases ({pooled}): {fmt(overall)} "
              "(study: 3–7×)")
    else:
        print("note: no SFT/RL ratio: no stage has both an SFT and a non-zero RL update (set `phase` = \"sft\" or "
              "\"rl\" on each stage's checkpoints)")
