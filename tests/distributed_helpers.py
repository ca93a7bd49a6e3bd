"""Helpers for the data-parallel and reliability tests: launching verbs, reading whole stores, hashing files."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# attributes that differ between two equal runs by design (ids, clocks, file times)
VOLATILE_ATTRS = {"scores_id", "created", "modified", "written", "time", "settings"}


def env(**extra: str) -> dict[str, str]:
    """The environment of a child ``python -m aclarena``: this checkout first, offline, quiet."""
    e = dict(os.environ)
    e.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
             TRANSFORMERS_VERBOSITY="error", PYTHONUNBUFFERED="1")
    e.update(extra)
    return e


def aclarena(*argv: str, nproc: int = 1, threads: int = 1, timeout: float = 600,
             **extra_env: str) -> subprocess.CompletedProcess:
    """Run a verb in a child process, or in ``nproc`` processes under torchrun (CPU, gloo)."""
    if nproc == 1:
        cmd = [sys.executable, "-m", "aclarena", *argv]
    else:
        # the `--` keeps torchrun's parser from reading --run as its --run-path
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "aclarena", "--", *argv]
    # one intra-op thread per process in both cases: CPU kernels may split reductions by thread
    # count, and the comparison is bit for bit
    return subprocess.run(cmd, cwd=ROOT, env=env(OMP_NUM_THREADS=str(threads), **extra_env), capture_output=True,
                          text=True, timeout=timeout)


def store_contents(run: Path, prefix: str = "") -> dict[str, Any]:
    """Every dataset of every result group under ``prefix``, keyed by path (Ragged split in values/offsets)."""
    from aclarena.store import Ragged, ResultsStore, Table

    out: dict[str, Any] = {}
    with ResultsStore(run).reader() as r:
        for key in r.results(prefix):
            for name in r.keys(key):
                value = r.read(f"{key}/{name}")
                if isinstance(value, Ragged):
                    out[f"{key}/{name}/values"] = np.asarray(value.values)
                    out[f"{key}/{name}/offsets"] = np.asarray(value.offsets)
                elif isinstance(value, Table):
                    for c, col in value.columns.items():
                        out[f"{key}/{name}/{c}"] = np.asarray(col)
                else:
                    out[f"{key}/{name}"] = value
    return out


def assert_same_contents(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Equal keys and values; floating arrays compared bit for bit (NaNs in the same places)."""
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        _same(got[k], v, k)


def _same(g: Any, w: Any, where: str) -> None:
    if isinstance(w, np.ndarray):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape, where
        if w.dtype.kind == "f":
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), err_msg=where)
        else:
            np.testing.assert_array_equal(g, w, err_msg=where)
    elif isinstance(w, dict):
        assert isinstance(g, dict) and sorted(g) == sorted(w), where
        for k in w:
            _same(g[k], w[k], f"{where}/{k}")
    elif isinstance(w, list | tuple):
        assert len(g) == len(w), where
        for i, (a, b) in enumerate(zip(g, w, strict=True)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert g == w, where


def file_hash(path: Path) -> str | None:
    """sha256 of a file's bytes (None when it does not exist)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None
