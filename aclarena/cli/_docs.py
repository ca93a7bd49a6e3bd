"""Write docs/cli.md from the parsers themselves, so the docs cannot drift from the code.

    python -m aclarena.cli._docs > docs/cli.md

tests/unit/test_cli_docs.py fails when docs/cli.md differs from this output.
"""

from __future__ import annotations

import argparse
import os

from aclarena.cli import build_parser

HEADER = """# Command line: `aclarena-diag`

Generated from the parsers by `python -m aclarena.cli._docs > docs/cli.md`; do not edit by hand.

Every verb takes `--run DIR` (the run folder with `aclarena.toml`; default: the current
folder) and, where it prints results, `--json`. Exit codes: 0 success, 1 bad input (one
line saying what is wrong and how to fix it), 2 usage error, 3 internal error (rerun with
`aclarena-diag --debug VERB ...` for the traceback), 130 interrupted (finished results are
kept; rerun to resume).

Progress goes to stderr: a bar on a terminal; in a log (stderr not a terminal: a file, CI, `nohup`)
a line when each phase starts and ends and, in between, one every `ACLARENA_PROGRESS_INTERVAL`
seconds (30; 0 for none) with step, total and rate; nothing with `--json`.
"""


def render() -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # stable wrapping of argparse help
    try:
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parts = [HEADER]
        for name, p in sub.choices.items():
            parts.append(f"## `aclarena-diag {name}`\n\n```text\n{p.format_help().rstrip()}\n```\n")
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
