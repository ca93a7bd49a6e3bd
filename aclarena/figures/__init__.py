"""Plotly figure builders, shared by the dashboard and ``aclarena-diag export``.

One module per topic (``overview``, ``tokens``, ``vectors``...). A module registers each
exportable figure with :func:`register_figure`; the builder reads what it needs from an
open results store (``None`` when the run has no results.h5 yet) and the manifest, and
returns zero or more ``(suffix, figure)`` pairs (zero when the run has no such result). Dashboard callbacks call the same builders (or finer-grained
functions of the same module) so that what is exported is what is shown.

Adding figures: write ``aclarena/figures/<topic>.py``, decorate builders with
``@register_figure("<topic>/<figure>", "Title")``, and add ``"<topic>"`` to
:data:`MODULES`.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

# Topic modules, in the order the report shows them.
MODULES = ("run", "overview", "tokens", "flips", "vectors", "monitor", "consolidation")

Builder = Callable[["StoreReader | None", "Manifest"], list[tuple[str, "go.Figure"]]]


@dataclass(frozen=True)
class FigureSpec:
    """An exportable figure: ``id`` (``topic/name``), a title, a builder and a default size."""

    id: str
    title: str
    build: Builder
    width: int = 900
    height: int = 520


FIGURES: dict[str, FigureSpec] = {}


def register_figure(fig_id: str, title: str, *, width: int = 900, height: int = 520) -> Callable[[Builder], Builder]:
    """Register ``builder`` under ``fig_id`` (``topic/name``) for export."""
    if "/" not in fig_id:
        raise ValueError(f"figure id must be 'topic/name', got {fig_id!r}")

    def deco(fn: Builder) -> Builder:
        FIGURES[fig_id] = FigureSpec(fig_id, title, fn, width, height)
        return fn

    return deco


def load_all() -> dict[str, FigureSpec]:
    """Import every topic module so that all figures are registered."""
    for name in MODULES:
        importlib.import_module(f"aclarena.figures.{name}")
    return FIGURES


@dataclass
class BuiltFigure:
    spec: FigureSpec
    name: str  # file stem: the id with '/' as '-', plus the builder's suffix
    figure: Any

    @property
    def title(self) -> str:
        return self.figure.layout.title.text or self.spec.title


def build_figures(reader: StoreReader | None, manifest: Manifest, pattern: str = "*") -> list[BuiltFigure]:
    """Build every registered figure whose id matches ``pattern`` (comma-separated globs)."""
    patterns = [p.strip() for p in pattern.split(",") if p.strip()] or ["*"]
    out: list[BuiltFigure] = []
    for spec in load_all().values():
        if not any(fnmatch.fnmatch(spec.id, p) for p in patterns):
            continue
        for suffix, fig in spec.build(reader, manifest):
            stem = spec.id.replace("/", "-") + (f"-{suffix}" if suffix else "")
            fig.update_layout(width=fig.layout.width or spec.width, height=fig.layout.height or spec.height)
            out.append(BuiltFigure(spec, stem, fig))
    return out


# kaleido drives a headless Chromium, which now and then never answers (plotly/Kaleido#134,
# #402): the export runs in a child process that is killed and retried once when it hangs.
EXPORT_TIMEOUT_S = 120.0
EXPORT_TIMEOUT_PER_IMAGE_S = 15.0
_EXPORT_CHILD = """
import json, sys
import plotly.io as pio
jobs = json.load(open(sys.argv[1], encoding="utf-8"))
pio.write_images([pio.from_json(j["figure"]) for j in jobs], [j["file"] for j in jobs],
                 format=[j["format"] for j in jobs], width=[j["width"] for j in jobs],
                 height=[j["height"] for j in jobs])
"""


def write_static(figures: list[BuiltFigure], out_dir: Path, formats: list[str], *,
                 attempts: int = 2) -> list[Path]:
    """Write PNG/SVG/PDF files with kaleido, all in one browser session (Debian chromium on PATH).

    The browser runs in a child process with a time limit; a hung export is killed and retried
    (``attempts`` in all), then reported as a one-line error.
    """
    import json
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    from aclarena.errors import AclarenaError

    jobs: list[dict[str, Any]] = []
    for bf in figures:
        for fmt in formats:
            jobs.append({"figure": bf.figure.to_json(), "file": str(out_dir / f"{bf.name}.{fmt}"), "format": fmt,
                         # kaleido ignores the layout's size unless it is passed explicitly
                         "width": bf.figure.layout.width or bf.spec.width,
                         "height": bf.figure.layout.height or bf.spec.height})
    if not jobs:
        return []
    timeout = EXPORT_TIMEOUT_S + EXPORT_TIMEOUT_PER_IMAGE_S * len(jobs)
    with tempfile.TemporaryDirectory(prefix="aclarena-export-") as tmp:
        spec = Path(tmp) / "jobs.json"
        spec.write_text(json.dumps(jobs), encoding="utf-8")
        why = ""
        for _ in range(max(1, attempts)):
            proc = subprocess.Popen([sys.executable, "-c", _EXPORT_CHILD, str(spec)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                _, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the child and its browser
                proc.communicate()
                why = f"kaleido's browser did not answer within {timeout:.0f} s"
                continue
            if proc.returncode == 0:
                return [Path(j["file"]) for j in jobs]
            lines = [ln for ln in (err or "").strip().splitlines() if ln.strip()]
            raise AclarenaError(f"figure export failed: {lines[-1] if lines else f'exit code {proc.returncode}'}; "
                                "check that chromium is installed (kaleido needs it), or export --format html")
    raise AclarenaError(f"figure export failed: {why} ({attempts} tries); rerun, or export --format html")


def write_html_report(figures: list[BuiltFigure], path: Path, title: str) -> Path:
    """One self-contained HTML page: plotly.js inlined once, then every figure."""
    import html

    import plotly.io as pio

    parts = []
    for i, bf in enumerate(figures):
        div = pio.to_html(bf.figure, full_html=False, include_plotlyjs=(i == 0), div_id=f"fig-{bf.name}")
        parts.append(f'<section id="{html.escape(bf.name)}"><h2>{html.escape(bf.title)}</h2>{div}</section>')
    body = "\n".join(parts) or "<p>No results in this run yet: run an analysis first.</p>"
    toc = "".join(f'<li><a href="#{html.escape(bf.name)}">{html.escape(bf.title)}</a></li>' for bf in figures)
    page = (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px}"
        "section{margin-bottom:3em}</style></head>"
        f"<body><h1>{html.escape(title)}</h1><ul>{toc}</ul>{body}</body></html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path
