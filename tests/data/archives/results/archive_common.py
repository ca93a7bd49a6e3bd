"""What every archive script shares: the tests' set-up, a payload as JSON, and copying result groups into a
store of their own (tests/data/archives/results/README.md)."""

import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[4]


def plain(x: Any) -> Any:
    """A payload as JSON-able data (dataclasses as dicts, arrays as lists, bytes as text)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return plain(x.tolist())
    if isinstance(x, bytes):  # fixed-width text columns (series.h5)
        return x.decode("utf-8", "replace")
    if isinstance(x, np.generic):
        return x.item()
    return x


def setup() -> None:
    """The tests' import path, offline hub, quiet progress and pinned CPU kernels (as tests/conftest.py)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("ACLARENA_PROGRESS_INTERVAL", "0")
    from aclarena.reproducibility import pin_cpu_kernels

    pin_cpu_kernels()


def keep_groups(src: Path, dst: Path, keys: str | Sequence[str]) -> None:
    """Copy the file attributes of results.h5 ``src`` and its groups ``keys`` (every child, with attributes; the
    groups above them with their attributes) into a new results.h5 ``dst``."""
    import h5py

    dst.unlink(missing_ok=True)
    with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
        d.attrs.update(s.attrs)
        for key in [keys] if isinstance(keys, str) else keys:
            parent, _, name = key.rpartition("/")
            parts = parent.split("/") if parent else []
            for i in range(len(parts)):
                path = "/".join(parts[: i + 1])
                if path not in d:
                    d.create_group(path).attrs.update(s[path].attrs)
            s.copy(s[key], d[parent] if parent else d, name=name)
