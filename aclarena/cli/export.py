"""``aclarena-diag export``: every figure of a run as PNG/SVG/PDF, and a one-file HTML report."""

from __future__ import annotations

import argparse

from aclarena.cli._common import add_verb, parse_suite_of, print_json, print_table
from aclarena.errors import AclarenaError

FORMATS = ("png", "svg", "pdf", "html")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "export",
        help="write every figure of a run (PNG/SVG/PDF) and a self-contained HTML report",
        examples=(
            "aclarena-diag export --run runs/demo",
            "aclarena-diag export --run runs/demo --figures 'tokens/*' --format svg,pdf --out figs",
            "aclarena-diag export --run runs/demo --format html",
        ),
    )
    p.add_argument("--figures", default="*", metavar="PATTERN",
                   help="comma-separated globs over figure ids such as tokens/concentration (default: all)")
    p.add_argument("--format", default="png,svg,pdf,html", help="comma-separated: png, svg, pdf, html (default: all)")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default: RUN/figures)")
    p.add_argument("--list", action="store_true", help="list the figure ids and exit")
    p.add_argument("--chain", metavar="NAME", help="last stage of the chain the overview figures show (default: "
                   "one figure per chain)")
    p.add_argument("--suite-of", action="append", default=[], metavar="DOMAIN=SUITE",
                   help="suite measuring a stage's domain in the CL metrics, as `forgetting --suite-of` (default "
                        "DOMAIN/id, else the domain's first in-domain suite, named under the table); repeatable")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from aclarena.errors import did_you_mean
    from aclarena.figures import FigureOptions, build_figures, load_all, write_html_report, write_static
    from aclarena.figures.overview import check_chain_options
    from aclarena.store.manifest import load_manifest
    from aclarena.store.results import ResultsStore

    specs = load_all()
    if args.list:
        rows = [{"id": s.id, "title": s.title} for s in specs.values()]
        print_json(rows) if args.json else print_table(rows, ["id", "title"], title="figures")
        return 0
    formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
    if not formats:
        raise AclarenaError(f"--format {args.format!r} names no format; use one or more of {', '.join(FORMATS)}, "
                            "comma-separated")
    for f in formats:
        if f not in FORMATS:
            raise AclarenaError(f"unknown format {f!r}{did_you_mean(f, FORMATS)}; use {', '.join(FORMATS)}")
    manifest = load_manifest(args.run)
    out = Path(args.out) if args.out else Path(args.run) / "figures"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AclarenaError(f"cannot create {out}: {e.strerror}; choose another --out") from None
    store = ResultsStore(args.run)
    options = FigureOptions(chain=args.chain, suite_of=parse_suite_of(args.suite_of))
    if store.exists():
        with store.reader() as reader:
            check_chain_options(reader, manifest, options)
            figures = build_figures(reader, manifest, args.figures, options)
    else:
        check_chain_options(None, manifest, options)
        figures = build_figures(None, manifest, args.figures, options)
    if not figures:
        raise AclarenaError(f"no figure matches {args.figures!r} with the results of this run; see `export --list`")
    static = [f for f in formats if f != "html"]
    written = []
    if "html" in formats:  # first: it needs no browser, so a failed image export still leaves the report
        written.append(write_html_report(figures, out / "report.html", f"aclarena report: {manifest.name}"))
    failed = None
    if static:
        try:
            written.extend(write_static(figures, out, static))
        except AclarenaError as e:
            if not written:
                raise
            failed = e
    files = [{"file": str(p), "bytes": p.stat().st_size} for p in written]
    if args.json:
        print_json({"out": str(out), "figures": [f.name for f in figures], "files": files,
                    "not_written": static if failed else [], "error": str(failed) if failed else None})
    else:
        print_table(files, ["file", "bytes"], title=f"{len(figures)} figures exported to {out}")
    if failed is not None:
        raise AclarenaError(f"{', '.join(static)} not written ({failed}); the files listed above were written")
    return 0
