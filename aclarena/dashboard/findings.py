"""The Overview's "Findings" panel: ``findings.json`` of ``aclarena-diag study`` (docs/study.md).

One row per finding: the study's number, the mini arena's mean ± sample standard deviation over
seeds, every seed's value, and how many seeds measured it; then the held-out validation of the
early warning (or the one line saying why there is none) and each part's wall time. A run without
``findings.json`` gets no panel; an unreadable file gets one line naming it and the fix.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dash import dash_table, html

FILE = "findings.json"


def load_findings(run_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(findings, None), (None, None) without a file, or (None, a one-line error)."""
    from aclarena.jsonl import StrictJsonError, strict_json

    path = Path(run_dir) / FILE
    if not path.is_file():
        return None, None
    try:
        data = strict_json(path)
    except (StrictJsonError, OSError, UnicodeDecodeError) as e:
        return None, f"{e}".strip() or f"{path}: unreadable"
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        return None, f"{path}: no `rows` list; rerun aclarena-diag study to rewrite it"
    return data, None


def _num(x: Any, digits: int) -> str:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return "-"
    return f"{x:.{digits}f}"


def findings_rows(data: dict[str, Any]) -> list[dict[str, str]]:
    """Table rows of the panel (plain strings, as shown)."""
    n = len(data.get("seeds") or [])
    out = []
    for r in data["rows"]:
        if not isinstance(r, dict):
            continue
        d = r.get("digits", 2) if isinstance(r.get("digits"), int) else 2
        values = r.get("values") or []
        mean = _num(r.get("mean"), d)
        spread = r.get("spread")
        mini = mean if spread is None or mean == "-" else f"{mean} ± {_num(spread, d)}"
        measured = sum(v is not None for v in values)
        out.append({"finding": str(r.get("finding", "")), "quantity": str(r.get("quantity", "")),
                    "study": str(r.get("study") or "-"), "mini": mini,
                    "seeds": ", ".join(_num(v, d) for v in values) or "-",
                    "n": f"{measured}/{n}" if n else str(measured)})
    return out


def _validation(v: Any) -> Any:
    from aclarena.diagnostics.early_warning import PREDICTOR_LABELS

    if not isinstance(v, dict):
        return html.P("Held-out validation of the early warning: not in this findings.json.", className="note",
                      id="findings-validation")
    if v.get("status") != "ok":
        return html.P(f"Held-out validation of the early warning: not run: {v.get('reason')}", className="note",
                      id="findings-validation")
    fit = ",".join(map(str, v.get("fit_seeds", [])))
    held = ", ".join(map(str, v.get("held_out_seeds", [])))
    rows = [{"predictor": PREDICTOR_LABELS.get(r.get("predictor"), str(r.get("predictor"))),
             "threshold": _num(r.get("threshold"), 4), "lead": _num(r.get("lead_mean"), 1),
             "detected": str(r.get("detected", 0)), "false_alarms": str(r.get("false_alarms", 0)),
             "misses": str(r.get("misses", 0)), "r2": _num(r.get("r2"), 2)} for r in v.get("predictors", [])]
    cols = [("predictor", "predictor"), ("threshold", f"threshold (fit on seed {fit})"), ("lead", "mean lead (steps)"),
            ("detected", "drops warned"), ("false_alarms", "false alarms"), ("misses", "misses"),
            ("r2", "R² vs drop (all seeds)")]
    return html.Div([
        html.H4(f"Early warning held out: fit on seed {fit}, reported on seeds {held}", id="findings-validation"),
        # dash/dash_table/__init__.py is `# type: ignore`d, so mypy misses the DataTable it re-exports
        dash_table.DataTable(id="findings-validation-table", columns=[{"id": i, "name": n} for i, n in cols],  # type: ignore[attr-defined]
                             data=rows, style_cell={"fontFamily": "inherit", "fontSize": "0.85em", "textAlign": "left"}),
        html.Ul([html.Li(str(x)) for x in v.get("notes", [])], className="note"),
    ])


def findings_panel(run_dir: Path) -> Any:
    """The panel, or an empty span when the run has no findings.json."""
    data, error = load_findings(run_dir)
    if error is not None:
        return html.Div([html.H3("Findings"), html.P(error, className="note", id="findings-error")],
                        id="findings-panel")
    if data is None:
        return html.Span(id="findings-panel")
    seeds = data.get("seeds") or []
    cols = [("finding", "finding"), ("quantity", "quantity"), ("study", "study"),
            ("mini", "mini arena (mean ± std over seeds)"), ("seeds", "per seed"), ("n", "seeds measured")]
    times = data.get("part_times") or {}
    made = data.get("made_by") or {}
    errors = data.get("errors") or {}
    return html.Div([
        html.H3("Findings"),
        html.P(f"aclarena-diag study over {len(seeds)} seeds ({', '.join(map(str, seeds))}): the study's numbers "
               "beside the mini arena's mean ± sample standard deviation (n - 1) over seeds."
               + (f" Made by `{made['command']}` on {made.get('date', '?')}." if made.get("command") else ""),
               className="note", id="findings-caption"),
        # dash/dash_table/__init__.py is `# type: ignore`d, so mypy misses the DataTable it re-exports
        dash_table.DataTable(id="findings-table", columns=[{"id": i, "name": n} for i, n in cols],  # type: ignore[attr-defined]
                             data=findings_rows(data), sort_action="native", filter_action="native", page_size=25,
                             export_format="csv", export_headers="display",
                             style_cell={"fontFamily": "inherit", "fontSize": "0.85em", "textAlign": "left",
                                         "whiteSpace": "normal", "height": "auto"}),
        _validation(data.get("validation")),
        html.P("Wall time per part: " + (", ".join(f"{k} {_num(v, 1)} s" for k, v in times.items()) or "-"),
               className="note", id="findings-times"),
        html.Ul([html.Li(f"the {k} step did not finish: {e}") for k, e in errors.items()], className="note",
                id="findings-errors"),
    ], id="findings-panel")
