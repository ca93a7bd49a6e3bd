"""Drift signatures of updates (``aclarena-diag signatures``): SFT phases, RL phases, stages and
consolidations side by side, each measure with its bootstrap interval (the Tokens page).

Reads ``signatures/<update>/<domain>`` (:mod:`aclarena.store.signatures`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from aclarena.store.signatures import list_signatures

if TYPE_CHECKING:
    from aclarena.store.results import StoreReader

#: the four headline measures drawn, with the chance level each share compares with
PANELS = (("kl_share_high", "KL share, top-entropy positions", "high_share"),
          ("kl_share_first_k", "KL share, first k reply tokens", "first_k_share"),
          ("barely_moved_low", "low-entropy positions barely moved", None),
          ("concentration_area", "concentration area", None))
KIND_COLORS = {"sft": "#1f77b4", "rl": "#d62728", "stage": "#7f7f7f", "consolidation": "#2ca02c",
               "update": "#9467bd"}
TABLE_COLUMNS = (("update", "update"), ("kind", "kind"), ("domain", "domain"), ("n_sequences", "seqs"),
                 ("kl_share_high", "KL share high"), ("high_share", "chance (high)"),
                 ("kl_share_first_k", "KL share first k"), ("first_k_share", "chance (first k)"),
                 ("barely_moved_low", "barely moved (low)"), ("flip_rate_high", "flips high"),
                 ("flip_rate_low", "flips low"), ("concentration_area", "conc. area"), ("kl_mean", "KL mean"))


def signature_rows(reader: StoreReader | None, kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """Stored signatures as flat rows (``<measure>``, ``<measure>_low``, ``<measure>_high``), optionally of some kinds."""
    out = []
    for s in list_signatures(reader):
        if kinds and s["kind"] not in kinds:
            continue
        row = {k: s[k] for k in ("update", "kind", "parent", "child", "domain", "n_sequences", "high_share",
                                 "first_k_share")}
        for m, v in s["values"].items():
            row[m], row[f"{m}_low"], row[f"{m}_high"] = v, s["low"][m], s["high"][m]
        row["first_k"] = s["settings"].get("first_k")
        out.append(row)
    return out


def signatures_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """One panel per headline measure; one bar per update coloured by its kind, with its interval;
    the chance share as a marker line on the two share panels."""
    from plotly.subplots import make_subplots

    k = next((r["first_k"] for r in rows if r.get("first_k")), None)
    titles = [t.replace("first k", f"first {k}") if k else t for _, t, _ in PANELS]
    fig = make_subplots(rows=1, cols=len(PANELS), subplot_titles=titles)
    labels = [f"{r['update']} ({r['domain']})" for r in rows]
    shown: set[str] = set()
    for col, (m, _, chance) in enumerate(PANELS, 1):
        for kind in dict.fromkeys(r["kind"] for r in rows):
            idx = [i for i, r in enumerate(rows) if r["kind"] == kind]
            fig.add_trace(go.Bar(
                x=[labels[i] for i in idx], y=[rows[i][m] for i in idx], name=kind, legendgroup=kind,
                showlegend=kind not in shown, marker_color=KIND_COLORS.get(kind, "#17becf"),
                error_y={"type": "data", "symmetric": False, "array": [rows[i][f"{m}_high"] - rows[i][m] for i in idx],
                         "arrayminus": [rows[i][m] - rows[i][f"{m}_low"] for i in idx]},
                hovertemplate="%{x}<br>" + m + " %{y:.3f}<extra>" + kind + "</extra>"), row=1, col=col)
            shown.add(kind)
        if chance:
            fig.add_trace(go.Scatter(x=labels, y=[r[chance] for r in rows], mode="markers", name="chance",
                                     legendgroup="chance", showlegend=col == 1,
                                     marker={"symbol": "line-ew-open", "size": 18, "color": "black"}), row=1, col=col)
    fig.update_layout(template="plotly_white", barmode="group", height=420,
                      title="Drift signature of each update on its parent's generations (95% intervals over sequences)")
    fig.update_xaxes(tickangle=45, categoryorder="array", categoryarray=labels)
    fig.update_yaxes(range=[0, 1.05])
    return fig
