"""Task vectors of a run: cosines against oracle directions, distances, projections, pairs.

One streamed pass over the run's checkpoints computes every inner product of their differences
per tensor (``vectors/gram``); the views (global, per layer, per tensor, embeddings in or out),
distances to the oracles along the chain, projections of stage updates on oracle directions and
asked-for pair cosines are derived from it (``vectors/summary``, ``vectors/pairs``). See
docs/task-vectors.md for the convention. :func:`vectors` is the work of ``aclarena-diag vectors``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.analysis._common import (
    Pair,
    RunPath,
    frame,
    manifest_or_load,
    manifest_text,
    num,
    nums,
    options_of,
)
from aclarena.analysis.passes import (
    CHUNK_ELEMENTS,
    Plan,
    finish_parts,
    nonfinite_error,
    open_plan,
    parent_of,
    parse_pair,
    require_base,
    require_parents,
    resumable_pass,
    selection,
    settings_hash,
    stored_fingerprint,
)
from aclarena.diagnostics.task_vectors import (
    Basis,
    GramAccumulator,
    Oracle,
    TaskVector,
    TaskVectorSummary,
    TensorGrams,
    nonfinite_index,
    pair_cosines,
    summarize,
)
from aclarena.errors import AclarenaError
from aclarena.results.vectors import (
    GRAM_KEY,
    PAIRS_KEY,
    RESULT_VERSION,
    SUMMARY_KEY,
    GramData,
    PairView,
    VectorPairsData,
    VectorSummaryData,
    VectorSummaryView,
    read_gram,
    write_gram,
    write_vector_pairs,
    write_vectors_summary,
)
from aclarena.store import Manifest, ResultsStore

#: each stored view, and whether it leaves the input embeddings and output head out
VIEWS = {"all": False, "no-embeddings": True}
BY = ("global", "tensor", "layer")


@dataclass(frozen=True)
class VectorsResult:
    """What :func:`vectors` computed (or reused) for a run.

    ``summaries`` holds one :class:`~aclarena.diagnostics.task_vectors.TaskVectorSummary` per view
    (``"all"`` weights, ``"no-embeddings"``); ``writes`` the store keys written by this call.
    """

    run: str
    base: str
    checkpoints: tuple[str, ...]
    computed: bool
    summaries: Mapping[str, TaskVectorSummary]
    grams: TensorGrams
    pairs: tuple[tuple[TaskVector, TaskVector], ...] = ()
    writes: tuple[str, ...] = field(default=())

    def summary(self, exclude_embeddings: bool = False) -> TaskVectorSummary:
        """The :class:`TaskVectorSummary` of all weights, or without the embeddings and head."""
        return self.summaries["no-embeddings" if exclude_embeddings else "all"]

    def pair_rows(self, by: str = "global", exclude_embeddings: bool = False) -> list[dict[str, Any]]:
        """One row per asked pair of differences and group of the view ``by``: its cosine."""
        if not self.pairs:
            return []
        labels = [f"{x.label} : {y.label}" for x, y in self.pairs]
        glabels, gcos = pair_cosines(self.grams, list(self.pairs), by=_check_by(by),
                                     exclude_embeddings=exclude_embeddings)
        return [{"pair": lab, "group": gl, "cos": float(gcos[gi, j])}
                for j, lab in enumerate(labels) for gi, gl in enumerate(glabels)]

    def asked_cosines(self) -> dict[Pair, float | None]:
        """The cosine of each asked pair of differences over all weights (the global view), by the checkpoints of
        its two differences (None where not finite)."""
        if not self.pairs:
            return {}
        _, cos = pair_cosines(self.grams, list(self.pairs), by="global")
        return {((x.plus, x.minus), (y.plus, y.minus)): num(cos[0, j]) for j, (x, y) in enumerate(self.pairs)}

    def cosines(self, exclude_embeddings: bool = False) -> Any:
        """DataFrame: the cosine of every pair of task vectors over all weights flattened (square)."""
        import pandas as pd

        s = self.summary(exclude_embeddings)
        labels = [v.label for v in s.vectors]
        return pd.DataFrame(np.asarray(s.cos, dtype=float), index=labels, columns=labels)

    def to_pandas(self, by: str = "global", exclude_embeddings: bool = False) -> Any:
        """DataFrame, one row per (group, task vector): its norm and its cosine with each oracle direction."""
        rows = []
        for r in summary_json(self.summary(exclude_embeddings), _check_by(by))["view"]:
            rows.append({"group": r["group"], "vector": r["vector"], "norm": r["norm"],
                         **{f"cos {o}": c for o, c in r["cos_oracle"].items()}})
        return frame(rows)

    def to_dict(self, by: str = "global", exclude_embeddings: bool = False) -> dict[str, Any]:
        """Plain data (strict JSON): what ``aclarena-diag vectors --json`` prints."""
        return {"run": self.run, "base": self.base, "by": by, "exclude_embeddings": exclude_embeddings,
                "computed": self.computed, "checkpoints": list(self.checkpoints),
                **summary_json(self.summary(exclude_embeddings), _check_by(by)),
                "pairs": self.pair_rows(by, exclude_embeddings)}


def basis_of(plan: Plan) -> Basis:
    """The Gram basis of a pass: the dense checkpoints (the base first, the anchor), then the adapters."""
    return Basis(
        names=tuple(plan.dense) + tuple(plan.adapters),
        kinds=("anchor",) + ("dense",) * (len(plan.dense) - 1) + ("lora",) * len(plan.adapters),
        on=(None,) * len(plan.dense) + tuple(plan.adapter_on),
    )


def gram_pass(plan: Plan, basis: Basis, store: ResultsStore | None, key: str, *, save_every: float = 120.0,
              show_progress: bool = False) -> TensorGrams:
    """One streamed pass over ``plan``: every inner product of the basis differences, per tensor.
    With a ``store``, finished tensors are saved every ``save_every`` seconds under ``key`` (resumable)."""
    reader = plan.reader

    def start(tensor: str) -> GramAccumulator:
        return GramAccumulator(len(plan.dense), plan.loras_of(tensor))

    def finish(tensor: str, acc: GramAccumulator) -> dict[str, np.ndarray]:
        m = acc.result()
        bad = nonfinite_index(m)
        if bad is not None:
            raise nonfinite_error(basis.names[bad], tensor)
        return {"gram": m, "numel": np.asarray(reader.numel(tensor), dtype=np.int64)}

    rows = resumable_pass(store, "vectors", key, plan, start, finish, save_every=save_every,
                          show_progress=show_progress, what="task vectors")
    tensors = list(rows)
    return TensorGrams(basis, tuple(tensors), np.stack([rows[t]["gram"] for t in tensors]) if tensors
                       else np.zeros((0, len(basis), len(basis))),
                       np.array([int(rows[t]["numel"]) for t in tensors], dtype=np.int64))


def task_vector_cosines(checkpoints: Sequence[str | os.PathLike[str]], *, base: str | os.PathLike[str],
                        exclude_embeddings: bool = False, allow_pickle: bool = False) -> Any:
    """Cosines of the task vectors ``θ_c − θ_base`` of checkpoint folders, no run folder needed.

    ``checkpoints`` and ``base`` are HF checkpoint folders (a LoRA adapter folder counts as its
    update ``s·B·A`` on ``base``). Weights are streamed tensor by tensor from safetensors.
    Returns a square DataFrame indexed by the folders' names (``a``, ``b`` for ``ckpt/a``, ``ckpt/b``).
    """
    from pathlib import Path

    import pandas as pd

    from aclarena.store.manifest import CheckpointSpec

    folders = [Path(os.fspath(c)).resolve() for c in checkpoints]
    base_dir = Path(os.fspath(base)).resolve()
    if not folders:
        raise AclarenaError("task_vector_cosines needs at least one checkpoint besides the base")
    labels = _unique_labels([base_dir, *folders])
    manifest = Manifest(name="folders", base=labels[0])
    manifest.add(CheckpointSpec(labels[0], str(base_dir), kind="base"))
    for label, folder in zip(labels[1:], folders, strict=True):
        adapter = (folder / "adapter_config.json").is_file()
        manifest.add(CheckpointSpec(label, str(folder), kind="consolidated", parent=labels[0],
                                    on=labels[0] if adapter else None))
    plan = open_plan(manifest, base_dir, [s.name for s in manifest], allow_pickle=allow_pickle)
    try:
        basis = basis_of(plan)
        grams = gram_pass(plan, basis, None, "", save_every=float("inf"))
    finally:
        plan.close()
    vecs = [TaskVector(f"{n} - {labels[0]}", n, labels[0], "cumulative") for n in labels[1:]]
    s = summarize(grams, vecs, base=labels[0], exclude_embeddings=exclude_embeddings)
    return pd.DataFrame(np.asarray(s.cos, dtype=float), index=labels[1:], columns=labels[1:])


def _unique_labels(folders: Sequence[Any]) -> list[str]:
    """Short names for folders: their last component, with as many parents as needed to tell apart
    different folders (a folder given twice gets a numbered second name)."""
    import re

    distinct = list(dict.fromkeys(folders))
    parts = {f: [p for p in f.parts if p != f.anchor] or ["root"] for f in distinct}
    depth = 1
    while depth < max(len(p) for p in parts.values()) and \
            len({"-".join(p[-depth:]) for p in parts.values()}) < len(distinct):
        depth += 1

    def clean(text: str) -> str:
        return re.sub(r"^[^A-Za-z0-9]+", "", re.sub(r"[^A-Za-z0-9._-]+", "_", text)) or "checkpoint"

    labels: list[str] = []
    seen: dict[str, int] = {}
    for f in folders:
        lab = clean("-".join(parts[f][-depth:]))
        seen[lab] = seen.get(lab, 0) + 1
        labels.append(lab if seen[lab] == 1 else f"{lab}.{seen[lab]}")
    return labels


def _check_by(by: str) -> str:
    if by not in BY:
        raise AclarenaError(f"by must be one of {', '.join(BY)}, got {by!r}")
    return by


@dataclass(frozen=True)
class VectorsOptions:
    """How ``vectors`` runs (``aclarena-diag vectors``'s options, checked when made): ``checkpoints`` limits
    the pass (their parents and the base are added), ``pairs`` (``"A-B:C-D"``) adds those cosines,
    ``force`` redoes a pass whose inputs match, an interrupted pass resumes from parts saved every
    ``save_every`` seconds."""

    checkpoints: str | tuple[str, ...] | None = None
    pairs: tuple[str, ...] = ()
    force: bool = False
    save_every: float = 120.0

    def __post_init__(self) -> None:
        if self.checkpoints is not None and not isinstance(self.checkpoints, str):
            object.__setattr__(self, "checkpoints", tuple(self.checkpoints))
        object.__setattr__(self, "pairs", tuple(self.pairs))
        if not self.save_every >= 0:
            raise AclarenaError(f"--save-every must be >= 0 seconds, got {self.save_every}")


def vectors(
    run_dir: RunPath,
    options: VectorsOptions | None = None,
    *,
    show_progress: bool = False,
    manifest: Manifest | None = None,
    **settings: Any,
) -> VectorsResult:
    """Task vectors of the run in ``run_dir`` (:class:`VectorsOptions`, or its fields as keywords): the Gram
    pass (reused when its inputs match), the summary of every view and the cosines of the pairs, written to
    the run's store."""
    o = options_of(VectorsOptions, options, settings)
    checkpoints, pairs, force, save_every = o.checkpoints, o.pairs, o.force, o.save_every
    manifest = manifest_or_load(run_dir, manifest)
    known = [s.name for s in manifest]
    parsed = [parse_pair(p, known) for p in pairs]
    pair_names = [n for (a, b), (c, d) in parsed for n in (a, b, c, d)]
    requested = ",".join(checkpoints) if checkpoints is not None and not isinstance(checkpoints, str) else checkpoints
    names = selection(manifest, requested, pair_names)
    require_parents(manifest, names)
    base = manifest.base
    assert base is not None  # selection() requires it
    store = ResultsStore(run_dir)
    text = manifest_text(run_dir)
    writes: list[str] = []
    plan = open_plan(manifest, run_dir, names)
    try:
        basis = basis_of(plan)
        settings = {"result": "task-vector-gram", "version": RESULT_VERSION, "basis": list(basis.names),
                    "on": list(basis.on), "fingerprints": [plan.fingerprints[n] for n in basis.names],
                    "chunk": CHUNK_ELEMENTS}
        key = settings_hash(settings)
        if stored_fingerprint(store, GRAM_KEY) == key and not force:
            with store.reader() as r:
                stored_gram = read_gram(r)
            grams = TensorGrams(basis, tuple(stored_gram.tensors), stored_gram.gram, stored_gram.numel)
            computed = False
        else:
            grams = gram_pass(plan, basis, store, key, save_every=save_every, show_progress=show_progress)
            writes.append(write_gram(store, GramData(basis=list(basis.names), kinds=list(basis.kinds),
                                                     on=list(basis.on), tensors=list(grams.tensors),
                                                     numel=grams.numel, gram=grams.grams, settings=settings,
                                                     fingerprint=key), manifest_text=text))
            finish_parts(store, "vectors")
            computed = True
    finally:
        plan.close()

    vecs, oracles, chain, others, projected, notes = study_vectors(manifest, names)
    summaries = {view: summarize(grams, vecs, base=base, oracles=oracles, chain=chain, others=others,
                                 projected=projected, exclude_embeddings=ex, notes=notes)
                 for view, ex in VIEWS.items()}
    sum_settings = {"gram": key, "vectors": [[v.label, v.plus, v.minus, v.kind] for v in vecs],
                    "oracles": [[o.name, o.domain] for o in oracles], "chain": chain, "others": others,
                    "projected": projected, "notes": notes, "version": RESULT_VERSION}
    sum_key = settings_hash(sum_settings)
    if stored_fingerprint(store, SUMMARY_KEY) != sum_key:
        payload = VectorSummaryData(views={view: summary_view(s) for view, s in summaries.items()},
                                    settings=sum_settings, fingerprint=sum_key)
        writes.append(write_vectors_summary(store, payload, manifest_text=text))
    tvs: list[tuple[TaskVector, TaskVector]] = []
    if parsed:
        tvs = [(TaskVector(f"{a} - {b}", a, b, "pair"), TaskVector(f"{c} - {d}", c, d, "pair"))
               for (a, b), (c, d) in parsed]
        labels = [f"{x.label} : {y.label}" for x, y in tvs]
        columns = {"pair": labels, "a": [x.plus for x, _ in tvs], "b": [x.minus for x, _ in tvs],
                   "c": [y.plus for _, y in tvs], "d": [y.minus for _, y in tvs]}
        views: dict[str, PairView] = {}
        for view, ex in VIEWS.items():
            _, g = pair_cosines(grams, tvs, exclude_embeddings=ex)
            glabels, gl = pair_cosines(grams, tvs, by="layer", exclude_embeddings=ex)
            views[view] = PairView(cos=g[0], group_labels=glabels, cos_group=gl)
        p_settings = {"gram": key, "pairs": labels}
        p_key = settings_hash(p_settings)
        if stored_fingerprint(store, PAIRS_KEY) != p_key:
            writes.append(write_vector_pairs(store, VectorPairsData(pairs=columns, views=views, settings=p_settings,
                                                                    fingerprint=p_key)))
    return VectorsResult(run=manifest.name, base=base, checkpoints=tuple(basis.names), computed=computed,
                         summaries=summaries, grams=grams, pairs=tuple(tvs), writes=tuple(writes))


def study_vectors(manifest: Manifest, names: list[str]) -> tuple[list[TaskVector], list[Oracle], list[str], list[str],
                                                                 list[int], list[str]]:
    """The study's task vectors for the checkpoints ``names`` of ``manifest``.

    Returns (vectors, oracles, chain, others, projected, notes): a stage update ``x − parent``
    for each checkpoint with a parent (for an adapter without one, the model it is on), the
    cumulative update ``x − base`` where the parent is not the base, the oracles (``kind =
    oracle``), the chain (the base, then the stages by depth), the consolidated checkpoints,
    the indices of the stage updates to project on oracle directions, and notes on domains
    without an oracle.
    """
    base = require_base(manifest)
    vectors: list[TaskVector] = []
    projected: list[int] = []
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
        domains = {d for n in stages if (d := manifest.resolve(n).domain)}
        for d in sorted(domains - have):
            notes.append(f"no oracle for domain {d!r}: its oracle views are skipped (add a checkpoint with "
                         f"kind = \"oracle\", domain = \"{d}\")")
    return vectors, oracles, chain, others, projected, notes


def summary_view(s: TaskVectorSummary) -> VectorSummaryView:
    """A :class:`TaskVectorSummary` as one stored view (:mod:`aclarena.results.vectors`)."""
    return VectorSummaryView(
        labels=[v.label for v in s.vectors], kinds=[v.kind for v in s.vectors], plus=[v.plus for v in s.vectors],
        minus=[v.minus for v in s.vectors], base=s.base, cos=s.cos, norm=s.norm, group_labels=list(s.group_labels),
        cos_group=s.cos_group, norm_group=s.norm_group, layer_mean_cos=s.layer_mean_cos,
        tensor_labels=list(s.tensor_labels), cos_tensor=s.cos_tensor, norm_tensor=s.norm_tensor,
        oracles=[o.name for o in s.oracles], oracle_domains=[o.domain for o in s.oracles], oracle_norm=s.oracle_norm,
        distance_checkpoints=list(s.distance_checkpoints), on_chain=np.asarray(s.on_chain, dtype=bool),
        distance=s.distance, distance_group=s.distance_group,
        projection_vectors=np.asarray(s.projection_vectors, dtype=np.int64), projection_cos=s.projection_cos,
        projection_length=s.projection_length, projection_coef=s.projection_coef,
        projection_cos_group=s.projection_cos_group, notes=list(s.notes))


def view_rows(s: TaskVectorSummary, by: str) -> tuple[list[str], Any, Any]:
    """Group labels, ``(G, V, V)`` cosines and ``(G, V)`` norms of the view ``by``."""
    if by == "global":
        return ["all"], s.cos[None], s.norm[None]
    if by == "layer":
        return s.group_labels, s.cos_group, s.norm_group
    return s.tensor_labels, s.cos_tensor, s.norm_tensor


def summary_json(s: TaskVectorSummary, by: str) -> dict[str, Any]:
    labels = [v.label for v in s.vectors]
    oracle_idx = s.oracle_vector_index()
    groups, cos, norms = view_rows(s, by)
    view = []
    for gi, g in enumerate(groups):
        for vi, lab in enumerate(labels):
            row: dict[str, Any] = {"group": g, "vector": lab, "norm": num(norms[gi, vi])}
            row["cos_oracle"] = {o.name: num(cos[gi, vi, oi]) for o, oi in zip(s.oracles, oracle_idx, strict=True)
                                 if oi is not None}
            view.append(row)
    return {
        "vectors": [{"label": v.label, "plus": v.plus, "minus": v.minus, "kind": v.kind, "norm": num(n)}
                    for v, n in zip(s.vectors, s.norm, strict=True)],
        "cosines": {"labels": labels, "matrix": nums(s.cos)},
        "layer_mean_cosines": nums(s.layer_mean_cos),
        "view": view,
        "oracles": [{"name": o.name, "domain": o.domain, "norm": num(n)} for o, n in zip(s.oracles, s.oracle_norm,
                                                                                       strict=True)],
        "distances": [{"checkpoint": c, "on_chain": bool(oc),
                       **{o.name: num(s.distance[ci, oi]) for oi, o in enumerate(s.oracles)}}
                      for ci, (c, oc) in enumerate(zip(s.distance_checkpoints, s.on_chain, strict=True))],
        "projections": [{"update": labels[v], **{o.name: {"cos": num(s.projection_cos[si, oi]),
                                                          "length": num(s.projection_length[si, oi]),
                                                          "coef": num(s.projection_coef[si, oi])}
                                                 for oi, o in enumerate(s.oracles)}}
                        for si, v in enumerate(s.projection_vectors)],
        "notes": s.notes,
    }
