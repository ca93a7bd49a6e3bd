"""series.h5: series that grow while training runs, appended under SWMR.

A :class:`SeriesWriter` creates any missing series (copy-on-write, like results.h5), then
opens ``series.h5`` in SWMR-write mode and only appends: resize, write, flush. Readers in
other processes open the file with ``swmr=True`` and see rows as they land
(:class:`SeriesReader`, ``refresh()``). One writer at a time holds ``series.h5.lock``; a
second writer gets a clear error. HDF5's SWMR ordering keeps the file readable if the
writer dies; the next writer repairs the file's open-for-write mark by rewriting it.

A series is a group ``/series/<name>`` of 1-d resizable datasets (the columns), all of the
same length. Columns are numbers, or fixed-width byte strings given as ``"S<n>"``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from aclarena._version import __version__
from aclarena.errors import StoreError
from aclarena.store.encoding import encoding_of
from aclarena.store.results import _now, _os_error, check_root, damaged

SERIES_NAME = "series.h5"
SERIES_TYPE = "aclarena-results"
SERIES_VERSION = "1.0.0"


def _validate_name(name: str) -> str:
    parts = name.strip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise StoreError(f"invalid series name {name!r}; use names separated by '/'")
    return "/".join(parts)


class SeriesWriter:
    """Append rows to named series of ``run_dir/series.h5`` under SWMR.

    Args:
        run_dir: the run folder.
        schema: ``{series_name: {column: dtype}}``; the series are created if missing.
            Existing series must have the same columns.
        attrs: optional ``{series_name: {attr: value}}`` written when a series is created
            (attributes cannot change once SWMR starts).
        group_attrs: optional ``{group_name: {attr: value}}`` written when a group above the
            series (``monitor/<label>``) is created with them; a group already in the file is
            left as it is.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        schema: Mapping[str, Mapping[str, Any]],
        attrs: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        group_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / SERIES_NAME
        self.schema = {_validate_name(k): dict(v) for k, v in schema.items()}
        self.group_attrs = {_validate_name(k): dict(v) for k, v in (group_attrs or {}).items()}
        self._lock_fd: int | None = None
        self._f: h5py.File | None = None
        self._acquire_lock()
        try:
            self._prepare(attrs or {})
            self._f = h5py.File(self.path, "r+", libver="latest", locking=False)
            self._f.swmr_mode = True
        except BaseException:
            self.close()
            raise

    def _acquire_lock(self) -> None:
        lock = self.run_dir / (SERIES_NAME + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:
            raise StoreError(f"cannot write in {self.run_dir}: the run folder is read-only") from None
        except FileNotFoundError:
            raise StoreError(f"run folder {self.run_dir} does not exist") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(
                f"{self.path} is locked by another writer (a training run with a monitor?); "
                "stop it or use another --run"
            ) from None
        self._lock_fd = fd

    def _prepare(self, attrs: Mapping[str, Mapping[str, Any]]) -> None:  # noqa: C901
        """Create missing series in a copy of the file, then swap it in (no in-place create)."""
        needs_copy = not self.path.exists()
        if self.path.exists():
            try:
                with h5py.File(self.path, "r", libver="latest", locking=False, swmr=True) as f:
                    check_root(f, self.path)
                    for name, cols in self.schema.items():
                        key = f"series/{name}"
                        if key not in f:
                            needs_copy = True
                            continue
                        have = set(f[key].keys())
                        if have != set(cols):
                            raise StoreError(
                                f"{self.path}:{key} has columns {sorted(have)}, not {sorted(cols)}; "
                                "use another series name"
                            )
            except StoreError:
                raise
            except (OSError, RuntimeError):
                needs_copy = True  # left marked open-for-write by a killed writer: rewrite below
        if not needs_copy and not self._marked_open():
            return
        tmp = self.run_dir / f".{SERIES_NAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with h5py.File(tmp, "w", libver="latest", locking=False) as out:
                out.attrs["encoding-type"] = SERIES_TYPE
                out.attrs["encoding-version"] = SERIES_VERSION
                out.attrs["aclarena-version"] = __version__
                out.attrs["created"] = _now()
                root = out.create_group("series")
                root.attrs["encoding-type"] = "dict"
                root.attrs["encoding-version"] = "0.1.0"
                if self.path.exists():
                    with h5py.File(self.path, "r", libver="latest", locking=False, swmr=True) as src:
                        if "series" in src:
                            for name in src["series"]:
                                src.copy(src[f"series/{name}"], root, name=name)
                for name, gattrs in self.group_attrs.items():
                    if name not in root:  # before the series below it (which would create it bare)
                        root.create_group(name).attrs.update(gattrs)
                for name, cols in self.schema.items():
                    if name in root:
                        continue
                    g = root.create_group(name)
                    g.attrs["encoding-type"] = "series"
                    g.attrs["encoding-version"] = "0.1.0"
                    g.attrs["column-order"] = ",".join(cols)
                    for ak, av in (attrs.get(name) or {}).items():
                        g.attrs[ak] = av
                    for col, dtype in cols.items():
                        ds = g.create_dataset(col, shape=(0,), maxshape=(None,), dtype=np.dtype(dtype), chunks=(256,))
                        ds.attrs["encoding-type"] = "array"
                        ds.attrs["encoding-version"] = "0.2.0"
            from aclarena.store.manifest import keep_mode

            keep_mode(tmp, self.path)  # a rewrite keeps the file's permission bits
            os.replace(tmp, self.path)
        except StoreError:
            tmp.unlink(missing_ok=True)
            raise
        except (OSError, RuntimeError) as e:
            tmp.unlink(missing_ok=True)
            raise _os_error(e, self.path) from None

    def _marked_open(self) -> bool:
        """True when a killed writer left the file marked as open for writing."""
        try:
            with h5py.File(self.path, "r+", libver="latest", locking=False):
                return False
        except (OSError, RuntimeError):
            return True

    def append(self, name: str, rows: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Append one row (a mapping) or several rows to series ``name`` and flush."""
        if self._f is None:
            raise StoreError("series writer is closed")
        rows = [rows] if isinstance(rows, Mapping) else list(rows)
        if not rows:
            return
        cols = self.schema.get(name)
        if cols is None:
            raise StoreError(f"series {name!r} was not declared in this writer's schema")
        g = self._f[f"series/{name}"]
        n = g[next(iter(cols))].shape[0]
        try:
            for col in cols:
                values = np.asarray([r[col] for r in rows], dtype=np.dtype(cols[col]))
                ds = g[col]
                ds.resize((n + len(rows),))
                ds[n:] = values
            for col in cols:
                g[col].flush()
        except KeyError as e:
            raise StoreError(f"row for series {name!r} lacks column {e.args[0]!r}") from None
        except (OSError, RuntimeError) as e:
            raise _os_error(e, self.path) from None

    def close(self) -> None:
        if self._f is not None:
            with contextlib.suppress(Exception):
                self._f.close()
            self._f = None
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> SeriesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class SeriesReader:
    """Read series live: open once with ``swmr=True``; call :meth:`refresh` to see new rows."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / SERIES_NAME
        if not self.path.is_file():
            raise StoreError(f"no {SERIES_NAME} in {Path(run_dir)}; start a training run with a monitor first")
        try:
            self._f = h5py.File(self.path, "r", libver="latest", swmr=True, locking=False)
        except (OSError, RuntimeError) as e:
            raise StoreError(f"{self.path} cannot be opened ({e}); it is corrupted or not an HDF5 file") from None
        self._inode = os.fstat(self._f.id.get_vfd_handle()).st_ino
        check_root(self._f, self.path)

    def names(self) -> list[str]:
        """Every series, by its full name (``monitor/seq-ecom-sft/train``), in creation-independent order."""
        if "series" not in self._f:
            return []
        out: list[str] = []

        def walk(g: h5py.Group, prefix: str) -> None:
            for key in g:
                obj = g[key]
                if not isinstance(obj, h5py.Group):
                    continue
                name = f"{prefix}{key}"
                if obj.attrs.get("encoding-type") == "series":
                    out.append(name)
                else:
                    walk(obj, name + "/")

        walk(self._f["series"], "")
        return out

    def stale(self) -> bool:
        """True when ``series.h5`` was replaced since this reader opened it (a writer added series):
        reopen to see them. Rows appended to the opened file are seen with :meth:`refresh`."""
        try:
            ino = os.stat(self.path).st_ino
        except OSError:
            return False
        return self._inode is not None and ino != self._inode

    def attrs(self, name: str) -> dict[str, Any]:
        return dict(self._f[f"series/{name}"].attrs)

    def refresh(self) -> None:
        for name in self.names():
            for ds in self._f[f"series/{name}"].values():
                ds.refresh()

    def read(self, name: str, start: int = 0) -> dict[str, np.ndarray]:
        """Columns of series ``name`` from row ``start`` (after refreshing them)."""
        key = f"series/{name}"
        if key not in self._f:
            raise StoreError(f"{self.path}:{key} not found; known series: {', '.join(self.names()) or 'none'}")
        g = self._f[key]
        _, version = encoding_of(g)
        if int(version.split(".")[0]) > 0:
            raise StoreError(f"{self.path}:{key}: series version {version} was written by a newer aclarena; "
                             "upgrade aclarena")
        with damaged(self.path, key):
            cols = [c for c in str(g.attrs.get("column-order", "")).split(",") if c] or list(g.keys())
            for c in cols:
                if not isinstance(g[c], h5py.Dataset) or g[c].ndim < 1:
                    raise ValueError(f"column {c!r} is not a 1-d dataset")
                g[c].refresh()
            n = min(g[c].shape[0] for c in cols)  # columns are flushed one by one; read the complete rows
            return {c: g[c][start:n] for c in cols}

    def __len__(self) -> int:
        return len(self.names())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._f.close()

    def __enter__(self) -> SeriesReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def read_series(run_dir: str | os.PathLike[str]) -> Iterator[SeriesReader]:
    r = SeriesReader(run_dir)
    try:
        yield r
    finally:
        r.close()

