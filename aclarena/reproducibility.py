"""Bitwise-reproducible training on CPU: one kernel instruction set on every x86 machine, recorded.

Two demo runs with the same seed, code and kind of machine gave different checkpoints (math/id
0.18 in one, 0.24 in the other). Data order, sampling seeds, dataloader workers and thread counts
were all fixed or did not matter (measured: 1 vs 2 threads give bitwise-identical gradients on
the mini sizes); what differs between machines of one kind is the CPU generation. PyTorch picks
its vectorised kernels by the instruction set of the CPU it runs on (``AVX512`` on a Zen 4 or
Ice Lake host, ``AVX2`` on older ones), and those kernels round differently: one backward pass
of the tiny model gives other gradient bits under ``ATEN_CPU_CAPABILITY=avx2`` than under
AVX-512. A few hundred optimizer steps later the checkpoints, and their greedy answers, differ.

:func:`pin_cpu_kernels` sets, before torch is imported, the variables that make torch, MKL and
oneDNN use their AVX2 code paths on every x86-64 CPU (AVX2 is on every x86 server CPU since 2013),
unless the user set them. ``aclarena-diag`` calls it first thing; a Python program that trains
with aclarena calls it before importing torch (or sets the variables itself).
``ACLARENA_CPU_KERNELS=native`` keeps each library's own choice (faster on AVX-512 hosts, and
then reproducible only on CPUs of the same generation). :func:`environment` is what each finished
phase records in its marker, so two runs that differ can be told apart; :func:`made_by` is what a
result file (``summary.json``, ``findings.json``) records of the command, date and machine.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

# what each library reads once, when it is loaded
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
OPT_OUT = "ACLARENA_CPU_KERNELS"


def pin_cpu_kernels(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set the portable-kernel variables that are not set yet (x86-64 only); returns those it set.

    Does nothing when ``ACLARENA_CPU_KERNELS=native``, on other architectures, or when torch is
    already imported (the choice was made at its import; :func:`environment` tells which).
    """
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT, "").lower() == "native":
        return {}
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return {}
    if environ is None and "torch" in sys.modules:
        return {}
    done = {}
    for k, v in PORTABLE_ENV.items():
        if k not in env:
            env[k] = v
            done[k] = v
    return done


def made_by(command: str) -> dict[str, Any]:
    """Where a result file's numbers come from: the command, the UTC date, the machine and the versions
    (stored as ``made_by`` in ``summary.json`` and ``findings.json``; the docs' tables cite it)."""
    import datetime

    from aclarena._version import __version__

    machine = f"{os.cpu_count()} CPU cores, {platform.machine()}"
    try:
        import torch

        machine += f", torch {torch.__version__} ({torch.get_num_threads()} threads"
        machine += ", CUDA)" if torch.cuda.is_available() else ", CPU)"
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return {"command": command, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "machine": machine, "aclarena": __version__}


def environment() -> dict[str, Any]:
    """What decides the bits of a training run besides code, data and seed: versions, kernels, threads."""
    import torch

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
    }
    for k in PORTABLE_ENV:
        if k in os.environ:
            info[k] = os.environ[k]
    try:
        import transformers
        import trl

        info["transformers"] = transformers.__version__
        info["trl"] = trl.__version__
    except ImportError:  # pragma: no cover - both are dependencies
        pass
    return info
