"""Parameter displacement of a run: how far each update moved the weights, SFT against RL, how sparsely.

One streamed pass over every (checkpoint, parent) pair of the run sums, per tensor, ``‖Δθ‖²``,
``‖θ_parent‖²`` and the number of entries with ``|Δθ| > tol`` for each tolerance, exactly and
after rounding to bfloat16 (``displacement/stats``); norms, relative norms, sparsity curves per
layer and the SFT/RL ratio per stage are derived from it (``displacement/summary``).
:func:`displacement` is the work of ``aclarena-diag displacement``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.analysis._common import RunPath, frame, manifest_or_load, num, options_of
from aclarena.analysis.passes import (
    CHUNK_ELEMENTS,
    finish_parts,
    nonfinite_error,
    open_plan,
    parent_of,
    require_parents,
    resumable_pass,
    selection,
    settings_hash,
    stored_fingerprint,
)
from aclarena.diagnostics.displacement import (
    DisplacementAccumulator,
    DisplacementSummary,
    PhaseRatio,
    sft_rl_excluded,
    sft_rl_ratios,
    summarize_displacement,
)
from aclarena.errors import AclarenaError
from aclarena.results.displacement import (
    RESULT_VERSION,
    STATS_KEY,
    SUMMARY_KEY,
    DisplacementStatsData,
    DisplacementSummaryData,
    DisplacementView,
    read_displacement_stats,
    write_displacement_stats,
    write_displacement_summary,
)
from aclarena.store import CheckpointSpec, Manifest, ResultsStore

#: each stored view, and whether it leaves the input embeddings and output head out
VIEWS = {"all": False, "no-embeddings": True}
DEFAULT_TOLERANCES = (0.0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3)


@dataclass(frozen=True)
class DisplacementResult:
    """What :func:`displacement` computed (or reused): one summary and SFT/RL ratios per view
    (``"all"`` weights, ``"no-embeddings"``) and the store keys this call wrote."""

    run: str
    children: tuple[str, ...]
    parents: tuple[str, ...]
    specs: tuple[CheckpointSpec, ...]
    computed: bool
    summaries: Mapping[str, DisplacementSummary]
    ratios: Mapping[str, tuple[list[PhaseRatio], float, list[tuple[str, str]]]]
    writes: tuple[str, ...] = field(default=())

    def summary(self, exclude_embeddings: bool = False) -> DisplacementSummary:
        return self.summaries["no-embeddings" if exclude_embeddings else "all"]

    def stage_norms(self) -> dict[str, float | None]:
        """‖Δθ‖₂ over all weights of each chain checkpoint's update from its parent, by checkpoint."""
        s = self.summary()
        return {c: num(s.norm[i]) for i, (c, spec) in enumerate(zip(self.children, self.specs, strict=True))
                if spec.kind == "stage"}

    def sft_rl(self, exclude_embeddings: bool = False) -> tuple[list[PhaseRatio], float, list[tuple[str, str]]]:
        """Per stage its SFT/RL ratio; the overall ratio pooled over the stages with both phases and a non-zero RL
        update (NaN without one); and the stages left out of it, each with the reason."""
        return self.ratios["no-embeddings" if exclude_embeddings else "all"]

    def to_pandas(self, by: str = "global", exclude_embeddings: bool = False) -> Any:
        """DataFrame, one row per (group, update): ‖Δθ‖₂ and ‖Δθ‖₂/‖θ_parent‖₂."""
        return frame(view_rows(self.summary(exclude_embeddings), list(self.children), list(self.parents),
                           list(self.specs), by))

    def to_dict(self, by: str = "global", exclude_embeddings: bool = False) -> dict[str, Any]:
        """Plain data (strict JSON): what ``aclarena-diag displacement --json`` prints."""
        per, overall, excluded = self.sft_rl(exclude_embeddings)
        return {"run": self.run, "by": by, "exclude_embeddings": exclude_embeddings, "computed": self.computed,
                **summary_json(self.summary(exclude_embeddings), list(self.children), list(self.parents),
                               list(self.specs), per, overall, by),
                "sft_rl_excluded": [{"stage": st, "reason": why} for st, why in excluded]}


def parse_tolerances(text: str) -> tuple[float, ...]:
    """``"0,1e-6,1e-5"`` as sorted unique tolerances."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise AclarenaError(f"--tolerances {text!r} is not a comma-separated list of numbers (e.g. 0,1e-6,1e-5)") from None
    return _check_tolerances(values, text)


def _check_tolerances(values: Sequence[float], text: str) -> tuple[float, ...]:
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        raise AclarenaError(f"--tolerances {text!r} must list finite numbers >= 0 (e.g. 0,1e-6,1e-5)")
    return tuple(sorted(set(values)))


@dataclass(frozen=True)
class DisplacementOptions:
    """How ``displacement`` runs (``aclarena-diag displacement``'s options, checked when made): the updates of
    ``checkpoints`` only when given, the ``tolerances`` of the "barely moved" shares (``"0,1e-8"`` or numbers),
    ``force`` redoes a pass whose inputs match, parts saved every ``save_every`` seconds."""

    checkpoints: str | tuple[str, ...] | None = None
    tolerances: str | tuple[float, ...] = DEFAULT_TOLERANCES
    force: bool = False
    save_every: float = 120.0

    def __post_init__(self) -> None:
        if self.checkpoints is not None and not isinstance(self.checkpoints, str):
            object.__setattr__(self, "checkpoints", tuple(self.checkpoints))
        if not self.save_every >= 0:
            raise AclarenaError(f"--save-every must be >= 0 seconds, got {self.save_every}")
        tol = self.tolerances
        parsed = parse_tolerances(tol) if isinstance(tol, str) else \
            _check_tolerances([float(t) for t in tol], ",".join(map(str, tol)))
        object.__setattr__(self, "tolerances", tuple(parsed))


def displacement(
    run_dir: RunPath,
    options: DisplacementOptions | None = None,
    *,
    show_progress: bool = False,
    manifest: Manifest | None = None,
    **settings: Any,
) -> DisplacementResult:
    """Displacement of every update (checkpoint − parent) of the run in ``run_dir`` (:class:`DisplacementOptions`,
    or its fields as keywords), written to the run's store; the pass is reused when its inputs match."""
    o = options_of(DisplacementOptions, options, settings)
    checkpoints, force, save_every = o.checkpoints, o.force, o.save_every
    tolerances = tuple(float(x) for x in o.tolerances)  # parsed when made
    manifest = manifest_or_load(run_dir, manifest)
    requested = ",".join(checkpoints) if checkpoints is not None and not isinstance(checkpoints, str) else checkpoints
    names = selection(manifest, requested)
    require_parents(manifest, names)
    wanted = set(s.name for s in manifest.resolve_many(requested)) if requested else set(names)
    children = [n for n in names if n in wanted and parent_of(manifest, n) is not None]
    if not children:
        raise AclarenaError("no checkpoint with a parent to measure; set `parent` in the manifest "
                            "(displacement is θ − θ_parent)")
    store = ResultsStore(run_dir)
    writes: list[str] = []
    plan = open_plan(manifest, run_dir, names)
    try:
        columns = plan.dense + plan.adapters
        col = {n: i for i, n in enumerate(columns)}
        parents = [p for c in children if (p := parent_of(manifest, c)) is not None]  # every child has one
        pairs = [(col[c], col[p]) for c, p in zip(children, parents, strict=True)]
        settings = {"result": "displacement-stats", "version": RESULT_VERSION, "columns": columns,
                    "on": plan.adapter_on, "pairs": [[c, p] for c, p in zip(children, parents, strict=True)],
                    "fingerprints": [plan.fingerprints[n] for n in columns], "tolerances": list(tolerances),
                    "chunk": CHUNK_ELEMENTS}
        key = settings_hash(settings)
        if stored_fingerprint(store, STATS_KEY) == key and not force:
            with store.reader() as r:
                stats = read_displacement_stats(r)
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

            rows = resumable_pass(store, "displacement", key, plan, start, finish, save_every=save_every,
                                  show_progress=show_progress, what="displacement")
            tensors = list(rows)
            n_p, n_j = len(pairs), len(tolerances)

            def stack(f: str, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
                return np.stack([np.asarray(rows[t][f]) for t in tensors]) if tensors else np.zeros((0, *shape), dtype)

            stats = DisplacementStatsData(
                tensors=tensors, children=children, parents=parents, tolerances=np.asarray(tolerances),
                numel=np.array([int(rows[t]["numel"]) for t in tensors], dtype=np.int64),
                sq_delta=stack("sq_delta", (n_p,)), sq_parent=stack("sq_parent", (n_p,)),
                changed=stack("changed", (n_p, n_j), np.int64), changed_bf16=stack("changed_bf16", (n_p, n_j), np.int64),
                max_abs=stack("max_abs", (n_p,)), settings=settings, fingerprint=key)
            writes.append(write_displacement_stats(store, stats))
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
            stats.tensors, stats.numel, stats.sq_delta, stats.sq_parent, stats.changed, stats.changed_bf16, tolerances,
            exclude_embeddings=ex)
    ratio_rows = {}
    for view, s in summaries.items():
        per, overall = sft_rl_ratios(list(s.norm), phases, stages)
        ratio_rows[view] = (per, overall, sft_rl_excluded(list(s.norm), phases, stages))
    # ratio_rule 2: the overall SFT/RL ratio pools only stages with both phases and a non-zero RL update
    sum_settings = {"stats": key, "children": children, "phases": phases, "stages": stages,
                    "kinds": [s.kind for s in specs], "version": RESULT_VERSION, "ratio_rule": 2}
    sum_key = settings_hash(sum_settings)
    if stored_fingerprint(store, SUMMARY_KEY) != sum_key:
        payload = DisplacementSummaryData(views={view: summary_view(s, children, parents, specs, *ratio_rows[view])
                                                 for view, s in summaries.items()},
                                          settings=sum_settings, fingerprint=sum_key)
        writes.append(write_displacement_summary(store, payload))
    return DisplacementResult(run=manifest.name, children=tuple(children), parents=tuple(parents),
                              specs=tuple(specs), computed=computed, summaries=summaries, ratios=ratio_rows,
                              writes=tuple(writes))


def summary_view(s: DisplacementSummary, children: list[str], parents: list[str], specs: list[CheckpointSpec],
                 per: list[PhaseRatio], overall: float, excluded: list[tuple[str, str]] | None = None) -> DisplacementView:
    """A :class:`DisplacementSummary` as one stored view (:mod:`aclarena.results.displacement`)."""
    return DisplacementView(
        children=list(children), parents=list(parents), phases=[sp.phase for sp in specs],
        kinds=[sp.kind for sp in specs], domains=[sp.domain for sp in specs],
        tolerances=np.asarray(s.tolerances, dtype=np.float64), norm=s.norm, rel=s.rel, changed_frac=s.changed_frac,
        changed_frac_bf16=s.changed_frac_bf16, group_labels=list(s.group_labels), norm_group=s.norm_group,
        rel_group=s.rel_group, changed_frac_group=s.changed_frac_group, tensor_labels=list(s.tensor_labels),
        norm_tensor=s.norm_tensor, rel_tensor=s.rel_tensor,
        ratios=[{"stage": r.stage, "sft": r.sft, "rl": r.rl, "ratio": num(r.ratio), "pooled": r.pooled} for r in per],
        overall_ratio=float(overall),
        ratio_excluded=[{"stage": st, "reason": why} for st, why in excluded or []])


def view_rows(s: DisplacementSummary, children: list[str], parents: list[str], specs: list[CheckpointSpec], by: str) -> list[dict[str, Any]]:
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
                        "norm": num(norm[gi, p]), "rel": num(rel[gi, p])})
    return out


def summary_json(s: DisplacementSummary, children: list[str], parents: list[str], specs: list[CheckpointSpec], per: list[PhaseRatio], overall: float,
                 by: str) -> dict[str, Any]:
    return {
        "tolerances": list(s.tolerances),
        "updates": [{"checkpoint": c, "parent": p, "phase": sp.phase, "kind": sp.kind, "domain": sp.domain,
                     "norm": num(s.norm[i]), "rel": num(s.rel[i]),
                     "changed_frac": [num(x) for x in s.changed_frac[i]],
                     "changed_frac_bf16": [num(x) for x in s.changed_frac_bf16[i]]}
                    for i, (c, p, sp) in enumerate(zip(children, parents, specs, strict=True))],
        "view": view_rows(s, children, parents, specs, by),
        "sft_rl": [{"stage": r.stage, "sft": r.sft, "rl": r.rl, "ratio": num(r.ratio), "pooled": r.pooled}
                   for r in per],
        "sft_rl_overall": num(overall),
    }


