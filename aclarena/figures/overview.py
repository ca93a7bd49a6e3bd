"""Overview figures: the capability matrix, each suite's score along the chain, the CL metrics.

* ``overview/capability-matrix``: a heatmap, checkpoints x suites; rows are the base and
  the stages in curriculum order, then single-task oracles, then consolidated models (and
  any other checkpoint); columns are in-domain suites, then out-of-domain, then general.
* ``overview/chain-scores``: every suite's score at each checkpoint of the chain, the
  peak of each marked (not on a flat suite), lines bridged over unscored checkpoints, so
  that one sees which stage loses a skill.

Every score carries a 95% percentile-bootstrap interval over its items
(:func:`score_intervals`): in the matrix's hover and as error bars along the chain.
* ``overview/cl-metrics``: the continual-learning metrics of the chain as a table
  (formulas in docs/cl-metrics.md).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from aclarena.diagnostics.cl_metrics import METRIC_LABELS as CL_LABELS
from aclarena.errors import AclarenaError
from aclarena.figures import figure_options, register_figure
from aclarena.figures.palette import TEMPLATE
from aclarena.results.capability import (
    CapabilityMatrix,
    chain_data,
    load_matrix,
    read_item_ids,
    read_outcomes,
    stage_chains,
)

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

SCORES = {"mean": "greedy accuracy", "avg_k_mean": "avg@k (sampled)"}
ROLE_DASH = {"id": "solid", "ood": "dash", "general": "dot", "other": "dashdot"}
# the figures say them in sentence case
METRIC_LABELS = {k: v[0].upper() + v[1:] for k, v in CL_LABELS.items()}


#: what each metric means and what a good value looks like (the Overview's tooltips; docs/cl-metrics.md)
METRIC_TIPS = {
    "average_accuracy": "Mean final score over the chain's tasks. Higher is better.",
    "backward_transfer": "Mean change of each earlier task from just after learning it to the end. "
                         "Negative = forgetting; 0 or above is good.",
    "forward_transfer": "Score on a task just before it is trained, minus the base's. Above 0 = earlier stages helped.",
    "forgetting_max": "Mean over earlier tasks of best earlier score minus final score. 0 is good.",
    "forgetting_first_last": "Mean over earlier tasks of the score just after learning minus final. 0 is good.",
    "retention_vs_oracle": "Final score / the single-task oracle's, averaged. 1 = nothing lost against the oracle.",
    "average_incremental_accuracy": "Mean of the average accuracy after each stage. Higher is better.",
    "sample_forgetting": "Share of items right after learning and wrong at the end. 0 is good.",
    "sample_backward_transfer": "Share of items wrong after learning and right at the end. Higher is better.",
}


def row_groups(matrix: CapabilityMatrix, manifest: Manifest) -> list[tuple[str, str]]:
    """``(checkpoint, group)`` in display order: chain(s) from the base, oracles, consolidated, others."""
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    try:
        chains = stage_chains(manifest)
    except AclarenaError:
        chains = []
    for chain in chains:
        for spec in chain:
            if spec.name not in seen:
                rows.append((spec.name, "base" if spec.kind == "base" else "stage"))
                seen.add(spec.name)
    for kind in ("oracle", "consolidated"):
        for spec in manifest:
            if spec.kind == kind and spec.name not in seen:
                rows.append((spec.name, kind))
                seen.add(spec.name)
    for spec in manifest:
        if spec.name not in seen:
            rows.append((spec.name, spec.kind))
            seen.add(spec.name)
    for name in matrix.checkpoints:  # scored but no longer in the manifest
        if name not in seen:
            rows.append((name, "other"))
            seen.add(name)
    present = set(matrix.checkpoints)
    return [(n, g) for n, g in rows if n in present]


def _item_scores(reader: StoreReader, key: str, what: str) -> np.ndarray | None:
    """One score per item of a cell: greedy (or sampled, ``avg_k_mean``) outcomes averaged over
    seeds (and samples) when every seed saw the same items, else every (seed, item) outcome."""
    a = read_outcomes(reader, key, sampled=what == "avg_k_mean")
    if a is None:
        return None
    if a.ndim == 3:
        a = a.mean(axis=2)
    if a.ndim != 2 or a.size == 0:
        return None
    if a.shape[0] > 1:
        stored = read_item_ids(reader, key)
        ids = np.asarray(stored) if stored is not None else None
        if ids is not None and ids.size == a.size and not (ids.reshape(a.shape) == ids.reshape(a.shape)[0]).all():
            return a.ravel()
    return a.mean(axis=0)


@functools.lru_cache(maxsize=8)
def _intervals_cached(path: str, mtime_ns: int, what: str) -> dict[tuple[str, str], tuple[float, float, int]]:
    from aclarena.diagnostics.bootstrap import bootstrap_mean_ci
    from aclarena.store.results import ResultsStore

    out: dict[tuple[str, str], tuple[float, float, int]] = {}
    with ResultsStore(os.path.dirname(path)).reader() as r:
        for cell in load_matrix(r).cells.values():  # the latest result of each cell
            if not cell.ok:
                continue
            items = _item_scores(r, cell.key, what)
            if items is not None and len(items):
                lo, hi = bootstrap_mean_ci(items)
                out[(cell.checkpoint, cell.suite)] = (lo, hi, len(items))
    return out


def score_intervals(reader: StoreReader | None, what: str = "mean") -> dict[tuple[str, str], tuple[float, float, int]]:
    """(checkpoint, suite) -> (low, high, n items) of the 95% bootstrap interval of its score
    (cells without per-item outcomes have none). Cached per file version."""
    if reader is None:
        return {}
    path = str(reader.path)
    return _intervals_cached(path, os.stat(path).st_mtime_ns, what)


def capability_heatmap(matrix: CapabilityMatrix, manifest: Manifest, what: str = "mean",
                       intervals: dict[tuple[str, str], tuple[float, float, int]] | None = None) -> go.Figure:
    """Checkpoints x suites, scores in [0, 1]; error cells marked, unscored cells labelled; the hover
    gives each score's bootstrap interval. Each cell's ``customdata`` starts with [checkpoint, suite]."""
    rows = row_groups(matrix, manifest)
    names = [n for n, _ in rows]
    z = matrix.array(names, matrix.suites, what)
    intervals = intervals or {}
    text, hover = [], []
    for n, row in zip(names, z, strict=True):
        line, tips = [], []
        for s, v in zip(matrix.suites, row, strict=True):
            cell = matrix.get(n, s)
            if cell is not None and not cell.ok:
                line.append("error")
                tips.append([n, s, cell.error or "error"])
            elif cell is None or math.isnan(v):
                line.append("not scored")
                tips.append([n, s, "not scored: run aclarena-diag eval on it"])
            else:
                ci = intervals.get((n, s))
                line.append(f"{v:.2f}")
                tips.append([n, s, f"95% CI [{ci[0]:.2f}, {ci[1]:.2f}] over {ci[2]} items (bootstrap); "
                                   "click for per-item outcomes" if ci else f"{cell.n_items} items"])
        text.append(line)
        hover.append(tips)
    labels = [f"{n} ({g})" if g not in ("stage", "base") else n for n, g in rows]
    fig = go.Figure(go.Heatmap(
        z=z, x=matrix.suites, y=labels, text=text, texttemplate="%{text}", zmin=0, zmax=1,
        colorscale="Viridis", colorbar=dict(title=SCORES.get(what, what)), customdata=hover,
        hovertemplate="%{y}<br>%{x}: %{z:.3f}<br>%{customdata[2]}<extra></extra>", hoverongaps=True,
        textfont=dict(size=11),
    ))
    fig.update_layout(title=f"Capability matrix ({SCORES.get(what, what)})", template=TEMPLATE,
                      yaxis=dict(autorange="reversed", title=None), xaxis=dict(title=None, side="top"),
                      height=max(320, 60 + 38 * len(names)), margin=dict(l=160, t=110))
    return fig


def chain_lines(matrix: CapabilityMatrix, manifest: Manifest, chain: str | None = None,
                what: str = "mean", intervals: dict[tuple[str, str], tuple[float, float, int]] | None = None
                ) -> go.Figure:
    """Each suite's score at every checkpoint of the chain with its bootstrap interval; lines bridge
    unscored checkpoints; a star marks each suite's peak unless the suite is flat."""
    from aclarena.results.capability import pick_chain

    names = [s.name for s in pick_chain(manifest, chain)]
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly
    fig = go.Figure()
    values = matrix.array(names, matrix.suites, what)
    for j, suite in enumerate(matrix.suites):
        col = values[:, j]
        if np.isnan(col).all():
            continue
        role = matrix.suite_info.get(suite, (None, "other"))[1]
        color = palette[j % len(palette)]
        ci = [(intervals or {}).get((n, suite)) for n in names]
        upper = [None if c is None or math.isnan(v) else c[1] - v for c, v in zip(ci, col, strict=True)]
        lower = [None if c is None or math.isnan(v) else v - c[0] for c, v in zip(ci, col, strict=True)]
        fig.add_trace(go.Scatter(x=names, y=col, mode="lines+markers", name=suite, legendgroup=suite,
                                 line=dict(dash=ROLE_DASH.get(role, "solid"), color=color), connectgaps=True,
                                 error_y=dict(type="data", array=upper, arrayminus=lower, visible=True, thickness=1,
                                              width=3, color=color),
                                 hovertemplate=f"{suite}<br>%{{x}}: %{{y:.3f}}<extra></extra>"))
        finite = col[np.isfinite(col)]
        if len(finite) < 2 or finite.max() - finite.min() < 1e-9:
            continue  # a flat suite has no peak
        peak = int(np.nanargmax(col))
        fig.add_trace(go.Scatter(x=[names[peak]], y=[col[peak]], mode="markers", legendgroup=suite, showlegend=False,
                                 marker=dict(symbol="star", size=14, color=color, line=dict(width=1, color="#333")),
                                 hovertemplate=f"{suite} peaks at %{{x}}: %{{y:.3f}}<extra></extra>"))
    fig.update_layout(title="Scores along the chain (star: peak; bars: 95% bootstrap interval; lines bridge unscored "
                            "checkpoints)<br><sub>solid in-domain, dashed out-of-domain, dotted general</sub>",
                      template=TEMPLATE, xaxis=dict(title="checkpoint (curriculum order)"),
                      yaxis=dict(title=SCORES.get(what, what), range=[-0.02, 1.02]))
    return fig


def metric_rows(matrix: CapabilityMatrix, manifest: Manifest, reader: StoreReader | None,
                chain: str | None = None, what: str = "mean", suite_of: Mapping[str, str] | None = None
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """The CL metrics of a chain as ``[{"metric", "value"}]`` rows, and notes (the first names the stages
    and the suite measuring each domain: ``suite_of``'s choice, else :func:`suite_choices`' default)."""
    from aclarena.diagnostics.cl_metrics import cl_report

    data = chain_data(matrix, manifest, reader, chain=chain, what=what, suite_of=suite_of)
    rep = cl_report(data.R, data.tasks, base=data.base, oracle=data.oracle, items=data.items)
    rows = [{"metric": METRIC_LABELS[k], "key": k, "value": None if math.isnan(v) else v}
            for k, v in rep.summary().items()]
    notes = [f"stages: {' -> '.join(data.stages)}; suites: {', '.join(data.suites)}", *data.notes]
    return rows, notes


def metrics_table_figure(rows: list[dict[str, Any]], title: str, notes: Sequence[str] = ()) -> go.Figure:
    """The metrics as a table; ``notes`` (which stages and suites, which was chosen) under the title."""
    if notes:
        title += "<br><sup>" + "<br>".join(notes) + "</sup>"
    fig = go.Figure(go.Table(
        header=dict(values=["metric", "value"], align="left"),
        cells=dict(values=[[r["metric"] for r in rows],
                           ["-" if r["value"] is None else f"{r['value']:.3f}" for r in rows]], align="left"),
    ))
    fig.update_layout(title=title, margin=dict(t=60 + 18 * len(notes), b=10))
    return fig


def check_chain_options(reader: StoreReader | None, manifest: Manifest, options: Any) -> None:
    """Before anything is drawn: a named chain exists, and each ``suite_of`` domain is a stage domain of the
    chain(s) drawn with a suite evaluated for it (one line, as ``forgetting`` says it)."""
    from aclarena.results.capability import pick_chain

    if options.chain is None and not options.suite_of:
        return
    if options.chain is not None:
        pick_chain(manifest, options.chain)
    leaves = [options.chain] if options.chain is not None else _chains(manifest)
    matrix = load_matrix(reader, manifest)
    trained = {s.domain for leaf in leaves for s in pick_chain(manifest, leaf)[1:] if s.domain}
    for d, suite in options.suite_of.items():
        if d not in trained:
            raise AclarenaError(f"--suite-of {d}={suite}: no stage of the chain trains domain {d!r} (its domains: "
                                f"{', '.join(sorted(trained)) or 'none'})")
        if suite not in matrix.suites:
            from aclarena.errors import unknown_name

            raise unknown_name(f"suite for domain {d!r}", suite, matrix.suites, hint="run `aclarena-diag eval` first")


def _chains(manifest: Manifest) -> list[str | None]:
    """The chains to draw: export's ``--chain`` when given, else every chain (None: the only one)."""
    chosen = figure_options().chain
    if chosen is not None:
        return [chosen]
    try:
        chains = stage_chains(manifest)
    except AclarenaError:
        return []
    chains = [c for c in chains if len(c) > 1]
    return [None] if len(chains) == 1 else [c[-1].name for c in chains]


@register_figure("overview/capability-matrix", "Capability matrix", width=1000, height=560)
def _matrix(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    matrix = load_matrix(reader, manifest)
    if not matrix.cells:
        return []
    return [("", capability_heatmap(matrix, manifest))]


@register_figure("overview/chain-scores", "Scores along the chain", width=1000, height=520)
def _chain(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    matrix = load_matrix(reader, manifest)
    if not matrix.cells:
        return []
    return [(leaf or "", chain_lines(matrix, manifest, leaf)) for leaf in _chains(manifest)]


@register_figure("overview/cl-metrics", "Continual-learning metrics", width=800, height=420)
def _metrics(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    matrix = load_matrix(reader, manifest)
    if not matrix.cells:
        return []
    out = []
    opts = figure_options()
    for leaf in _chains(manifest):
        try:
            rows, notes = metric_rows(matrix, manifest, reader, leaf, suite_of=opts.suite_of)
        except AclarenaError:
            if opts.chain is not None or opts.suite_of:
                raise  # a choice the user made that does not hold: say so (export checks it first)
            continue
        out.append((leaf or "", metrics_table_figure(rows, "Continual-learning metrics"
                                                     + (f" (chain to {leaf})" if leaf else ""), notes)))
    return out


def cell_outcomes(reader: StoreReader, matrix: CapabilityMatrix, manifest: Manifest, checkpoint: str, suite: str,
                  what: str = "mean") -> dict[str, Any]:
    """The per-item outcomes of one matrix cell beside its parent's on the same items.

    Returns ``{"checkpoint", "suite", "parent", "score", "interval", "rows", "note"}``; each row
    has ``item``, ``score`` (mean over seeds, and samples for avg@k), ``parent`` (or None) and
    ``change`` ("lost", "gained" or "").
    """
    cell = matrix.get(checkpoint, suite)
    out: dict[str, Any] = {"checkpoint": checkpoint, "suite": suite, "parent": None, "rows": [], "note": ""}
    if cell is None:
        out["note"] = f"{checkpoint} was not scored on {suite}: run aclarena-diag eval on it"
        return out
    if not cell.ok:
        out["note"] = f"{checkpoint} on {suite} failed: {cell.error}"
        return out
    out["score"] = getattr(cell, what)
    out["interval"] = score_intervals(reader, what).get((checkpoint, suite))

    def per_item(c: Any) -> dict[str, float] | None:
        ids = read_item_ids(reader, c) if c is not None and c.ok else None
        if ids is None:
            return None
        scores = _item_scores(reader, c.key, what)
        if scores is None:
            return None
        ids = ids[:len(scores)] if len(ids) != len(scores) else ids
        return dict(zip(ids, scores.tolist(), strict=False))

    mine = per_item(cell)
    if mine is None:
        out["note"] = f"{checkpoint} on {suite} has no per-item outcomes (imported scores)"
        return out
    parent = manifest.resolve(checkpoint).parent if checkpoint in manifest else None
    theirs = per_item(matrix.get(parent, suite)) if parent else None
    if theirs is not None:
        out["parent"] = parent
    for item, v in mine.items():
        p = theirs.get(item) if theirs else None
        change = "" if p is None or abs(v - p) < 1e-9 else ("lost" if v < p else "gained")
        out["rows"].append({"id": item, "item": item, "score": v, "parent": p, "change": change})
    if theirs is not None:
        lost = sum(r["change"] == "lost" for r in out["rows"])
        gained = sum(r["change"] == "gained" for r in out["rows"])
        out["note"] = f"against its parent {parent} on the same items: {lost} lost, {gained} gained"
    return out
