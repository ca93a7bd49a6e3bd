"""Staging folders and publishing by rename: what every verb that writes a folder uses (issue 43).

* :func:`staging_folder` makes a folder of a unique name beside the output (``.NAME.TAG-PID-RANDOM``), so two
  writers of one output never share it, after removing those that writers no longer alive left behind
  (a killed run's staging folder is removed by the next run that writes there).
* :func:`check_replaceable` is ``--force``'s rule: an existing output is replaced only when it is empty or
  the verb itself made it (its record file is there); anything else is refused, never deleted.
* :func:`replace_folder` swaps the finished staging folder into place by rename, the earlier output moved
  aside first and removed only once the new one is in place.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from aclarena.errors import AclarenaError


def pid_alive(pid: int) -> bool:
    """Whether a process of this id exists on this machine (ours counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OSError:
        return False
    return True


def _owner(name: str, prefix: str) -> int | None:
    m = re.match(re.escape(prefix) + r"(\d+)[-.]", name)
    return int(m.group(1)) if m else None


def sweep_stale(parent: Path, prefix: str) -> list[Path]:
    """Remove the entries of ``parent`` named ``PREFIX<pid>-...`` (or ``PREFIX<pid>.``) whose writer is no longer
    alive; entries of live writers, and names that carry no process id, are left alone. Returns what went."""
    gone: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return gone
    for p in entries:
        pid = _owner(p.name, prefix)
        if pid is None or pid_alive(pid):
            continue
        with contextlib.suppress(OSError):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            gone.append(p)
    return gone


def staging_prefix(out: Path, tag: str) -> str:
    return f".{out.name}.{tag}-"


def staging_folder(out: Path, tag: str) -> Path:
    """A new, empty folder beside ``out``, named for this process and unique (``.NAME.TAG-PID-RANDOM``); the
    staging folders of dead writers of the same output are removed first. Raises ``OSError``."""
    prefix = staging_prefix(out, tag)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() and not out.is_symlink():  # a writer killed between its two renames: the earlier output back
        for p in sorted(out.parent.glob(f".{out.name}.replaced-*")):
            pid = _owner(p.name, f".{out.name}.replaced-")
            if pid is not None and not pid_alive(pid):
                with contextlib.suppress(OSError):
                    os.replace(p, out)
                break
    sweep_stale(out.parent, f".{out.name}.replaced-")
    sweep_stale(out.parent, prefix)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=out.parent))


def check_replaceable(out: Path, made_by_us: Callable[[Path], bool], *, what: str, flag: str = "--out") -> None:
    """Refuse to replace ``out`` unless it does not exist, is an empty folder, or ``made_by_us(out)`` (the verb's
    own record is there): ``--force`` replaces what the verb made and never deletes anything else."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink():
        raise AclarenaError(f"{out} is a symbolic link; {what} does not replace it (that would delete or write "
                            f"through to {os.path.realpath(out)}): remove the link or choose another {flag}")
    if not out.is_dir():
        raise AclarenaError(f"{out} is a file, not an earlier output of {what}; --force replaces only what {what} "
                            f"made: move it away or choose another {flag}")
    try:
        empty = not any(out.iterdir())
    except OSError as e:
        raise AclarenaError(f"cannot read {out}: {e.strerror or e}; choose another {flag}") from None
    if not empty and not made_by_us(out):
        raise AclarenaError(f"{out} holds files {what} did not write (no record of {what} in it); --force replaces "
                            f"only an earlier output of {what}, it deletes nothing else: move it away or choose "
                            f"another {flag}")


def replace_folder(staging: Path, out: Path) -> None:
    """Move the finished ``staging`` folder to ``out``; an earlier ``out`` is moved aside first and removed once the
    new one is in place (restored if the rename fails). Raises ``OSError``."""
    old = None
    if out.exists() or out.is_symlink():
        old = out.parent / f".{out.name}.replaced-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.replace(out, old)
    try:
        os.replace(staging, out)
    except BaseException:
        if old is not None and not out.exists():
            os.replace(old, out)
            old = None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
