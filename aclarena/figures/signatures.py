"""Drift signatures of updates (``aclarena-diag signatures``): SFT phases, RL phases, stages and
consolidations side by side, each measure with its bootstrap interval (the Tokens page).

Reads ``signatures/<update>/<domain>`` (:mod:`aclarena.results.signatures`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from aclarena.figures.palette import KIND_COLORS as _KINDS
from aclarena.figures.palette import TEMPLATE
from aclarena.results.signatures import list_signatures

if TYPE_CHECKING:
    from aclarena.store.results import StoreReader

#: the four headline measures drawn, with the chance level each share compares with
PANELS = (("kl_share_high", "KL share, top-entropy positions", "high_share"),
          ("kl_share_first_k", "KL share, first k reply tokens", "first_k_share"),
          ("barely_moved_low", "low-entropy positions barely moved", None),
          ("concentration_area", "concentration area", None))
KIND_COLORS = {k: _KINDS[k] for k in ("sft", "rl", "stage", "consolidation", "update")}
TABLE_COLUMNS = (("update", "update"), ("kind", "kind"), ("domain", "domain"), ("n_sequences", "seqs"),
                 ("kl_share_high", "KL share high"), ("high_share", "chance (high)"),
                 ("kl_share_first_k", "KL share first k"), ("first_k_share", "chance (first k)"),
                 ("barely_moved_low", "barely moved (low)"), ("flip_rate_high", "flips high"),
                 ("flip_rate_low", "flips low"), ("concentration_area", "conc. area"), ("kl_mean", "KL mean"))


def signature_rows(reader: StoreReader | None, kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """Stored signatures as flat rows (``<measure>``, ``<measure>_low``, ``<measure>_high``), optionally of some kinds."""
    out = []
    for s in list_signatures(reader):
        if kinds and s.kind not in kinds:
            continue
        row: dict[str, Any] = {"update": s.update, "kind": s.kind, "parent": s.parent, "child": s.child,
                               "domain": s.domain, "n_sequences": s.n_sequences, "high_share": s.high_share,
                               "first_k_share": s.first_k_share}
        for m, v in s.values.items():
            row[m], row[f"{m}_low"], row[f"{m}_high"] = v, s.low[m], s.high[m]
        row["first_k"] = s.settings.get("first_k")
        out.append(row)
    return out


KIND_ORDER = ("sft", "rl", "stage", "consolidation", "update")
KIND_NAMES = {"sft": "SFT", "rl": "RL", "stage": "stage", "consolidation": "consolidation", "update": "update"}


def ordered_rows(rows: list[dict[str, Any]], order: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Rows grouped by kind (SFT, then RL, then stages, consolidations, others), each group in ``order``
    (the run's checkpoints, curriculum order: the update's child) and then by name."""
    rank = {name: i for i, name in enumerate(order)}
    kinds = {k: i for i, k in enumerate(KIND_ORDER)}
    return sorted(rows, key=lambda r: (kinds.get(r["kind"], len(kinds)), rank.get(str(r.get("child")), len(rank)),
                                       str(r["update"]), str(r["domain"])))


def signatures_figure(rows: list[dict[str, Any]], order: Sequence[str] = ()) -> go.Figure:
    """One panel per headline measure, side by side with one shared axis of updates, grouped SFT vs RL
    (:func:`ordered_rows`; the labels are drawn once, left of the first panel, so none runs under a
    neighbour); one horizontal bar per update coloured by its kind, with its interval; the chance share
    as a marker on the two share panels."""
    from plotly.subplots import make_subplots

    rows = ordered_rows(rows, order)
    k = next((r["first_k"] for r in rows if r.get("first_k")), None)
    titles = [t.replace("first k", f"first {k}") if k else t for _, t, _ in PANELS]
    fig = make_subplots(rows=1, cols=len(PANELS), subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.03)
    # a two-level axis: kind, then the update (the group labels make "SFT vs RL" read at a glance)
    ys = [[KIND_NAMES.get(r["kind"], r["kind"]) for r in rows], [f"{r['update']} ({r['domain']})" for r in rows]]
    shown: set[str] = set()
    for col, (m, _, chance) in enumerate(PANELS, 1):
        for kind in dict.fromkeys(r["kind"] for r in rows):
            idx = [i for i, r in enumerate(rows) if r["kind"] == kind]
            fig.add_trace(go.Bar(
                y=[[ys[0][i] for i in idx], [ys[1][i] for i in idx]], x=[rows[i][m] for i in idx], orientation="h",
                name=KIND_NAMES.get(kind, kind), legendgroup=kind, showlegend=kind not in shown,
                marker_color=KIND_COLORS.get(kind, "#17becf"),
                error_x={"type": "data", "symmetric": False, "array": [rows[i][f"{m}_high"] - rows[i][m] for i in idx],
                         "arrayminus": [rows[i][m] - rows[i][f"{m}_low"] for i in idx]},
                customdata=[[rows[i][f"{m}_low"], rows[i][f"{m}_high"]] for i in idx],
                hovertemplate="%{y}<br>" + m + " %{x:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]<extra>"
                              + kind + "</extra>"), row=1, col=col)
            shown.add(kind)
        if chance:
            fig.add_trace(go.Scatter(y=ys, x=[r[chance] for r in rows], mode="markers", name="chance",
                                     legendgroup="chance", showlegend=col == 1,
                                     marker={"symbol": "line-ns-open", "size": 14, "color": "black"}), row=1, col=col)
    fig.update_layout(template=TEMPLATE, barmode="group", height=max(320, 26 * len(rows) + 170),
                      title="Drift signature of each update on its parent's generations (95% intervals over sequences)",
                      legend={"orientation": "h", "y": -0.12, "x": 0}, margin={"t": 90})
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(range=[0, 1.05])
    return fig
