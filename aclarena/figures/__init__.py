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
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader

# Topic modules, in the order the report shows them.
MODULES = ("run", "overview", "tokens", "flips", "vectors", "monitor", "consolidation", "orders")

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


@dataclass(frozen=True)
class FigureOptions:
    """Choices a builder may read (:func:`figure_options`): the chain of stages (its last stage; None: one
    figure per chain) and the suite measuring each domain (``forgetting --suite-of``'s DOMAIN=SUITE)."""

    chain: str | None = None
    suite_of: Mapping[str, str] = field(default_factory=dict)


_OPTIONS: ContextVar[FigureOptions | None] = ContextVar("aclarena_figure_options", default=None)


def figure_options() -> FigureOptions:
    """The options of the :func:`build_figures` call in progress (defaults outside one)."""
    return _OPTIONS.get() or FigureOptions()


def build_figures(reader: StoreReader | None, manifest: Manifest, pattern: str = "*",
                  options: FigureOptions | None = None) -> list[BuiltFigure]:
    """Build every registered figure whose id matches ``pattern`` (comma-separated globs), with ``options``."""
    patterns = [p.strip() for p in pattern.split(",") if p.strip()] or ["*"]
    out: list[BuiltFigure] = []
    token = _OPTIONS.set(options or FigureOptions())
    try:
        for spec in load_all().values():
            if not any(fnmatch.fnmatch(spec.id, p) for p in patterns):
                continue
            for suffix, fig in spec.build(reader, manifest):
                stem = spec.id.replace("/", "-") + (f"-{suffix}" if suffix else "")
                fig.update_layout(width=fig.layout.width or spec.width, height=fig.layout.height or spec.height)
                fit_legend(fig)
                out.append(BuiltFigure(spec, stem, fig))
    finally:
        _OPTIONS.reset(token)
    return out


# trace types that never have a legend entry of their own
_NO_LEGEND = frozenset({"heatmap", "contour", "surface", "table", "parcoords", "parcats", "sankey", "indicator",
                        "histogram2d", "histogram2dcontour"})
#: height of one vertical-legend entry in plotly.js (measured: 19 px at font sizes 10-12), and its padding
LEGEND_ENTRY_PX = 19
LEGEND_PAD_PX = 10


def legend_height(fig: Any) -> float:
    """The height a vertical legend of ``fig`` takes (0 when it shows none): one entry per trace shown in
    the legend, a gap between legend groups, scaled for fonts above 12 px."""
    layout = fig.layout
    if layout.showlegend is False or (layout.legend.orientation or "v") != "v":
        return 0.0
    shown = [t for t in fig.data if t.type not in _NO_LEGEND and t.showlegend is not False]
    if len(shown) < 2 and layout.showlegend is not True:
        return 0.0  # plotly draws no legend for a single trace
    size = layout.legend.font.size or layout.font.size or 12
    entry = max(LEGEND_ENTRY_PX, 1.5 * size + 1)
    groups = {t.legendgroup for t in shown if t.legendgroup}
    gap = layout.legend.tracegroupgap if layout.legend.tracegroupgap is not None else 10
    return len(shown) * entry + (gap * (len(groups) - 1) if groups else 0) + LEGEND_PAD_PX


def fit_legend(fig: Any) -> Any:
    """Make a static image tall enough for its whole vertical legend.

    An interactive plot scrolls a legend longer than the plot; a PNG/SVG/PDF cuts it (a 40-stage
    run's displacement figures have 48-96 entries). The image grows to the legend's height plus
    the top and bottom margins; figures whose legend fits are left as they are.
    """
    need = legend_height(fig)
    if not need:
        return fig
    m = fig.layout.margin
    top = m.t if m.t is not None else 100
    bottom = m.b if m.b is not None else 80
    height = fig.layout.height or 450
    if top + need + bottom > height:
        fig.update_layout(height=int(top + need + bottom + LEGEND_PAD_PX))
    return fig


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
    import shutil
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
    for j in jobs:
        _check_target(Path(j["file"]))
    require_browser(formats)
    timeout = EXPORT_TIMEOUT_S + EXPORT_TIMEOUT_PER_IMAGE_S * len(jobs)
    # the images are written in a hidden folder beside their places and moved there only when all
    # are complete: a failed export (full disk, a killed browser) leaves no partial file behind
    try:
        staging = Path(tempfile.mkdtemp(prefix=".aclarena-export-", dir=out_dir))
    except OSError as e:
        raise AclarenaError(f"cannot write in {out_dir}: {e.strerror or e}; choose another --out") from None
    try:
        staged = [dict(j, file=str(staging / Path(j["file"]).name)) for j in jobs]
        spec = staging / "jobs.json"
        try:
            spec.write_text(json.dumps(staged), encoding="utf-8")
        except OSError as e:
            raise _write_error(out_dir, e) from None
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
                for j, st in zip(jobs, staged, strict=True):
                    try:
                        os.replace(st["file"], j["file"])
                    except OSError as e:
                        raise _write_error(Path(j["file"]), e) from None
                return [Path(j["file"]) for j in jobs]
            lines = [ln for ln in (err or "").strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else f"exit code {proc.returncode}"
            if any(s in (err or "") for s in ("No space left", "File too large", "Errno 28", "Errno 27")):
                raise AclarenaError(f"figure export failed: no space left in {out_dir} ({last}); free some space "
                                    "and rerun (no partial file was left)")
            raise AclarenaError(f"figure export failed: {last}; check that chromium is installed (kaleido needs "
                                "it), or export --format html")
        raise AclarenaError(f"figure export failed: {why} ({attempts} tries); rerun, or export --format html")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


BROWSER_INSTALL = "apt-get install chromium"


def find_browser() -> str | None:
    """The Chrome/Chromium kaleido would start (``BROWSER_PATH`` first, then PATH and the usual places),
    or None when there is none it could run."""
    import os

    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:  # kaleido without choreographer: let kaleido say what it needs
        return "kaleido"
    try:
        path = Chromium.find_browser(skip_local=False)
    except (OSError, RuntimeError, ValueError):  # a lookup that fails finds nothing
        return None
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


def require_browser(formats: list[str]) -> None:
    """Refuse an image export before any work when no browser is there: one line naming what is
    missing and the command that installs it."""
    import os

    from aclarena.errors import AclarenaError

    if find_browser() is not None:
        return
    env = os.environ.get("BROWSER_PATH")
    where = f"none (BROWSER_PATH={env} is not an executable)" if env else "none on PATH or in the usual places"
    raise AclarenaError(f"{'/'.join(formats)} export needs Chrome or Chromium (kaleido drives it) and found "
                        f"{where}; install one ({BROWSER_INSTALL} on Debian/Ubuntu) or set BROWSER_PATH, "
                        "or export --format html")


def _check_target(path: Path) -> None:
    """Refuse to write where a folder (or anything but a plain file) already is, before any work."""
    from aclarena.errors import AclarenaError

    if path.is_symlink() and not path.exists():
        raise AclarenaError(f"{path} is a dangling symbolic link; remove it or choose another --out")
    if path.exists() and not path.is_file():
        raise AclarenaError(f"{path} exists and is a folder (or not a regular file); move it aside or choose "
                            "another --out")


def _write_error(path: Path, e: OSError) -> Exception:
    import errno

    from aclarena.errors import AclarenaError

    if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return AclarenaError(f"no space left to write {path} (disk full or file-size limit); free some space and "
                             "rerun (no partial file was left)")
    if e.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
        return AclarenaError(f"{path} exists and is a folder; move it aside or choose another --out")
    return AclarenaError(f"cannot write {path}: {e.strerror or e}; choose another --out (no partial file was left)")


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
    _write_atomic(path, page.encode("utf-8"))
    return path


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` completely or not at all (a temporary file beside it, then a rename)."""
    import os
    import tempfile

    from aclarena.store.manifest import default_mode

    _check_target(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        default_mode(fd)  # 0644 as any written file, not mkstemp's 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        from aclarena.store.manifest import keep_mode

        keep_mode(Path(tmp), path)  # the report's mode as a plain write would give it, not mkstemp's 0600
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise _write_error(path, e) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
