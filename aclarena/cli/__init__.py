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

from aclarena._version import __version__
from aclarena.distributed import DISTRIBUTED_VERBS, env_world, report_failure
from aclarena.errors import AclarenaError

# In the order `--help` lists them.
VERBS = (
    "demo",
    "study",
    "init",
    "checkpoints",
    "import",
    "train",
    "consolidate",
    "repair",
    "eval",
    "forgetting",
    "compare",
    "probe",
    "tokens",
    "signatures",
    "flips",
    "vectors",
    "displacement",
    "monitor",
    "dashboard",
    "export",
)

# verbs whose module name differs (`import` is a Python keyword)
MODULES = {"import": "import_"}


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
        name = f"aclarena.cli.{MODULES.get(verb, verb.replace('-', '_'))}"
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue  # verb not built yet
            raise
        module.register(sub)
    return parser


def _launch_env() -> tuple[int, int]:
    """(RANK, WORLD_SIZE) set by torchrun / accelerate launch; (0, 1) otherwise or when garbled (the
    verb's ``distributed.world`` then says what is wrong)."""
    try:
        rank, size, _ = env_world()
    except AclarenaError:
        return 0, 1
    return rank, size


def _quiet_hub_bars_when_piped() -> None:
    """Without a terminal, no per-file "Loading weights" bars from transformers / huggingface_hub in the log
    (aclarena's own start/end lines say what runs); set before they are imported, unless the user chose."""
    import os

    from aclarena.progress import stderr_is_terminal

    if not stderr_is_terminal():
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def main(argv: list[str] | None = None) -> int:
    from aclarena.reproducibility import pin_cpu_kernels

    pin_cpu_kernels()  # before anything imports torch: the same kernels, so the same bits, on every x86 host
    _quiet_hub_bars_when_piped()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        # `torchrun ... -m aclarena -- tokens --run DIR`: torchrun's own parser would take `--run`
        # for an abbreviation of its --run-path, unless a `--` ends its options (docs/reliability.md)
        argv = argv[1:]
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    # under torchrun / accelerate launch: only rank 0 prints (every rank gets the same errors; see
    # distributed.report_failure), except the refusal below
    rank, size = _launch_env()
    quiet = size > 1 and rank > 0
    where = f" (rank {rank})" if quiet else ""  # a line from another rank than 0 says whose it is
    if size > 1 and args.verb not in DISTRIBUTED_VERBS:
        # every rank says it: torchrun stops the others as soon as one exits, so a line left to
        # rank 0 alone is lost whenever another rank exits first
        print(f"aclarena-diag {args.verb}: error: {args.verb} does not run data-parallel (WORLD_SIZE={size}); "
              f"run it as one process (data-parallel verbs: {', '.join(sorted(DISTRIBUTED_VERBS))})",
              file=sys.stderr)
        return 1
    try:
        if quiet:
            import contextlib
            import os

            with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
                return int(args.func(args) or 0)
        return int(args.func(args) or 0)
    except AclarenaError as e:
        # under several processes rank 0 says it; another rank only when rank 0 never does
        line = f"aclarena-diag {args.verb}{where}: error: {e}"
        report_failure(lambda: print(line, file=sys.stderr), rank)
        return 1
    except BrokenPipeError:  # `aclarena-diag ... | head`: the reader left; that is not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"aclarena-diag {args.verb}: interrupted; finished results are kept, rerun to resume", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: say so in one line unless asked for the traceback
        bug = e

        def say() -> None:
            if args.debug:
                traceback.print_exception(bug)
            else:
                print(f"aclarena-diag {args.verb}{where}: internal error: {type(bug).__name__}: {bug}; rerun "
                      "with --debug for the traceback and report it", file=sys.stderr)

        report_failure(say, rank)
        return 3


def entry_point() -> None:
    raise SystemExit(main())
