"""Store access for pages and callbacks: short-lived read-only handles, slices on demand."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

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
    from flask import has_app_context

    describe: ItemDescriber | None = current_app.config.get(ITEMS_KEY) if has_app_context() else None
    return describe


def manifest(run_dir: Path) -> Manifest:
    return _manifest(Path(run_dir), _stamp(Path(run_dir) / "aclarena.toml"))


@functools.lru_cache(maxsize=8)
def _manifest(run_dir: Path, stamp: tuple[int, ...]) -> Manifest:
    return load_manifest(run_dir)


def _stamp(path: Path) -> tuple[int, ...]:
    try:
        st = path.stat()
    except OSError:
        return (0,)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def fingerprint(run_dir: Path) -> tuple[tuple[int, ...], ...]:
    """What the dashboard's caches are keyed on: results.h5's, aclarena.toml's and series.h5's inode,
    modification time and size (a writer replaces results.h5 atomically: any new result is a new
    fingerprint)."""
    return (_stamp(Path(run_dir) / "results.h5"), _stamp(Path(run_dir) / "aclarena.toml"),
            _stamp(Path(run_dir) / "series.h5"))


def _frozen(x: Any) -> Any:
    if isinstance(x, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in x.items()))
    if isinstance(x, list | tuple | set):
        return tuple(_frozen(v) for v in (sorted(x, key=str) if isinstance(x, set) else x))
    return x


F = TypeVar("F", bound=Callable[..., Any])


def per_store(maxsize: int = 32) -> Callable[[F], F]:
    """Memoise ``fn(run_dir, *args, **kwargs)`` per store fingerprint (:func:`fingerprint`) and arguments
    (lists and dicts compared by value): a control switched back and forth, or a page revisited, is served
    from memory until the run's results change. Errors are not kept. Callers must not modify what it
    returns."""

    def deco(fn: F) -> F:
        cache: OrderedDict[Any, Any] = OrderedDict()
        lock = threading.Lock()

        @functools.wraps(fn)
        def wrapper(run_dir: Path, *args: Any, **kwargs: Any) -> Any:
            run_dir = Path(run_dir)
            key = (run_dir, fingerprint(run_dir), _frozen(list(args)), _frozen(kwargs))
            with lock:
                if key in cache:
                    cache.move_to_end(key)
                    return cache[key]
            out = fn(run_dir, *args, **kwargs)
            with lock:
                cache[key] = out
                while len(cache) > maxsize:
                    cache.popitem(last=False)
            return out

        wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return deco


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
