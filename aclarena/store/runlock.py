"""One write lock per run (issue 43): ``RUN/.aclarena.lock``, an advisory ``flock`` the kernel releases when
the holder dies. Held by every read-modify-write of the manifest (:func:`update_manifest`) and around
publishing a checkpoint folder together with its manifest entry and stored record, so that two verbs
writing one run at once (two ``repair``s, a ``repair`` and a ``consolidate``) never lose an entry nor
leave one writer's folder under the other's record. Re-entrant within one thread (two threads, like two
processes, take turns); the results store's own lock (``results.h5.lock``) is taken inside it, never
around it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest

RUN_LOCK_NAME = ".aclarena.lock"
LOCK_TIMEOUT_S = 600.0

_held: dict[tuple[str, int], int] = {}
_guard = threading.Lock()


@contextlib.contextmanager
def run_lock(run_dir: str | os.PathLike[str], *, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the run's write lock (waiting up to ``timeout`` s for another writer, then one line)."""
    from aclarena.store.results import _file_lock

    key = (os.path.realpath(run_dir), threading.get_ident())  # re-entrant per thread; threads exclude each other
    with _guard:
        depth = _held.get(key, 0)
        if depth:
            _held[key] = depth + 1
    if depth:
        try:
            yield
        finally:
            with _guard:
                _held[key] -= 1
        return
    with _file_lock(Path(run_dir) / RUN_LOCK_NAME, timeout=timeout, what="run (manifest and checkpoints)"):
        with _guard:
            _held[key] = 1
        try:
            yield
        finally:
            with _guard:
                _held.pop(key, None)


def update_manifest(run_dir: str | os.PathLike[str], change: Callable[[Manifest], object]) -> Manifest:
    """Read the run's manifest, ``change(manifest)`` it in place and write it back, all under the run lock; returns
    the manifest written. Every verb that adds to or edits an existing manifest goes through here."""
    from aclarena.store.manifest import load_manifest, write_manifest

    with run_lock(run_dir):
        manifest = load_manifest(run_dir)
        change(manifest)
        write_manifest(manifest, run_dir)
        return manifest


def write_manifest_unless_changed(manifest: Manifest, run_dir: str | os.PathLike[str], read: bytes | None) -> Path:
    """Write ``manifest``, made from the file's bytes ``read`` (None: it replaces or creates the file), under the run
    lock, and only if the file still holds those bytes: a verb that read the manifest long before it writes (``init
    --add`` inspecting checkpoints) never drops what another verb added meanwhile."""
    from aclarena.errors import ManifestError
    from aclarena.store.manifest import manifest_path, write_manifest

    if read is None:  # a new run (or --force): no entry of another verb to keep, and no lock file left in it
        return write_manifest(manifest, run_dir)
    with run_lock(run_dir):
        path = manifest_path(run_dir)
        try:
            now: bytes | None = path.read_bytes()
        except OSError:
            now = None
        if now != read:
            raise ManifestError(f"{path} was changed by another command while this one ran; nothing was "
                                "written: rerun this command")
        return write_manifest(manifest, run_dir)
