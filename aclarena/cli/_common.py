"""Shared pieces of the verbs: common options, output (rich tables or JSON), progress bars."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

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


def manifest_of(args: argparse.Namespace) -> Manifest:
    return load_manifest(args.run)


def run_dir(args: argparse.Namespace) -> Path:
    return Path(args.run)


def _jsonable(x: Any) -> Any:
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    return x


def print_json(obj: Any) -> None:
    json.dump(_jsonable(obj), sys.stdout, indent=2, ensure_ascii=False)
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
