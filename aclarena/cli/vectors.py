"""``aclarena-diag vectors``: task-vector cosines against oracle directions, distances, projections.

One streamed pass over the run's checkpoints computes every inner product of their differences
per tensor (``vectors/gram``); the views (global, per layer, per tensor, embeddings in or out),
distances to the oracles along the chain, projections of stage updates on oracle directions and
``--pair`` cosines are derived from it (``vectors/summary``, ``vectors/pairs``). See
docs/task-vectors.md for the convention.
"""

from __future__ import annotations

import argparse
from typing import Any

from aclarena.cli._common import add_verb, fmt, manifest_of, print_json, print_table

RESULT_VERSION = "0.1.0"
GRAM_KEY = "vectors/gram"
SUMMARY_KEY = "vectors/summary"
PAIRS_KEY = "vectors/pairs"
VIEWS = {"all": False, "no-embeddings": True}


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "vectors",
        help="task-vector cosines vs oracle directions, distances to oracles, projections (streamed from safetensors)",
        description=(
            "Task vectors θ_x − θ_ref of the run's checkpoints: stage updates (ref = parent), cumulative updates "
            "(ref = base) and oracle directions (oracle − base). Prints their cosines with each oracle direction, "
            "the distance of each checkpoint of the chain to each oracle and the projection of each stage update "
            "on each oracle direction. Cosines are over all floating weights flattened (global), per layer block "
            "or per tensor; LoRA adapters count as their update s·B·A, never formed. One pass reads each file "
            "once; an interrupted pass resumes. Convention: docs/task-vectors.md."
        ),
        examples=(
            "aclarena-diag vectors --run runs/demo",
            "aclarena-diag vectors --run runs/demo --by layer --exclude-embeddings",
            "aclarena-diag vectors --run runs/demo --pair mix-sft-base:mix-sft-seq-if --json",
        ),
    )
    p.add_argument("--by", choices=("global", "tensor", "layer"), default="global",
                   help="view: all weights flattened (default), per layer block, or per tensor")
    p.add_argument("--exclude-embeddings", action="store_true",
                   help="leave out the input embeddings and the output head")
    p.add_argument("--pair", action="append", default=[], metavar="A-B:C-D",
                   help="also print the cosine of θ_A − θ_B and θ_C − θ_D (repeatable; 'A - B' with spaces when "
                        "names are ambiguous)")
    p.add_argument("--checkpoints", metavar="NAMES",
                   help="comma-separated checkpoints (default: all); their parents and the base are added")
    p.add_argument("--save-every", type=float, default=120.0, metavar="SECONDS",
                   help="save finished tensors this often so an interrupted pass resumes (default: 120)")
    p.add_argument("--force", action="store_true", help="recompute even if a finished result matches")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from aclarena.cli._params import (
        CHUNK_ELEMENTS,
        finish_parts,
        nonfinite_error,
        open_plan,
        parse_pair,
        progress_enabled,
        require_parents,
        resumable_pass,
        selection,
        settings_hash,
        stored_fingerprint,
    )
    from aclarena.diagnostics.task_vectors import (
        Basis,
        GramAccumulator,
        TaskVector,
        TensorGrams,
        nonfinite_index,
        pair_cosines,
        summarize,
    )
    from aclarena.errors import AclarenaError
    from aclarena.store import Json, ResultsStore, Table

    if args.save_every < 0:
        raise AclarenaError(f"--save-every must be >= 0 seconds, got {args.save_every}")
    manifest = manifest_of(args)
    known = [s.name for s in manifest]
    pairs = [parse_pair(p, known) for p in args.pair]
    pair_names = [n for (a, b), (c, d) in pairs for n in (a, b, c, d)]
    names = selection(manifest, args.checkpoints, pair_names)
    require_parents(manifest, names)
    base = manifest.base
    assert base is not None
    store = ResultsStore(args.run)
    plan = open_plan(manifest, args.run, names)
    try:
        basis = Basis(
            names=tuple(plan.dense) + tuple(plan.adapters),
            kinds=("anchor",) + ("dense",) * (len(plan.dense) - 1) + ("lora",) * len(plan.adapters),
            on=(None,) * len(plan.dense) + tuple(plan.adapter_on),
        )
        settings = {"result": "task-vector-gram", "version": RESULT_VERSION, "basis": list(basis.names),
                    "on": list(basis.on), "fingerprints": [plan.fingerprints[n] for n in basis.names],
                    "chunk": CHUNK_ELEMENTS}
        key = settings_hash(settings)
        reader = plan.reader
        if stored_fingerprint(store, GRAM_KEY) == key and not args.force:
            data = store.read(GRAM_KEY)
            grams = TensorGrams(basis, tuple(data["tensors"]), data["gram"], data["numel"])
            computed = False
        else:

            def start(tensor: str) -> GramAccumulator:
                return GramAccumulator(len(plan.dense), plan.loras_of(tensor))

            def finish(tensor: str, acc: GramAccumulator) -> dict[str, np.ndarray]:
                m = acc.result()
                bad = nonfinite_index(m)
                if bad is not None:
                    raise nonfinite_error(basis.names[bad], tensor)
                return {"gram": m, "numel": np.asarray(reader.numel(tensor), dtype=np.int64)}

            rows = resumable_pass(store, "vectors", key, plan, start, finish, save_every=args.save_every,
                                  show_progress=progress_enabled(args), what="task vectors")
            tensors = list(rows)
            grams = TensorGrams(basis, tuple(tensors), np.stack([rows[t]["gram"] for t in tensors]) if tensors
                                else np.zeros((0, len(basis), len(basis))),
                                np.array([int(rows[t]["numel"]) for t in tensors], dtype=np.int64))
            store.write(GRAM_KEY, {
                "basis": Json(list(basis.names)), "kinds": Json(list(basis.kinds)), "on": Json(list(basis.on)),
                "tensors": Json(list(grams.tensors)), "numel": grams.numel, "gram": grams.grams,
                "settings": Json(settings),
            }, result_type="task-vector-gram", result_version=RESULT_VERSION,
                attrs={"fingerprint": key, "settings": settings}, overwrite=True,
                manifest_text=_manifest_text(args))
            finish_parts(store, "vectors")
            computed = True
    finally:
        plan.close()

    vectors, oracles, chain, others, projected, notes = study_vectors(manifest, names)
    summaries = {view: summarize(grams, vectors, base=base, oracles=oracles, chain=chain, others=others,
                                 projected=projected, exclude_embeddings=ex, notes=notes)
                 for view, ex in VIEWS.items()}
    sum_settings = {"gram": key, "vectors": [[v.label, v.plus, v.minus, v.kind] for v in vectors],
                    "oracles": [[o.name, o.domain] for o in oracles], "chain": chain, "others": others,
                    "projected": projected, "notes": notes, "version": RESULT_VERSION}
    sum_key = settings_hash(sum_settings)
    if stored_fingerprint(store, SUMMARY_KEY) != sum_key:
        store.write(SUMMARY_KEY, {view: summary_data(s) for view, s in summaries.items()},
                    result_type="task-vector-summary", result_version=RESULT_VERSION,
                    attrs={"fingerprint": sum_key, "settings": sum_settings}, overwrite=True,
                    manifest_text=_manifest_text(args))
    pair_rows: list[dict[str, Any]] = []
    if pairs:
        tvs = [(TaskVector(f"{a} - {b}", a, b, "pair"), TaskVector(f"{c} - {d}", c, d, "pair"))
               for (a, b), (c, d) in pairs]
        labels = [f"{x.label} : {y.label}" for x, y in tvs]
        stored: dict[str, Any] = {"pairs": Table({"pair": labels, "a": [x.plus for x, _ in tvs],
                                                  "b": [x.minus for x, _ in tvs], "c": [y.plus for _, y in tvs],
                                                  "d": [y.minus for _, y in tvs]})}
        for view, ex in VIEWS.items():
            _, g = pair_cosines(grams, tvs, exclude_embeddings=ex)
            glabels, gl = pair_cosines(grams, tvs, by="layer", exclude_embeddings=ex)
            stored[view] = {"cos": g[0], "group_labels": Json(glabels), "cos_group": gl}
        p_settings = {"gram": key, "pairs": labels}
        p_key = settings_hash(p_settings)
        if stored_fingerprint(store, PAIRS_KEY) != p_key:
            store.write(PAIRS_KEY, stored, result_type="task-vector-pairs", result_version=RESULT_VERSION,
                        attrs={"fingerprint": p_key, "settings": p_settings}, overwrite=True)
        glabels, gcos = pair_cosines(grams, tvs, by=args.by, exclude_embeddings=args.exclude_embeddings)
        for j, lab in enumerate(labels):
            for gi, gl in enumerate(glabels):
                pair_rows.append({"pair": lab, "group": gl, "cos": float(gcos[gi, j])})

    summary = summaries["no-embeddings" if args.exclude_embeddings else "all"]
    if args.json:
        print_json({"run": manifest.name, "base": base, "by": args.by, "exclude_embeddings": args.exclude_embeddings,
                    "computed": computed, "checkpoints": list(basis.names), **summary_json(summary, args.by),
                    "pairs": pair_rows})
    else:
        print_summary(summary, args.by, args.exclude_embeddings, pair_rows, computed)
    return 0


def _manifest_text(args: argparse.Namespace) -> str | None:
    from aclarena.store.manifest import manifest_path

    try:
        return manifest_path(args.run).read_text(encoding="utf-8")
    except OSError:
        return None


def study_vectors(manifest: Any, names: list[str]) -> tuple[list[Any], list[Any], list[str], list[str], list[int], list[str]]:
    """The study's task vectors for the checkpoints ``names`` of ``manifest``.

    Returns (vectors, oracles, chain, others, projected, notes): a stage update ``x − parent``
    for each checkpoint with a parent (for an adapter without one, the model it is on), the
    cumulative update ``x − base`` where the parent is not the base, the oracles (``kind =
    oracle``), the chain (the base, then the stages by depth), the consolidated checkpoints,
    the indices of the stage updates to project on oracle directions, and notes on domains
    without an oracle.
    """
    from aclarena.cli._params import parent_of
    from aclarena.diagnostics.task_vectors import Oracle, TaskVector

    base = manifest.base
    vectors, projected = [], []
    for n in names:
        if n == base:
            continue
        spec = manifest.resolve(n)
        parent = parent_of(manifest, n)
        if parent is not None:
            if spec.kind == "stage":
                projected.append(len(vectors))
            vectors.append(TaskVector(f"{n} - {parent}", n, parent, "update"))
        if parent != base:
            vectors.append(TaskVector(f"{n} - {base}", n, base, "cumulative"))
    oracles = [Oracle(n, manifest.resolve(n).domain or n) for n in names if manifest.resolve(n).kind == "oracle"]
    depth = {n: len(manifest.ancestors(n)) for n in names}
    order = {n: i for i, n in enumerate(names)}
    stages = sorted((n for n in names if manifest.resolve(n).kind == "stage"), key=lambda n: (depth[n], order[n]))
    chain = [base, *stages]
    others = [n for n in names if manifest.resolve(n).kind == "consolidated"]
    notes = []
    have = {o.domain for o in oracles}
    if not oracles:
        notes.append("no oracles in the manifest (kind = \"oracle\"): cosines with oracle directions, distances to "
                     "oracles and projections are skipped")
    else:
        for d in sorted({manifest.resolve(n).domain for n in stages if manifest.resolve(n).domain} - have):
            notes.append(f"no oracle for domain {d!r}: its oracle views are skipped (add a checkpoint with "
                         f"kind = \"oracle\", domain = \"{d}\")")
    return vectors, oracles, chain, others, projected, notes


def summary_data(s: Any) -> dict[str, Any]:
    """A :class:`TaskVectorSummary` as store elements (docs/store-format.md)."""
    import numpy as np

    from aclarena.store import Json

    return {
        "labels": Json([v.label for v in s.vectors]),
        "kinds": Json([v.kind for v in s.vectors]),
        "plus": Json([v.plus for v in s.vectors]), "minus": Json([v.minus for v in s.vectors]),
        "base": s.base,
        "cos": s.cos, "norm": s.norm,
        "group_labels": Json(s.group_labels), "cos_group": s.cos_group, "norm_group": s.norm_group,
        "layer_mean_cos": s.layer_mean_cos,
        "tensor_labels": Json(s.tensor_labels), "cos_tensor": s.cos_tensor, "norm_tensor": s.norm_tensor,
        "oracles": Json([o.name for o in s.oracles]), "oracle_domains": Json([o.domain for o in s.oracles]),
        "oracle_norm": s.oracle_norm,
        "distance_checkpoints": Json(s.distance_checkpoints), "on_chain": np.asarray(s.on_chain, dtype=bool),
        "distance": s.distance, "distance_group": s.distance_group,
        "projection_vectors": np.asarray(s.projection_vectors, dtype=np.int64),
        "projection_cos": s.projection_cos, "projection_length": s.projection_length,
        "projection_coef": s.projection_coef, "projection_cos_group": s.projection_cos_group,
        "notes": Json(s.notes),
    }


def _view_rows(s: Any, by: str) -> tuple[list[str], Any, Any]:
    """Group labels, ``(G, V, V)`` cosines and ``(G, V)`` norms of the view ``by``."""
    if by == "global":
        return ["all"], s.cos[None], s.norm[None]
    if by == "layer":
        return s.group_labels, s.cos_group, s.norm_group
    return s.tensor_labels, s.cos_tensor, s.norm_tensor


def summary_json(s: Any, by: str) -> dict[str, Any]:
    labels = [v.label for v in s.vectors]
    oracle_idx = s.oracle_vector_index()
    groups, cos, norms = _view_rows(s, by)
    view = []
    for gi, g in enumerate(groups):
        for vi, lab in enumerate(labels):
            row = {"group": g, "vector": lab, "norm": _num(norms[gi, vi])}
            row["cos_oracle"] = {o.name: _num(cos[gi, vi, oi]) for o, oi in zip(s.oracles, oracle_idx, strict=True)
                                 if oi is not None}
            view.append(row)
    return {
        "vectors": [{"label": v.label, "plus": v.plus, "minus": v.minus, "kind": v.kind, "norm": _num(n)}
                    for v, n in zip(s.vectors, s.norm, strict=True)],
        "cosines": {"labels": labels, "matrix": _nums(s.cos)},
        "layer_mean_cosines": _nums(s.layer_mean_cos),
        "view": view,
        "oracles": [{"name": o.name, "domain": o.domain, "norm": _num(n)} for o, n in zip(s.oracles, s.oracle_norm,
                                                                                       strict=True)],
        "distances": [{"checkpoint": c, "on_chain": bool(oc),
                       **{o.name: _num(s.distance[ci, oi]) for oi, o in enumerate(s.oracles)}}
                      for ci, (c, oc) in enumerate(zip(s.distance_checkpoints, s.on_chain, strict=True))],
        "projections": [{"update": labels[v], **{o.name: {"cos": _num(s.projection_cos[si, oi]),
                                                          "length": _num(s.projection_length[si, oi]),
                                                          "coef": _num(s.projection_coef[si, oi])}
                                                 for oi, o in enumerate(s.oracles)}}
                        for si, v in enumerate(s.projection_vectors)],
        "notes": s.notes,
    }


def _nums(a: Any) -> list[Any]:
    """A nested list of floats with NaN/inf as None (strict JSON)."""
    import numpy as np

    arr = np.asarray(a, dtype=float)
    return np.where(np.isfinite(arr), arr, None).tolist()


def _num(x: Any) -> float | None:
    import math

    x = float(x)
    return x if math.isfinite(x) else None


def print_summary(s: Any, by: str, exclude_embeddings: bool, pair_rows: list[dict[str, Any]], computed: bool) -> None:
    labels = [v.label for v in s.vectors]
    what = "without embeddings/head" if exclude_embeddings else "all floating weights"
    oracle_idx = s.oracle_vector_index()
    columns = [(o.name, oi) for o, oi in zip(s.oracles, oracle_idx, strict=True) if oi is not None]
    if not columns:
        columns = [(lab, i) for i, lab in enumerate(labels) if s.vectors[i].kind == "update"]
    groups, cos, norms = _view_rows(s, by)
    rows = []
    for gi, g in enumerate(groups):
        for vi, lab in enumerate(labels):
            row: dict[str, Any] = {"group": g, "vector": lab, "norm": norms[gi, vi]}
            for name, ci in columns:
                row[name] = cos[gi, vi, ci]
            rows.append(row)
    keys = (["group"] if by != "global" else []) + ["vector", "norm"] + [c for c, _ in columns]
    heads = [k if k in ("group", "vector", "norm") else f"cos {k}" for k in keys]
    status = "computed" if computed else "reused"
    print_table(rows, keys, headers=heads, title=f"task-vector cosines ({by}, {what}; {status})")
    if s.oracles and by == "global":
        drows = []
        for ci, c in enumerate(s.distance_checkpoints):
            r: dict[str, Any] = {"checkpoint": c + ("" if s.on_chain[ci] else " (off chain)")}
            for oi, o in enumerate(s.oracles):
                r[o.name] = s.distance[ci, oi]
            drows.append(r)
        print_table(drows, ["checkpoint"] + [o.name for o in s.oracles],
                    headers=["checkpoint"] + [f"‖θ − {o.name}‖" for o in s.oracles], title="distance to each oracle")
        if s.projection_vectors:
            prows = []
            for si, vi in enumerate(s.projection_vectors):
                r = {"update": labels[vi]}
                for oi, o in enumerate(s.oracles):
                    r[o.name] = f"{fmt(float(s.projection_coef[si, oi]))} (cos {fmt(float(s.projection_cos[si, oi]))})"
                prows.append(r)
            print_table(prows, ["update"] + [o.name for o in s.oracles],
                        headers=["stage update"] + [f"along {o.name}" for o in s.oracles],
                        title="projection of each stage update on each oracle direction (⟨Δ, o⟩/‖o‖², cosine)")
    if pair_rows:
        print_table(pair_rows, ["pair", "group", "cos"], title="cosine of the asked pairs of differences")
    for note in s.notes:
        print(f"note: {note}")
