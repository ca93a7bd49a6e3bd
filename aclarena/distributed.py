"""Data-parallel scoring and evaluation over processes started by ``torchrun`` or ``accelerate launch``.

``probe``, ``tokens`` and ``eval`` split their work into the same batches as a single
process would (never re-batched), hand whole batches to ranks round-robin (batch ``b`` to
rank ``b % world_size``), and gather the per-item results to rank 0, which alone reads the
plan from and writes results.h5 and prints. Each item is therefore computed exactly as in
a single-process run with the same settings: the stored results are equal bit for bit
(given the same intra-op thread count per process; see docs/reliability.md).

The process group is set up only when ``WORLD_SIZE`` > 1: gloo on CPU, nccl for CUDA
devices; objects (numpy arrays, small dicts) always travel over a gloo group, so nothing
needs a GPU tensor. A single process never imports ``torch.distributed``.

A failure on any rank is gathered like a result (:meth:`World.check`), so every rank stops
with the same one-line error instead of waiting forever on a collective; rank 0 says it, and
the others wait until it has (:func:`report_failure`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from aclarena.errors import AclarenaError

T = TypeVar("T")

#: the verbs that run data-parallel; any other verb refuses to start under WORLD_SIZE > 1
DISTRIBUTED_VERBS = frozenset({"probe", "tokens", "eval"})


class RemoteError(AclarenaError):
    """Another rank failed on bad input (an :class:`AclarenaError` there)."""


class RemoteFailure(RuntimeError):
    """Another rank failed with an unexpected error (handled like that error would be here)."""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise AclarenaError(f"environment variable {name}={raw!r} is not an integer; launch with torchrun or "
                            "accelerate launch, or unset it") from None


def env_world() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from the launcher's environment (0, 1, 0 when absent)."""
    size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", rank)
    if size < 1 or not 0 <= rank < size:
        raise AclarenaError(f"RANK={rank} and WORLD_SIZE={size} do not fit together; launch with torchrun or "
                            "accelerate launch")
    return rank, size, local


# --- the rank helpers: who is the main process, waiting for every process, the group's size ----------------------
# One rule for "main process" everywhere: rank 0 of the launcher's environment (``RANK``), the rank a
# :class:`World` takes too. Training uses these directly (accelerate sets its process group up itself, not
# :func:`world`).


def is_main_process() -> bool:
    """Whether this is rank 0 of the processes ``torchrun`` / ``accelerate launch`` started (True alone); valid
    before any process group exists, and the same answer as :attr:`World.is_main`."""
    return _env_int("RANK", 0) == 0


def wait_for_everyone() -> None:
    """Wait until every process of the launch reaches this point (nothing to wait for in a single process)."""
    if _env_int("WORLD_SIZE", 1) > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def process_group_size() -> int:
    """The size of the initialised ``torch.distributed`` process group (1 when there is none, as in a single
    process: ``torch.distributed`` is then not needed)."""
    try:
        import torch.distributed as dist

        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    except (ImportError, RuntimeError, ValueError):
        return 1


@dataclass
class World:
    """This process's place among the data-parallel workers."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    _group: Any = field(default=None, repr=False)  # the gloo group objects travel over

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def mine(self, n: int) -> list[int]:
        """The batch indices ``0 .. n-1`` this rank computes: round-robin, ``b % size == rank``."""
        return list(range(self.rank, n, self.size))

    def owns(self, b: int) -> bool:
        return b % self.size == self.rank

    def device(self, device: str) -> str:
        """``cuda`` means this rank's own GPU (``cuda:LOCAL_RANK``) when several processes share a node."""
        if self.distributed and device in ("cuda", "auto"):
            import torch

            if torch.cuda.is_available():
                return f"cuda:{self.local_rank % max(torch.cuda.device_count(), 1)}"
        return device

    # --- collectives (identity on one process) ---------------------------------------------------

    def gather(self, obj: T) -> list[T] | None:
        """Every rank's ``obj`` in rank order on rank 0; None on the others."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.size if self.is_main else None
        dist.gather_object(obj, out, dst=0, group=self._group)
        return out

    def all_gather(self, obj: T) -> list[T]:
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self._group)
        return out

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        import torch.distributed as dist

        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]  # type: ignore[return-value]

    def check(self, error: BaseException | None) -> None:
        """Raise on every rank if any rank failed (call it where all ranks meet)."""
        if not self.distributed:
            if error is not None:
                raise error
            return
        msgs = self.all_gather(None if error is None else (isinstance(error, AclarenaError), _one_line(error)))
        if error is not None:
            raise error
        for r, m in enumerate(msgs):
            if m is not None:
                bad_input, text = m
                raise (RemoteError if bad_input else RemoteFailure)(f"rank {r} failed: {text}")

    def run_main(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on rank 0 only (it reads the store) and give its result, or its error, to every rank."""
        if not self.distributed:
            return fn()
        result: Any = None
        error: BaseException | None = None
        if self.is_main:
            try:
                result = fn()
            except Exception as e:  # handed to every rank below
                error = e
        # (True, fn's result) or (False, (is the error bad input?, its one line))
        message: tuple[bool, Any] = (error is None, result if error is None else
                                     (isinstance(error, AclarenaError), _one_line(error)))
        ok, payload = self.broadcast(message)
        if error is not None:
            raise error
        if not ok:
            bad_input, text = payload
            raise (RemoteError if bad_input else RemoteFailure)(f"rank 0 failed: {text}")
        return payload

    def each(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on every rank and keep each result where it is; an exception on any rank
        is raised on every rank (no rank is left waiting on a collective)."""
        error: BaseException | None = None
        result: Any = None
        try:
            result = fn()
        except Exception as e:
            error = e
        self.check(error)
        return result

    def map_batches(self, n: int, compute: Callable[[list[int]], T]) -> list[T] | None:
        """Run ``compute(my_batches)`` on every rank; rank 0 gets every rank's result (rank order)."""
        result = self.each(lambda: compute(self.mine(n)))
        return self.gather(result)


_WORLD: World | None = None
#: the launcher's key-value store, kept past the group's end for :func:`report_failure`
_STORE: Any = None
_SAID_KEY = "aclarena/rank0-said-its-error"


def current() -> World:
    """The world set up by :func:`world` (a single process outside it)."""
    return _WORLD or World()


@contextmanager
def world(device: str = "cpu", *, timeout_s: float | None = None) -> Iterator[World]:
    """Join the process group when launched with WORLD_SIZE > 1 (and leave it at the end)."""
    global _WORLD
    rank, size, local = env_world()
    if size == 1:
        _WORLD = World()
        try:
            yield _WORLD
        finally:
            _WORLD = None
        return
    import torch
    import torch.distributed as dist

    if not all(os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT")):
        raise AclarenaError("WORLD_SIZE > 1 but MASTER_ADDR/MASTER_PORT are not set; start the processes with "
                            "torchrun or accelerate launch")
    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    timeout = timedelta(seconds=timeout_s if timeout_s is not None else float(os.environ.get("ACLARENA_DIST_TIMEOUT_S", 1800)))
    created = not dist.is_initialized()
    if created:
        if use_cuda:
            torch.cuda.set_device(local % max(torch.cuda.device_count(), 1))
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", timeout=timeout)
    group = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else None
    global _STORE
    try:
        _STORE = dist.distributed_c10d._get_default_store()
    except Exception:  # a private helper of torch; without it a failing run reports as before
        _STORE = None
    _WORLD = World(rank=rank, size=size, local_rank=local, _group=group)
    try:
        yield _WORLD
        # Leave together: a rank whose share is done waits here until rank 0 has written, so no
        # rank tears its end of the group down while another still uses it (a rank that did so
        # was seen to abort in gloo's teardown on a loaded CI machine). After an exception the
        # ranks may sit in different collectives, so a failing rank skips this and torchrun
        # stops the others.
        dist.barrier(group=group)
        _STORE = None  # a run that ended well has no failure to report
    finally:
        _WORLD = None
        if created and dist.is_initialized():
            dist.destroy_process_group()


def report_failure(say: Callable[[], None], rank: int, *, wait_s: float | None = None) -> None:
    """Say a failed run's one-line error so that it reaches the user under several processes.

    torchrun stops every process as soon as one exits with an error, so a rank that failed
    quickly would cut off rank 0 (the one that prints) before its line. Rank 0 therefore says
    its error and then marks it said in the launcher's store; every other rank waits for that
    mark (at most ``wait_s``, default ``ACLARENA_ERROR_WAIT_S`` or 30 s) before it exits, and
    says its own error only if the mark never comes (rank 0 stuck or gone). One process, or no
    store (the failure came before the group was up, alike on every rank): ``say()`` on rank 0
    only.
    """
    global _STORE
    store, _STORE = _STORE, None
    if store is None:
        if rank == 0:
            say()
        return
    if rank == 0:
        say()
        with suppress(Exception):  # nobody is left to wait for it
            store.set(_SAID_KEY, "1")
        return
    wait = wait_s if wait_s is not None else float(os.environ.get("ACLARENA_ERROR_WAIT_S", 30))
    try:
        store.wait([_SAID_KEY], timedelta(seconds=wait))
    except Exception:  # timed out, or the store went away with rank 0: rank 0 said nothing
        say()


def merge_rows(parts: Sequence[tuple[Any, dict[str, Any]]], into: dict[str, Any]) -> None:
    """Copy each rank's ``(index, {name: values})`` into the full arrays of ``into`` (numpy)."""
    for index, values in parts:
        for key, arr in values.items():
            into[key][index] = arr


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    if isinstance(e, AclarenaError):
        return text[0] if text else type(e).__name__
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
