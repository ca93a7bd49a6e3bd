"""Console helpers used below the command line: progress bars on stderr, quiet libraries.

The analysis layer, training and the CLI all show progress the same way; they live here, not
in ``aclarena.cli``, because nothing outside ``cli/`` imports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def progress(enabled: bool = True) -> Iterator[Any]:
    """A rich progress bar on stderr (disabled for --json or when stderr is not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    ) as p:
        yield p


def quiet_libraries() -> None:
    """Keep a verb's output to its own table and progress bar: no per-file loading bars from
    transformers, no deprecation notice peft 0.21 triggers in transformers 5."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
