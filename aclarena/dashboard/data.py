"""Store access for pages and callbacks: short-lived read-only handles, slices on demand."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dash
from flask import current_app

from aclarena.store.manifest import Manifest, load_manifest
from aclarena.store.results import ResultsStore, StoreReader

RUN_KEY = "ACLARENA_RUN"
# The live prompt scorer, given to create_app by its caller (the CLI passes aclarena.analysis.prompt's):
# it loads models, which the dashboard layer does not (design.md: dashboard/ imports store and diagnostics).
PROMPT_KEY = "ACLARENA_PROMPT_SCORER"
PromptScorer = Callable[..., Any]
# What an evaluation cell's items were (prompt, expected answer): aclarena.analysis.items.describe_items,
# given to create_app by the CLI (it regenerates the arena's tasks, which the dashboard layer does not import).
ITEMS_KEY = "ACLARENA_DESCRIBE_ITEMS"
ItemDescriber = Callable[..., dict[str, dict[str, str]]]


def current_run() -> Path:
    """The run folder of the app serving the current request."""
    return Path(current_app.config[RUN_KEY])


def prompt_scorer() -> PromptScorer | None:
    """The prompt scorer of the app serving the current request, or None when it was built without one."""
    scorer: PromptScorer | None = current_app.config.get(PROMPT_KEY)
    return scorer


def item_describer() -> ItemDescriber | None:
    """The item describer of the app serving the current request, or None when it was built without one."""
    describe: ItemDescriber | None = current_app.config.get(ITEMS_KEY)
    return describe


def manifest(run_dir: Path) -> Manifest:
    return load_manifest(run_dir)


@contextlib.contextmanager
def reader(run_dir: Path) -> Iterator[StoreReader | None]:
    """Yield a reader of the run's results.h5, or None when the run has no results yet.

    Each call opens the file anew (a few ms): writers replace results.h5 atomically, so a
    fresh handle always sees the latest complete results.
    """
    store = ResultsStore(run_dir)
    if not store.exists():
        yield None
        return
    with store.reader() as r:
        yield r


def page_names() -> dict[str, str]:
    """Page path -> its name in the navigation (the registered pages; the Home page lists them)."""
    return {p["path"]: p["name"] for p in dash.page_registry.values()}
