"""The order study (``aclarena-diag study --orders``): the pairwise interference matrix and the orders
ranked with their intervals (the Orders page; ``export``).

Reads ``orders/summary`` (:func:`aclarena.results.orders.read_orders`); builders take its report as JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from aclarena.figures import register_figure

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

RANK_BY = {"bwt": "BWT (higher: less forgetting)", "final_avg": "final average accuracy"}


def matrix_figure(data: dict[str, Any], what: str = "interference") -> go.Figure:
    """Heatmap: row = the earlier stage a, column = the stage b right after it; the cell is the mean over seeds of
    a's drop over b (``interference``) or of b's gain from a first (``transfer``), with its interval on hover."""
    domains = data["findings"]["matrix"]["domains"]
    cells = {(r["first"], r["second"]): (r if what == "interference" else r["transfer"])
             for r in data["findings"]["matrix"]["pairs"]}
    z, text = [], []
    for a in domains:
        zr, tr = [], []
        for b in domains:
            c = cells.get((a, b)) or {}
            m = c.get("mean")
            zr.append(m)
            if m is None:
                tr.append("")
            elif c.get("low") is not None:
                tr.append(f"{m:+.3f}<br>[{c['low']:+.3f}, {c['high']:+.3f}]")
            else:
                tr.append(f"{m:+.3f}")
        z.append(zr)
        text.append(tr)
    label = ("drop of the row's skill over the column's stage" if what == "interference"
             else "gain of the column's skill from training the row first")
    fig = go.Figure(go.Heatmap(z=z, x=[f"then {b}" for b in domains], y=[f"{a} first" for a in domains], text=text,
                               texttemplate="%{text}", colorscale="RdBu_r" if what == "interference" else "RdBu",
                               zmid=0, colorbar={"title": what}, hoverongaps=False,
                               hovertemplate="%{y}, %{x}: %{z:+.3f}<extra></extra>"))
    n = len(data.get("seeds", []))
    fig.update_layout(template="plotly_white",
                      title=f"Pairwise {what}<br><sup>{label} (mean, 95% t interval, {n} seeds)</sup>",
                      yaxis={"autorange": "reversed"})
    return fig


def ranking_figure(data: dict[str, Any], by: str = "bwt") -> go.Figure:
    """The full orders ranked by ``by`` (``bwt`` or ``final_avg``), each with its interval over seeds and the
    seeds' own values."""
    rows = [r for r in data["findings"]["orders"]["orders"] if r[by]["mean"] is not None]
    rows.sort(key=lambda r: r[by]["mean"])
    labels = [" → ".join(r["order"]) for r in rows]
    means = [r[by]["mean"] for r in rows]
    hi = [(r[by]["high"] - r[by]["mean"]) if r[by]["high"] is not None else 0 for r in rows]
    lo = [(r[by]["mean"] - r[by]["low"]) if r[by]["low"] is not None else 0 for r in rows]
    fig = go.Figure(go.Scatter(x=means, y=labels, mode="markers", name="mean over seeds", marker={"size": 10},
                               error_x={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo}))
    xs = [v for r in rows for v in r[by]["values"] if v is not None]
    ys = [lab for r, lab in zip(rows, labels, strict=True) for v in r[by]["values"] if v is not None]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="one seed", marker={"size": 6, "symbol": "x",
                                                                                  "color": "#7f7f7f"}))
    fig.update_layout(template="plotly_white", title=f"Orders ranked by {RANK_BY[by]} (95% t interval over seeds)",
                      xaxis_title=RANK_BY[by], height=max(320, 60 + 40 * len(rows)))
    return fig


@register_figure("orders/interference", "Order study: pairwise interference matrix", width=760, height=560)
def _interference(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.results.orders import read_orders

    study = read_orders(reader)
    if study is None or not study.findings["matrix"]["pairs"]:
        return []
    return [("", matrix_figure(study.to_json()))]


@register_figure("orders/ranking", "Order study: orders ranked by BWT and final accuracy", width=900, height=480)
def _ranking(reader: StoreReader | None, manifest: Manifest) -> list[tuple[str, go.Figure]]:
    from aclarena.results.orders import read_orders

    study = read_orders(reader)
    if study is None or not study.findings["orders"]["orders"]:
        return []
    return [(by, ranking_figure(study.to_json(), by)) for by in RANK_BY]
