"""Merging LoRA adapters of one base into one adapter with peft's ``add_weighted_adapter``.

``combination_type="cat"`` stacks the factors: ``A = [w_1 s_1 A_1; …; w_K s_K A_K]`` and
``B = [B_1 … B_K]``, with rank ``Σ r_i`` and scaling 1, so the merged delta is exactly
``Σ w_i s_i B_i A_i``: the weighted sum of the adapters' deltas (uniform averaging with
``w_i = 1/K``, task arithmetic with ``w_i = λ``). ``"linear"`` instead mixes A and B
separately (``A = Σ √(w_i s_i) A_i``, ``B = Σ √(w_i s_i) B_i`` for equal ranks), whose
product has cross terms ``B_i A_j``: it is not a sum of deltas and is not used here.

TIES and DARE have no exact low-rank form (trimming and dropping act on the dense delta),
so adapters are merged with them only after folding them into full checkpoints.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError

MERGED = "merged"


def check_cat_mergeable(folders: Sequence[Path], *, base: str | os.PathLike[str] | None = None) -> None:
    """One line for adapters that cannot be merged: a config of the wrong shape or contradicting the
    weights, a base other than ``base`` (the model's folder or hub id), NaN or infinite weights, or a
    ``cat`` merge that would not be an exact sum of deltas."""
    from aclarena.models.adapter_files import check_adapter_folder
    from aclarena.models.tensors import check_finite_safetensors

    for folder in folders:
        cfg = check_adapter_folder(folder, base=base)
        weights = Path(folder) / "adapter_model.safetensors"
        if weights.is_file():
            check_finite_safetensors([weights], str(folder))
        if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
            raise CheckpointError(f"{folder} is a {cfg.get('peft_type')} adapter; only LoRA adapters can be merged")
        if cfg.get("use_dora"):
            raise CheckpointError(f"{folder} is a DoRA adapter, whose update is not B·A; it cannot be merged by summing deltas")
        if cfg.get("modules_to_save"):
            raise CheckpointError(
                f"{folder} also trains full modules ({cfg['modules_to_save']}); merging sums LoRA deltas only"
            )


def merge_lora_adapters(
    base_model: Any,
    adapters: Sequence[tuple[str, str | os.PathLike[str]]],
    weights: Sequence[float],
    out: str | os.PathLike[str],
    *,
    combination_type: str = "cat",
) -> Path:
    """Merge adapters ``[(name, folder), ...]`` on ``base_model`` into one adapter saved at ``out``.

    ``base_model`` is the model the adapters were trained on (a transformers model; it is
    wrapped by peft and should not be reused afterwards). Returns ``out``.
    """
    from peft import PeftModel

    from aclarena.consolidate.checkpoint_merge import temporary_folder
    from aclarena.models.loading import library_errors
    from aclarena.store.staging import replace_folder

    if not adapters:
        raise CheckpointError("no adapters to merge; name at least one")
    if len(weights) != len(adapters):
        raise ValueError(f"{len(adapters)} adapters but {len(weights)} weights")
    if combination_type != "cat":
        raise ValueError("only combination_type='cat' merges adapters exactly (a weighted sum of deltas)")
    folders = [Path(f) for _, f in adapters]
    check_cat_mergeable(folders, base=getattr(base_model, "name_or_path", None) or None)
    names = [n for n, _ in adapters]
    if MERGED in names or len(set(names)) != len(names):
        raise ValueError(f"adapter names must be distinct and not {MERGED!r}: {names}")
    with library_errors(f"the adapters {', '.join(names)} cannot be applied for merging"):
        model = PeftModel.from_pretrained(base_model, str(folders[0]), adapter_name=names[0])
        for name, folder in zip(names[1:], folders[1:], strict=True):
            model.load_adapter(str(folder), adapter_name=name)
    model.add_weighted_adapter(names, list(map(float, weights)), MERGED, combination_type="cat")
    _unit_scaling(model)
    out = Path(out)
    tmp = temporary_folder(out)  # unique per writer: two merges of one name never share it
    try:
        model.save_pretrained(str(tmp), selected_adapters=[MERGED], safe_serialization=True)
        saved = tmp / MERGED if (tmp / MERGED).is_dir() else tmp
        replace_folder(saved, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _unit_scaling(model: Any) -> None:
    """``cat`` folds each adapter's scaling into A; the merged adapter must scale by exactly 1.

    peft sets ``lora_alpha = r`` for it, which is 1 unless the first adapter used rsLoRA
    (``alpha / sqrt(r)``): turn rsLoRA off for the merged adapter so its deltas are not rescaled.
    """
    from peft.tuners.lora import LoraLayer

    cfg = model.peft_config[MERGED]
    if getattr(cfg, "use_rslora", False):
        cfg.use_rslora = False
    for module in model.modules():
        if isinstance(module, LoraLayer) and MERGED in module.scaling:
            module.scaling[MERGED] = 1.0
