"""results.h5: the run's analysis results, each written completely or not at all.

Writes are copy-on-write: the writer copies ``results.h5`` to a temporary file in the same
folder, adds the new result groups there, flushes and fsyncs it, and renames it over
``results.h5``. A writer killed at any point leaves the previous file untouched (HDF5 files
are not crash-safe when written in place); readers that have the file open keep reading
the version they opened. One writer at a time holds ``results.h5.lock`` (an advisory
``flock``, released by the kernel if the writer dies); a second writer waits for it.

Series that grow during training live beside it in ``series.h5`` (see :mod:`.series`).
The layout and every element are specified in docs/store-format.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import h5py

from aclarena._version import __version__
from aclarena.errors import StoreError
from aclarena.store.encoding import RaggedView, encoding_of, read_elem, write_elem

RESULTS_NAME = "results.h5"
STORE_TYPE = "aclarena-results"
STORE_VERSION = "1.0.0"
LOCK_TIMEOUT_S = 120.0


def _major(version: str) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        raise StoreError(f"store version {version!r} is not MAJOR.MINOR.PATCH") from None


# The newest major version of each result layout (``result-type``) this aclarena reads. Every result it writes
# today is at major 0; a writer that moves a layout to a new major adds it here (write_many refuses otherwise).
RESULT_MAJORS: dict[str, int] = {}


def result_major(result_type: str) -> int:
    return RESULT_MAJORS.get(result_type, 0)


def _attr_str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def check_root(f: h5py.File, path: Path) -> None:
    """Refuse files that are not aclarena stores or that a newer major version wrote."""
    t = f.attrs.get("encoding-type")
    v = f.attrs.get("encoding-version")
    if t is None or _attr_str(t) != STORE_TYPE:
        raise StoreError(f"{path} is an HDF5 file but not an aclarena results store; move it aside or choose another --run")
    if _major(_attr_str(v)) > _major(STORE_VERSION):
        raise StoreError(
            f"{path} was written by a newer aclarena (store format {_attr_str(v)}, this one reads "
            f"{_major(STORE_VERSION)}.x); upgrade aclarena"
        )


@contextlib.contextmanager
def _file_lock(lock_path: Path, *, timeout: float = LOCK_TIMEOUT_S, what: str = "results store") -> Iterator[None]:
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError:
        raise StoreError(
            f"cannot write in {lock_path.parent}: the run folder is read-only; make it writable or choose another --run"
        ) from None
    except OSError as e:
        raise StoreError(f"cannot create {lock_path}: {e.strerror}") from None
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"the {what} in {lock_path.parent} is locked by another writer for over {timeout:.0f} s; "
                        "wait for it to finish or stop it"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _out_of_space(tmp: Path) -> bool:
    """Whether a failed write ran out of room: HDF5's error often names neither ENOSPC nor EFBIG
    ("File write failed"), so look at the free space and the process's file-size limit."""
    try:
        if shutil.disk_usage(tmp.parent).free < (1 << 20):
            return True
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        return soft != resource.RLIM_INFINITY and tmp.exists() and tmp.stat().st_size + (1 << 16) >= soft
    except (OSError, ImportError, ValueError):
        return False


def _nbytes(value: Any) -> int:
    """About how many bytes ``value`` takes in the file (arrays, Ragged, Table, Json, dicts)."""
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    if isinstance(value, Mapping):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    if hasattr(value, "values") and hasattr(value, "offsets"):  # Ragged
        return _nbytes(value.values) + _nbytes(value.offsets)
    if hasattr(value, "columns"):  # Table
        return _nbytes(dict(value.columns))
    if hasattr(value, "value"):  # Json
        return len(json.dumps(value.value, default=str))
    if isinstance(value, str | bytes):
        return len(value)
    return 64


def _check_room(path: Path, need: int) -> None:
    """Refuse a write that cannot fit, before HDF5 starts it.

    HDF5 that runs out of room mid-write leaves its file open in a state whose close at
    interpreter exit flushes again and crashed the process (SIGSEGV, h5py 3.16 / HDF5 2.0);
    checking first keeps a full disk a clean one-line error in all but a race.
    """
    msg = (f"no space left to write {path} (about {need / 1e6:.1f} MB needed; disk full or file-size limit); "
           "free some space and rerun (earlier results are intact)")
    with contextlib.suppress(OSError):
        if shutil.disk_usage(path.parent).free < need:
            raise StoreError(msg)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    except (ImportError, ValueError, OSError):
        return
    if soft != resource.RLIM_INFINITY and need > soft:
        raise StoreError(msg)


def _os_error(e: BaseException, path: Path, *, full: bool = False) -> StoreError:
    """One line for an OS-level write failure (h5py often reports errno only in its text)."""
    err = getattr(e, "errno", None)
    text = str(e)
    if full or err in (errno.ENOSPC, errno.EFBIG) or any(
        s in text for s in ("No space left", "File too large", "errno = 28", "errno = 27")
    ):
        return StoreError(
            f"no space left to write {path} (disk full or file-size limit); free some space and rerun "
            "(earlier results are intact)"
        )
    if isinstance(e, PermissionError) or err in (errno.EACCES, errno.EROFS, errno.EPERM) or "Read-only" in text:
        return StoreError(f"cannot write {path}: the run folder is read-only; make it writable or choose another --run")
    reason = getattr(e, "strerror", None) or text.splitlines()[0] if text else type(e).__name__
    return StoreError(f"cannot write {path}: {reason}; earlier results are intact")


class ResultsStore:
    """A run's ``results.h5``.

    >>> store = ResultsStore("runs/demo")
    >>> store.write("tokens/seq-math/seq-search", {"kl": kl_array}, result_type="token-scores")
    >>> with store.reader() as r:
    ...     kl = r.read("tokens/seq-math/seq-search/kl")
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / RESULTS_NAME
        self.lock_path = self.run_dir / (RESULTS_NAME + ".lock")
        self._lock_depth = 0

    def target(self) -> Path:
        """The file the store lives in: ``results.h5``, or the file it links to when it is a symbolic
        link (writes go through the link and keep it a link); a dangling link is refused."""
        p = self.path
        if not p.is_symlink():
            return p
        real = Path(os.path.realpath(p))
        if not real.exists():
            raise StoreError(f"{p} is a symbolic link to {real}, which does not exist; restore the file or remove "
                             "the link")
        if not real.is_file():
            raise StoreError(f"{p} links to {real}, which is not a regular file; point the link at a results.h5 file")
        return real

    # --- reading -------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.path.is_file()

    @contextlib.contextmanager
    def reader(self) -> Iterator[StoreReader]:
        """Open the store read-only; yields a :class:`StoreReader`."""
        self.target()  # a dangling link says so (not "no results.h5")
        if not self.path.is_file():
            raise StoreError(f"no {RESULTS_NAME} in {self.run_dir}; run an analysis first (e.g. `aclarena-diag tokens`)")
        f = _open_read(self.path)
        try:
            yield StoreReader(f, self.path)
        finally:
            f.close()

    def has(self, key: str) -> bool:
        if not self.path.is_file():
            return False
        with self.reader() as r:
            return r.has(key)

    def read(self, key: str) -> Any:
        with self.reader() as r:
            return r.read(key)

    def attrs(self, key: str) -> dict[str, Any]:
        with self.reader() as r:
            return r.attrs(key)

    def keys(self, key: str = "/") -> list[str]:
        if not self.path.is_file():
            return []
        with self.reader() as r:
            return r.keys(key)

    # --- writing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the writer lock (re-entrant within one process)."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        if not self.run_dir.is_dir():
            raise StoreError(f"run folder {self.run_dir} does not exist; create it or pass another --run")
        with _file_lock(self.lock_path):
            self._lock_depth = 1
            try:
                self._remove_stale_temporaries()
                yield
            finally:
                self._lock_depth = 0

    def _remove_stale_temporaries(self) -> None:
        """Under the writer lock every temporary copy in the run folder is a dead writer's; beside the file a
        results.h5 link points to (another folder, maybe another run's), only those whose writer is gone."""
        from aclarena.store.staging import sweep_stale

        for tmp in self.run_dir.glob(f".{RESULTS_NAME}.*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
        if self.path.is_symlink():
            with contextlib.suppress(StoreError, OSError):
                real = Path(os.path.realpath(self.path))
                if real.parent != self.run_dir.resolve():
                    sweep_stale(real.parent, f".{RESULTS_NAME}.")

    def write(
        self,
        key: str,
        data: Mapping[str, Any],
        *,
        result_type: str,
        result_version: str = "0.1.0",
        attrs: Mapping[str, Any] | None = None,
        overwrite: bool = False,
        manifest_text: str | None = None,
    ) -> None:
        """Write one result group at ``key``, completely or not at all."""
        self.write_many([(key, data, result_type, result_version, attrs or {})], overwrite=overwrite,
                        manifest_text=manifest_text)

    def write_many(  # noqa: C901
        self,
        items: Sequence[tuple[str, Mapping[str, Any], str, str, Mapping[str, Any]]],
        *,
        overwrite: bool = False,
        manifest_text: str | None = None,
        drop: Sequence[str] = (),
        precondition: Callable[[StoreReader], None] | None = None,
    ) -> None:
        """Write several result groups in one atomic step.

        Each item is ``(key, data, result_type, result_version, attrs)``. Attribute values
        that are not strings or numbers are stored as JSON strings. ``drop`` names groups
        removed in the same step (results the new ones make stale). ``precondition`` is
        called with a reader of the current store under the writer lock, before anything is
        written: it raises to refuse a write whose inputs changed meanwhile.
        """
        with self.lock():
            target = self.target()
            if precondition is not None and target.is_file():
                with _open_read(target) as f:
                    precondition(StoreReader(f, self.path))
            tmp = target.parent / f".{RESULTS_NAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
            current = target.stat().st_size if target.is_file() else 0
            # the copy, the new groups and HDF5's own overhead (metadata, chunk indexes)
            _check_room(target, int(current + 1.25 * sum(_nbytes(d) for _, d, *_ in items)) + (256 << 10))
            try:
                if target.is_file():
                    with _open_read(target) as f:  # validates before copying
                        check_root(f, self.path)
                    shutil.copyfile(target, tmp)
                    shutil.copymode(target, tmp)  # a rewrite keeps the file's permission bits
                    f = h5py.File(tmp, "r+")
                else:
                    f = h5py.File(tmp, "w")
                    f.attrs["encoding-type"] = STORE_TYPE
                    f.attrs["encoding-version"] = STORE_VERSION
                    f.attrs["created"] = _now()
                with f:
                    f.attrs["aclarena-version"] = __version__
                    f.attrs["modified"] = _now()
                    if manifest_text is not None:
                        f.attrs["manifest"] = manifest_text
                    for key in drop:
                        if _norm(key) in f:
                            del f[_norm(key)]
                    for key, data, rtype, rversion, rattrs in items:
                        key = _norm(key)
                        if _major(rversion) > result_major(rtype):  # its readers would refuse it
                            raise StoreError(f"{rtype} result version {rversion} is newer than this aclarena reads "
                                             f"({result_major(rtype)}.x); add it to RESULT_MAJORS with its reader")
                        if key in f:
                            if not overwrite:
                                raise StoreError(f"{self.path}:{key} already exists; pass overwrite=True (or --force) to replace it")
                            del f[key]
                        parent = _ensure_parents(f, key)
                        g = parent.create_group(key.rsplit("/", 1)[-1])
                        g.attrs["encoding-type"] = "dict"
                        g.attrs["encoding-version"] = "0.1.0"
                        g.attrs["result-type"] = rtype
                        g.attrs["result-version"] = rversion
                        g.attrs["written"] = _now()
                        for ak, av in rattrs.items():
                            if isinstance(av, str):  # HDF5 strings cannot hold NUL: shown as the NUL symbol
                                av = av.replace("\x00", "\u2400")
                            g.attrs[ak] = av if isinstance(av, str | int | float | bool) else json.dumps(av)
                        for k, v in data.items():
                            write_elem(g, str(k), v)
                    f.flush()
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                os.replace(tmp, target)  # the link, if results.h5 is one, stays a link
                _fsync_dir(target.parent)
            except StoreError:
                tmp.unlink(missing_ok=True)
                raise
            except (OSError, RuntimeError) as e:
                full = _out_of_space(tmp)
                tmp.unlink(missing_ok=True)
                raise _os_error(e, self.path, full=full) from None
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def delete(self, key: str) -> None:
        """Remove a result group (copy-on-write, like every write)."""
        with self.lock():
            if not self.has(key):
                return
            target = self.target()
            tmp = target.parent / f".{RESULTS_NAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
            try:
                shutil.copyfile(target, tmp)
                shutil.copymode(target, tmp)
                with h5py.File(tmp, "r+") as f:
                    del f[_norm(key)]
                    f.attrs["modified"] = _now()
                os.replace(tmp, target)
            except (OSError, RuntimeError) as e:
                full = _out_of_space(tmp)
                tmp.unlink(missing_ok=True)
                raise _os_error(e, self.path, full=full) from None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _norm(key: str) -> str:
    key = key.strip("/")
    if not key or any(part in ("", ".", "..") for part in key.split("/")):
        raise StoreError(f"invalid result key {key!r}; use names separated by '/'")
    return key


def _ensure_parents(f: h5py.File, key: str) -> h5py.Group:
    g: h5py.Group = f
    for part in key.split("/")[:-1]:
        if part not in g:
            sub = g.create_group(part)
            sub.attrs["encoding-type"] = "dict"
            sub.attrs["encoding-version"] = "0.1.0"
            g = sub
        else:
            g = g[part]
            if not isinstance(g, h5py.Group):
                raise StoreError(f"{g.name} is a dataset, not a group; choose another result key")
    return g


@contextlib.contextmanager
def damaged(path: Path, key: str) -> Iterator[None]:
    """Turn a reader's surprise at a structurally wrong element (a missing child, a value of the wrong
    type or shape) into one line naming the file and key; the original error is chained."""
    try:
        yield
    except StoreError:
        raise
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError, RuntimeError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        name = Path(path).name  # results.h5, or the monitor's series.h5 (written by a monitored training)
        what = "the analysis" if name == RESULTS_NAME else "the training"
        raise StoreError(f"{path}:{key.strip('/')} is damaged ({type(e).__name__}: {first}); move {name} aside "
                         f"and rerun {what} that wrote it") from e


def check_result_version(group: h5py.Group, path: Path) -> None:
    """One result group's ``result-version`` against :data:`RESULT_MAJORS`: a newer major is refused in the
    store's "written by a newer aclarena; upgrade" line, a version that is not MAJOR.MINOR.PATCH as damage."""
    rtype = _attr_str(group.attrs.get("result-type", ""))
    raw = group.attrs.get("result-version")
    if raw is None:
        return
    version = _attr_str(raw) if isinstance(raw, str | bytes) else repr(raw)
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise StoreError(f"{path}:{group.name.lstrip('/')}: result-version {version!r} is not MAJOR.MINOR.PATCH; the "
                         "store is damaged: move results.h5 aside and rerun the analysis that wrote it") from None
    if major > result_major(rtype):
        raise StoreError(f"{path}:{group.name.lstrip('/')} was written by a newer aclarena ({rtype} result version "
                         f"{version}, this one reads {result_major(rtype)}.x); upgrade aclarena")


def _open_read(path: Path) -> h5py.File:
    try:
        f = h5py.File(path, "r")
    except (OSError, RuntimeError) as e:
        msg = str(e).split("(")[-1].rstrip(")") if "(" in str(e) else str(e)
        if "unable to lock file" in str(e).lower():  # HDF5's own file lock: another process has it open to write
            raise StoreError(f"{path} is open for writing in another process (HDF5 cannot lock it: {msg}); wait "
                             "for that process to finish or close it, then rerun; the file itself is fine") from None
        raise StoreError(
            f"{path} is truncated or corrupted and cannot be opened ({msg}); move it aside to start a new store"
        ) from None
    try:
        check_root(f, path)
    except BaseException:
        f.close()
        raise
    return f


class StoreReader:
    """Read access to an open results.h5; every error names the HDF5 key."""

    def __init__(self, f: h5py.File, path: Path) -> None:
        self._f = f
        self.path = path
        self._versions_checked: set[str] = set()

    @property
    def root_attrs(self) -> dict[str, Any]:
        return {k: _attr_str(v) if isinstance(v, bytes) else v for k, v in self._f.attrs.items()}

    def has(self, key: str) -> bool:
        return _norm(key) in self._f

    def _get(self, key: str) -> h5py.HLObject:
        k = _norm(key)
        try:
            obj = self._f[k]
        except KeyError:
            raise StoreError(f"{self.path}:{k} not found; run the analysis that writes it") from None
        self._check_result_version(obj)
        return obj

    def _check_result_version(self, obj: h5py.HLObject) -> None:
        """Refuse to read inside a result whose ``result-version`` has a newer major than this aclarena reads
        (the result group is the element itself or the nearest of its parents that carries ``result-type``)."""
        walked: list[str] = []
        node = obj if isinstance(obj, h5py.Group) else obj.parent
        while node.name not in ("/", None) and node.name not in self._versions_checked:
            walked.append(node.name)
            if "result-type" in node.attrs:
                check_result_version(node, self.path)
                break
            node = node.parent
        self._versions_checked.update(walked)  # only once the walk passed

    def keys(self, key: str = "/") -> list[str]:
        obj = self._f if key.strip("/") == "" else self._get(key)
        return list(obj.keys()) if isinstance(obj, h5py.Group) else []

    def read(self, key: str) -> Any:
        return read_elem(self._get(key))

    def damaged(self, key: str) -> contextlib.AbstractContextManager[None]:
        """``with reader.damaged(key):`` around code that interprets what it read: a wrong shape is one line."""
        return damaged(self.path, key)

    def attrs(self, key: str) -> dict[str, Any]:
        obj = self._get(key)
        out: dict[str, Any] = {}
        with self.damaged(key):
            for k, v in obj.attrs.items():
                if isinstance(v, bytes):
                    v = v.decode(errors="replace")
                out[k] = v.item() if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 else v
        return out

    def encoding(self, key: str) -> tuple[str, str]:
        return encoding_of(self._get(key))

    def ragged(self, key: str) -> RaggedView:
        """A lazy view of a ragged array: rows are read on demand."""
        return RaggedView(self._get(key))

    def slice(self, key: str, sel: Any) -> Any:
        """Read part of an array dataset (``sel`` as in h5py indexing)."""
        obj = self._get(key)
        if not isinstance(obj, h5py.Dataset):
            raise StoreError(f"{obj.name} is a group; name one of its datasets")
        return obj[sel]

    def shape(self, key: str) -> tuple[int, ...]:
        obj = self._get(key)
        if not isinstance(obj, h5py.Dataset):
            raise StoreError(f"{obj.name} is a group; name one of its datasets")
        return tuple(obj.shape)

    def results(self, prefix: str = "") -> list[str]:
        """Keys of every result group under ``prefix`` (groups that carry ``result-type``)."""
        out: list[str] = []
        base = self._f if prefix.strip("/") == "" else self._get(prefix)
        if not isinstance(base, h5py.Group):
            raise StoreError(f"{self.path}:{prefix.strip('/')} is a dataset where results are expected; the store is "
                             "damaged: move results.h5 aside and rerun the analyses")

        def visit(name: str, obj: h5py.HLObject) -> None:
            if isinstance(obj, h5py.Group) and "result-type" in obj.attrs:
                rtype = obj.attrs["result-type"]
                if not isinstance(rtype, str | bytes):  # readers compare it with a string
                    raise StoreError(f"{self.path}:{name}: result-type is {rtype!r}, not a string; the store is "
                                     "damaged: move results.h5 aside and rerun the analysis that wrote it")
                out.append(obj.name.lstrip("/"))

        base.visititems(visit)
        return out
