"""The drift monitor across processes: which sharded set-ups it scores, and how a check's scores meet.

Under DDP (and ZeRO-1/2) every process holds the whole model; under FSDP2 (``fully_shard``) every
process scores its share of the probe batches with the sharded model (equal pass counts, padded) and
the main process gathers the per-position scores (:func:`share_of`, :func:`merge_shares`,
:func:`gather_reference_stats`) and decides; its decisions (save, stop) reach every process
(:func:`broadcast_flags`) so that all stop at the same step. FSDP1 and DeepSpeed ZeRO-3 are refused
in one line (:func:`sharding_of`; docs/monitor.md says why).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from aclarena.distributed import process_group_size
from aclarena.errors import AclarenaError
from aclarena.results.tokens import DIST_FIELDS


def sharding_of(model: Any, args: Any) -> str | None:
    """``"fsdp2"`` when the model's weights are sharded by FSDP2 (``fully_shard``), None when they are
    whole on every process (one process, DDP, ZeRO-1/2); refuses the sharded set-ups it cannot score."""
    from aclarena.probes.model_parts import is_sharded

    ds = getattr(args, "hf_deepspeed_config", None)
    if (ds is not None and getattr(ds, "is_zero3", lambda: False)()) or any(
            hasattr(p, "ds_id") for p in model.parameters()):
        raise AclarenaError("the drift monitor does not score under DeepSpeed ZeRO-3 (not tested: accelerate runs "
                            "no DeepSpeed on CPU processes, docs/monitor.md); train with FSDP2 (fsdp_config version "
                            "2), DDP or ZeRO-2, or without the monitor")
    if hasattr(model, "_fsdp_wrapped_module") or any(type(m).__name__ == "FullyShardedDataParallel"
                                                     for m in model.modules()):
        raise AclarenaError("the drift monitor scores FSDP2-sharded models, not FSDP1 ones; set fsdp_config "
                            "{'version': 2} (transformers' default), or train with DDP or without the monitor")
    # accelerate on CPU trains with DDP even when FSDP is asked for: the weights are then whole
    return "fsdp2" if is_sharded(model) else None



def broadcast_flags(args: Any, flags: list[int]) -> list[int]:
    """Rank 0's flags on every rank (a no-op in a single process)."""
    if process_group_size() < 2:
        return flags
    import torch
    import torch.distributed as dist

    device = getattr(args, "device", None) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor(flags, dtype=torch.int64, device=device)
    dist.broadcast(t, src=0)
    return [int(x) for x in t.tolist()]



def gather_objects(obj: Any) -> list[Any] | None:
    """Every process's ``obj`` in rank order on the main process (None on the others)."""
    import torch.distributed as dist

    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out



#: the per-position scores a process sends to the main one at each check (``f*``: against the stage start)
_SCORE_KEYS = {"kl": np.nan, "js": np.nan, "logprob": np.nan, "top1": -1, "status": 0, "fkl": np.nan, "fstatus": 0}



_REF_KEYS = (*DIST_FIELDS, "status")



def share_of(s: Any, f: Any, plan: Any, start_plan: Any, mine: list[int]) -> dict[str, Any]:
    """This process's positions of a check: ``{"index": ..., "start_index": ..., key: values}``."""
    idx, fidx = plan.positions_of(mine), start_plan.positions_of(mine)
    return {"index": idx, "start_index": fidx, "kl": s.kl[idx], "js": s.js[idx], "logprob": s.logprob[idx],
            "top1": s.top1[idx], "status": s.status[idx], "fkl": f.kl[fidx], "fstatus": f.status[fidx]}



def merge_shares(shares: list[dict[str, Any]], n: int) -> dict[str, np.ndarray]:
    """The whole probe's per-position arrays from every process's share (each position in exactly one)."""
    full = {k: np.full(n, fill, dtype=np.asarray(shares[0][k]).dtype) for k, fill in _SCORE_KEYS.items()}
    for sh in shares:
        for k in _SCORE_KEYS:
            full[k][sh["start_index"] if k in ("fkl", "fstatus") else sh["index"]] = sh[k]
    return full



def gather_reference_stats(out: Any, mine: list[int]) -> Any:
    """``out`` (one process's share of a reference's outputs) with every process's statistics on the
    main process, which computes the metrics; the others keep their share."""
    idx = out.plan.positions_of(mine)
    gathered = gather_objects({k: getattr(out.stats, k)[idx] for k in _REF_KEYS} | {"index": idx})
    if gathered is None:
        return out
    full = {k: getattr(out.stats, k).copy() for k in _REF_KEYS}
    for g in gathered:
        for k in _REF_KEYS:
            full[k][g["index"]] = g[k]
    return dataclasses.replace(out, stats=dataclasses.replace(out.stats, **full))



def shard_like(model: Any, like: Any) -> None:
    """Shard ``model`` with FSDP2 on the device mesh of ``like``'s parameters: each decoder layer, then the root."""
    from torch.distributed.fsdp import fully_shard

    from aclarena.probes.model_parts import is_dtensor

    mesh = next(p for p in like.parameters() if is_dtensor(p)).device_mesh
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for layer in getattr(base.get_decoder(), "layers", None) or []:
        fully_shard(layer, mesh=mesh)
    fully_shard(base, mesh=mesh)
