"""Shared pieces of the verbs: common options, output (rich tables or JSON), progress bars."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from aclarena.analysis._common import jsonable
from aclarena.errors import AclarenaError
from aclarena.progress import progress, quiet_libraries  # noqa: F401  (the verbs' console helpers)
from aclarena.store.manifest import Manifest, load_manifest


def add_verb(
    sub: argparse._SubParsersAction,
    name: str,
    *,
    help: str,
    description: str | None = None,
    examples: Sequence[str] = (),
    run_option: bool = True,
    json_option: bool = True,
) -> argparse.ArgumentParser:
    """A verb's parser with ``--run`` and ``--json``, its help ending with real examples."""
    epilog = "Examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
    p = sub.add_parser(
        name,
        help=help,
        description=description or help,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if run_option:
        p.add_argument("--run", default=".", metavar="DIR", help="run folder with aclarena.toml (default: .)")
    if json_option:
        p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    return p


def add_load_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
                   help="dtype to load models in (default: auto = float32 on CPU, stored dtype on GPU)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle weights (pytorch_model.bin)")
    p.add_argument("--device-map", default=None, metavar="MAP",
                   help="spread a model larger than one GPU over the visible GPUs (e.g. auto; needs accelerate)")


def load_options(args: argparse.Namespace, **extra: Any) -> Any:
    """The LoadOptions of the command line's --dtype, --device, --device-map and --allow-pickle."""
    from aclarena.models.loading import LoadOptions

    return LoadOptions(dtype=args.dtype, device=args.device, allow_pickle=args.allow_pickle,
                       device_map=getattr(args, "device_map", None), **extra)


def print_warnings(warnings: list[str], verb: str) -> None:
    for w in warnings:
        print(f"aclarena-diag {verb}: warning: {w}", file=sys.stderr)


def manifest_of(args: argparse.Namespace) -> Manifest:
    return load_manifest(args.run)


def run_dir(args: argparse.Namespace) -> Path:
    return Path(args.run)


def print_json(obj: Any) -> None:
    json.dump(jsonable(obj), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 10 ** -digits):
            return f"{value:.{max(digits - 1, 1)}e}"
        return f"{value:.{digits}f}"
    return str(value)


def fmt_sig(value: Any, sig: int = 3) -> str:
    """A number with ``sig`` significant digits (0.000369, 0.0123, 1.25e+05): for quantities whose scale
    varies by orders of magnitude, where :func:`fmt`'s fixed decimals would print 3.69e-4 as 0.0004."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.{sig}g}"
    return fmt(value)


def fmt_share(value: Any, digits: int = 3) -> str:
    """A share in [0, 1] with fixed decimals (0.000, 0.012, 0.940): one format down a column."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.{digits}f}"
    return fmt(value)


def print_table(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    *,
    title: str | None = None,
    headers: Sequence[str] | None = None,
    caption: str | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, caption=caption, header_style="bold")
    for h in headers or columns:
        table.add_column(h)
    for row in rows:
        table.add_row(*(fmt(row.get(c)) for c in columns))
    # piped output is read by people and greps alike: do not squeeze it to 80 columns
    Console(soft_wrap=False, width=None if sys.stdout.isatty() else 240).print(table)


def print_phase_table(rows: list[dict[str, Any]], *, title: str) -> None:
    """The trained phases of a curriculum (``train`` and ``demo``)."""
    table = []
    for r in rows:
        table.append({**r, "time": "-" if r["time_s"] is None else f"{r['time_s']:.1f} s",
                      "status": r["status"] + (f" (= {r['same_as']})" if r.get("same_as") else "")})
    print_table(table, ["name", "kind", "domain", "phase", "parent", "seed", "steps", "time", "status"], title=title)
    for r in rows:
        d = r.get("data")
        if d:  # a rejection-sampling phase: say what it trained on, and where it fell back to experts
            print(f"{r['name']}: rejection sampling solved {d['tasks_solved']} of {d['tasks']} {d['domain']} tasks "
                  f"(pass@{d['k']}), kept {d['kept']} verified samples; expert demonstrations for "
                  f"{d['fallback_tasks']} tasks (fallback {d['fallback']})")


def human_count(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def progress_enabled(args: argparse.Namespace) -> bool:
    """Progress for a table: a bar on a terminal, log lines when stderr is piped; none for --json."""
    return not getattr(args, "json", False)


def parse_suite_of(items: Sequence[str]) -> dict[str, str]:
    """``--suite-of DOMAIN=SUITE`` (repeatable) as a mapping; a malformed one is one line."""
    out: dict[str, str] = {}
    for item in items:
        d, sep, s = item.partition("=")
        if not sep or not d.strip() or not s.strip():
            raise AclarenaError(f"--suite-of {item!r} must look like DOMAIN=SUITE (e.g. math=lm-eval/aime24)")
        out[d.strip()] = s.strip()
    return out
