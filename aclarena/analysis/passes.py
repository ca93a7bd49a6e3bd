"""Passes shared by the parameter-space analyses (`vectors`, `displacement`).

Choosing the checkpoints of a pass from the manifest, opening them for streaming, and running a
resumable pass: tensors are processed in read order, and every ``save_every`` seconds the
finished tensors are written to the store as a partial result keyed by the pass's fingerprint
(settings and checkpoint fingerprints). A rerun after a kill reads those parts back and
continues with the next tensor; the per-tensor numbers do not depend on where a run stopped, so
the final result equals that of one uninterrupted run. The parts are deleted once the final
result is written, and also when the pass fails on bad input, so bad input leaves no trace.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aclarena.errors import AclarenaError, CheckpointError
from aclarena.store import Json, Manifest, ResultsStore
from aclarena.store.manifest import MANIFEST_NAME

if TYPE_CHECKING:
    import numpy as np

    from aclarena.diagnostics.task_vectors import LoraFactors
    from aclarena.models.checkpoint import CheckpointInfo
    from aclarena.models.tensors import TensorReader

# entries per row block and checkpoint: K float64 blocks of 64K entries stay in cache
CHUNK_ELEMENTS = 1 << 16
PARTIAL = "_partial"


def parent_of(manifest: Manifest, name: str) -> str | None:
    """What an update of ``name`` starts from: its parent, or for an adapter the model it is on."""
    spec = manifest.resolve(name)
    return spec.parent or spec.on


def require_base(manifest: Manifest) -> str:
    if manifest.base is None:
        raise AclarenaError(
            f"the manifest names no base checkpoint; add base = \"<name>\" to [run] in {MANIFEST_NAME} "
            "(task vectors start from it)"
        )
    return manifest.base


def require_parents(manifest: Manifest, names: Sequence[str]) -> None:
    """A stage's update is θ − θ_parent: a stage without a parent is an error."""
    for name in names:
        spec = manifest.resolve(name)
        if spec.kind == "stage" and parent_of(manifest, name) is None:
            raise AclarenaError(
                f"checkpoint {name!r} is a stage but has no parent, so its stage update θ − θ_parent is undefined; "
                f"add parent = \"<checkpoint it was trained from>\" to its entry in {MANIFEST_NAME}"
            )


def selection(manifest: Manifest, requested: str | None, extra: Sequence[str] = ()) -> list[str]:
    """The checkpoints of a pass, in manifest order: those asked for (all by default), the base,
    and the parent and `on` checkpoint of each, so that every update can be formed."""
    base = require_base(manifest)
    names = [s.name for s in manifest.resolve_many(requested)] if requested else [s.name for s in manifest]
    names += [manifest.resolve(n).name for n in extra]
    want = set(names) | {base}
    for n in list(want):
        spec = manifest.resolve(n)
        for ref in (spec.parent, spec.on):
            if ref is not None:
                want.add(ref)
    return [s.name for s in manifest if s.name in want]


@dataclass
class Plan:
    """The checkpoints of one pass, opened for streaming.

    ``dense`` lists the full checkpoints with the base first (the anchor ``θ_0``); ``adapters``
    the LoRA adapters, each with its factors and the dense checkpoint it is applied on.
    """

    dense: list[str]
    adapters: list[str]
    adapter_on: list[str]
    reader: TensorReader
    loras: list[dict[str, LoraFactors]]
    fingerprints: dict[str, str] = field(default_factory=dict)

    def loras_of(self, tensor: str) -> list[LoraFactors | None]:
        return [lo.get(tensor) for lo in self.loras]

    def close(self) -> None:
        self.reader.close()


def open_plan(manifest: Manifest, run_dir: str | os.PathLike[str], names: Sequence[str], *, allow_pickle: bool = False) -> Plan:
    """Inspect ``names`` and open them for streaming; every problem is a one-line error here,
    before anything is read or written."""
    from aclarena.models.checkpoint import inspect_all
    from aclarena.models.tensors import (
        TensorReader,
        check_lora_targets,
        checkpoint_fingerprint,
        read_lora_chain,
    )

    base = require_base(manifest)
    everything: dict[str, CheckpointInfo] = {i.name: i for i in inspect_all(manifest, run_dir, allow_pickle=allow_pickle)}
    infos = {n: everything[n] for n in names}
    for info in infos.values():
        info.require_loadable()
    dense = [base] + [n for n in names if n != base and infos[n].source != "adapter"]
    adapters = [n for n in names if infos[n].source == "adapter"]
    if infos[base].source == "adapter":
        raise CheckpointError(f"the base {base!r} is an adapter; the base must be a full model")
    # an adapter on another adapter (a stage trained from an adapter stage) is the sum of its chain's deltas on
    # the full model at the chain's end
    chains = [read_lora_chain(infos[a], everything.__getitem__) for a in adapters]
    on = [root for root, _ in chains]
    reader = TensorReader([infos[n] for n in dense])
    try:
        loras = [lo for _, lo in chains]
        for a, target, lo in zip(adapters, on, loras, strict=True):
            check_lora_targets(a, lo, reader, target)
    except BaseException:
        reader.close()
        raise
    def stacked_on(n: str) -> CheckpointInfo | None:  # the adapter a stacked adapter is on: its files count too
        target = infos[n].spec.on if infos[n].source == "adapter" else None
        return everything[target] if target is not None and everything[target].source == "adapter" else None

    fps = {n: checkpoint_fingerprint(infos[n], on=stacked_on(n)) for n in names}
    return Plan(dense=dense, adapters=adapters, adapter_on=on, reader=reader, loras=loras, fingerprints=fps)


def settings_hash(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Accumulator(Protocol):
    def add(self, start_row: int, tensors: Sequence[Any]) -> None: ...


A = TypeVar("A", bound=Accumulator)


def resumable_pass(
    store: ResultsStore | None,
    prefix: str,
    key: str,
    plan: Plan,
    start: Callable[[str], A],
    finish: Callable[[str, A], dict[str, np.ndarray]],
    *,
    save_every: float,
    show_progress: bool,
    what: str,
) -> dict[str, dict[str, np.ndarray]]:
    """Stream every tensor of ``plan`` into ``start(tensor)``'s accumulator, then ``finish`` it.

    Returns ``{tensor: arrays}`` for all tensors, in read order. Finished tensors of an
    interrupted run with the same ``key`` (stored under ``{prefix}/_partial/{key}``) are not
    read again; with ``store`` None nothing is saved (a pass over folders outside a run). The
    reads run ahead in a background thread while this one computes; torch runs on one thread
    meanwhile (two busy threads per core make BLAS spin, many times slower, on
    shared machines).
    """
    import torch

    from aclarena.progress import progress

    reader = plan.reader
    done = load_parts(store, f"{prefix}/{PARTIAL}/{key}") if store is not None else {}
    todo = [t for t in reader.names if t not in done]
    pending: dict[str, dict[str, np.ndarray]] = {}
    wrote_parts = False
    n_parts = len(store.keys(f"{prefix}/{PARTIAL}/{key}")) if done and store is not None else 0
    last = time.monotonic()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with progress(show_progress) as bar:
            tasks = [bar.add_task(name, total=max(1, sum(reader.nbytes(t, k) for t in reader.names)), unit="bytes")
                     for k, name in enumerate(plan.dense)]
            overall = bar.add_task(f"{what}: tensors", total=len(reader.names))
            for t in reader.names:
                if t in done:
                    for k, task in enumerate(tasks):
                        bar.advance(task, reader.nbytes(t, k))
                    bar.advance(overall)

            def close(tensor: str, acc: A) -> None:
                nonlocal pending, n_parts, wrote_parts, last
                pending[tensor] = finish(tensor, acc)
                for k, task in enumerate(tasks):
                    bar.advance(task, reader.nbytes(tensor, k))
                bar.advance(overall)
                if store is not None and time.monotonic() - last >= save_every:
                    _write_part(store, prefix, key, n_parts, pending)
                    wrote_parts = True
                    n_parts += 1
                    done.update(pending)
                    pending = {}
                    last = time.monotonic()

            current: str | None = None
            acc: A | None = None
            for chunk in reader.stream(todo, CHUNK_ELEMENTS):
                if chunk.name != current:
                    if current is not None and acc is not None:
                        close(current, acc)
                    current, acc = chunk.name, start(chunk.name)
                    bar.update(overall, description=f"{what}: {current}")
                assert acc is not None
                acc.add(chunk.start, chunk.tensors)
            if current is not None and acc is not None:
                close(current, acc)
    except AclarenaError:
        if wrote_parts and store is not None:
            store.delete(f"{prefix}/{PARTIAL}/{key}")
        raise
    finally:
        torch.set_num_threads(threads)
    done.update(pending)
    return {t: done[t] for t in reader.names}


def _write_part(store: ResultsStore, prefix: str, key: str, index: int, rows: dict[str, dict[str, np.ndarray]]) -> None:
    import numpy as np

    names = list(rows)
    fields = list(rows[names[0]])
    data: dict[str, Any] = {"tensors": Json(names)}
    for f in fields:
        data[f] = np.stack([np.asarray(rows[n][f]) for n in names])
    store.write(f"{prefix}/{PARTIAL}/{key}/{index:05d}", data, result_type="partial",
                attrs={"fingerprint": key}, overwrite=True)


def load_parts(store: ResultsStore, key: str) -> dict[str, dict[str, np.ndarray]]:
    """Tensors finished by an interrupted pass (empty when there is none)."""
    if not store.has(key):
        return {}
    out: dict[str, dict[str, Any]] = {}
    with store.reader() as r:
        for part in sorted(r.keys(key)):
            data = r.read(f"{key}/{part}")
            names = data.pop("tensors")
            for i, n in enumerate(names):
                out[n] = {f: v[i] for f, v in data.items()}
    return out


def finish_parts(store: ResultsStore, prefix: str) -> None:
    """Remove every partial pass under ``prefix`` (the final result supersedes them)."""
    if store.has(f"{prefix}/{PARTIAL}"):
        store.delete(f"{prefix}/{PARTIAL}")


def stored_fingerprint(store: ResultsStore, key: str) -> str | None:
    if not store.has(key):
        return None
    return store.attrs(key).get("fingerprint")


def nonfinite_error(checkpoint: str, tensor: str) -> AclarenaError:
    return CheckpointError(
        f"checkpoint {checkpoint!r} has NaN or inf weights in {tensor}; parameter diagnostics need finite weights "
        "(retrain or restore that checkpoint, or leave it out with --checkpoints)"
    )


def parse_difference(text: str, known: Sequence[str]) -> tuple[str, str]:
    """``"a-b"`` (or ``"a - b"``) into two checkpoint names; names may contain '-' themselves."""
    from aclarena.errors import did_you_mean

    text = text.strip()
    if " - " in text:
        left, right = (s.strip() for s in text.split(" - ", 1))
        for n in (left, right):
            if n not in known:
                raise AclarenaError(f"unknown checkpoint {n!r} in {text!r}{did_you_mean(n, known)}; known: {', '.join(known)}")
        return left, right
    cands = [(text[:i], text[i + 1:]) for i, ch in enumerate(text) if ch == "-"]
    found = [(a, b) for a, b in cands if a in known and b in known]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        alts = " or ".join(f"'{a} - {b}'" for a, b in found)
        raise AclarenaError(f"difference {text!r} can be read as {alts}; write it with spaces around the minus")
    guess = ""
    for a, b in cands:
        if a in known or b in known:
            bad = b if a in known else a
            guess = did_you_mean(bad, known)
            break
    raise AclarenaError(
        f"difference {text!r} is not NAME-NAME of two checkpoints{guess}; known: {', '.join(known)}"
    )


def parse_pair(text: str, known: Sequence[str]) -> tuple[tuple[str, str], tuple[str, str]]:
    """``"a-b:c-d"`` into the two differences whose cosine is asked for."""
    if text.count(":") != 1:
        raise AclarenaError(f"--pair {text!r} must be A-B:C-D (two differences of checkpoints, one colon)")
    left, right = text.split(":")
    return parse_difference(left, known), parse_difference(right, known)
