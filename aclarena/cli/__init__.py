"""``aclarena-diag``: one module per verb, each with ``register(subparsers)`` and ``run(args) -> int``.

Verb modules import only argparse-level things at import time; torch, transformers and
dash are imported inside ``run``, so ``aclarena-diag --help`` answers at once.

Exit codes: 0 success, 1 bad input (one line, no traceback), 2 usage error, 3 internal
error (one line; ``--debug`` shows the traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from aclarena import __version__
from aclarena.errors import AclarenaError

# In the order `--help` lists them.
VERBS = (
    "demo",
    "init",
    "checkpoints",
    "train",
    "consolidate",
    "eval",
    "forgetting",
    "compare",
    "probe",
    "tokens",
    "vectors",
    "displacement",
    "monitor",
    "dashboard",
    "export",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aclarena-diag",
        description="Forgetting diagnostics for multi-stage LLM post-training.",
        epilog="Examples:\n  aclarena-diag demo\n  aclarena-diag checkpoints --run runs/demo\n"
        "  aclarena-diag tokens --ref seq-math --run runs/demo\n\nDocs: docs/cli.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aclarena {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        try:
            module = importlib.import_module(f"aclarena.cli.{verb.replace('-', '_')}")
        except ModuleNotFoundError as e:
            if e.name == f"aclarena.cli.{verb.replace('-', '_')}":
                continue  # verb not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except AclarenaError as e:
        print(f"aclarena-diag {args.verb}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `aclarena-diag ... | head`: the reader left; that is not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"aclarena-diag {args.verb}: interrupted; finished results are kept, rerun to resume", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: say so in one line unless asked for the traceback
        if args.debug:
            traceback.print_exc()
        else:
            print(
                f"aclarena-diag {args.verb}: internal error: {type(e).__name__}: {e}; rerun with --debug "
                "for the traceback and report it",
                file=sys.stderr,
            )
        return 3


def entry_point() -> None:
    raise SystemExit(main())
