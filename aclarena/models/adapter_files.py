"""A LoRA adapter's files read without loading it: ``adapter_config.json`` checked, its tensors against the
modules it targets, and whether it belongs on a given base. No torch, no peft.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError
from aclarena.models.files import (
    HUB_ID_RE,
    TensorMeta,
    is_int,
    read_json_object,
    safetensors_files,
    short,
    tensor_metas,
)


def check_adapter_config(path: Path, cfg: Any) -> None:
    """The fields of an adapter_config.json that aclarena, peft or vLLM read, each of its type."""
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path} is a JSON {type(cfg).__name__}, not an object; re-save the adapter")
    r = cfg.get("r")
    if r is not None and not (is_int(r) and r > 0):
        raise CheckpointError(f"{path}: `r` must be a positive integer, got {r!r}; re-save the adapter")
    alpha = cfg.get("lora_alpha")
    if alpha is not None and not (isinstance(alpha, int | float) and not isinstance(alpha, bool)):
        raise CheckpointError(f"{path}: `lora_alpha` must be a number, got {alpha!r}; re-save the adapter")
    for key in ("alpha_pattern", "rank_pattern"):
        v = cfg.get(key)
        if v is not None and not (isinstance(v, dict) and all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in v.values())):
            raise CheckpointError(f"{path}: `{key}` must map module names to numbers; re-save the adapter")
    ranks = cfg.get("rank_pattern") or {}
    if not all(is_int(x) and x > 0 for x in ranks.values()):
        raise CheckpointError(f"{path}: `rank_pattern` must map module names to positive integers; re-save the adapter")
    if cfg.get("peft_type") is not None and not isinstance(cfg["peft_type"], str):
        raise CheckpointError(f"{path}: `peft_type` must be a string, got {cfg['peft_type']!r}; re-save the adapter")
    targets = cfg.get("target_modules")
    if targets is not None and not (isinstance(targets, str) or (
            isinstance(targets, list) and all(isinstance(t, str) for t in targets))):
        raise CheckpointError(f"{path}: `target_modules` must be a list of module names or a string, got "
                              f"{short(targets)}; re-save the adapter")
    if isinstance(targets, str) and targets != "all-linear":
        try:
            re.compile(targets)
        except (re.error, RecursionError):
            raise CheckpointError(f"{path}: `target_modules` {targets!r} is not a regular expression; re-save the "
                                  "adapter") from None
    mts = cfg.get("modules_to_save")
    if mts is not None and not (isinstance(mts, list) and all(isinstance(t, str) for t in mts)):
        raise CheckpointError(f"{path}: `modules_to_save` must be a list of module names, got {short(mts)}; "
                              "re-save the adapter")
    # read as flags by peft and by aclarena (a string "false" would be taken as true)
    for key in ("use_rslora", "use_dora", "fan_in_fan_out", "inference_mode"):
        if cfg.get(key) is not None and not isinstance(cfg[key], bool):
            raise CheckpointError(f"{path}: `{key}` must be true or false, got {short(cfg[key])}; re-save the adapter")
    base = cfg.get("base_model_name_or_path")
    if base is not None and not (isinstance(base, str) and "\x00" not in base):
        raise CheckpointError(f"{path}: `base_model_name_or_path` must be a string, got {short(base)}; re-save the "
                              "adapter")


def read_adapter_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The adapter_config.json of a LoRA adapter folder, checked for its shape (one line if not).

    Every reader of adapters goes through it (:func:`inspect`, serving, merging), so that a
    config of the wrong shape is refused in one line before peft or vLLM reads it.
    """
    path = Path(folder) / "adapter_config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} is not a LoRA adapter folder (no adapter_config.json); point at a folder "
                              "saved by peft's save_pretrained")
    cfg = read_json_object(path)
    check_adapter_config(path, cfg)
    return cfg


def pattern_value(pattern: dict[str, Any], module: str, default: Any) -> Any:
    """The value of a peft ``rank_pattern`` / ``alpha_pattern`` for ``module``, else ``default``."""
    # PEFT's get_pattern_key: the first key that matches the end of the module path
    for key, value in pattern.items():
        try:
            if re.match(rf"(.*\.)?({key})$", module):
                return value
        except re.error:
            if module == key or module.endswith("." + key):
                return value
    return default


def _targets_module(targets: str | list[str], module: str) -> bool:
    """Whether peft's ``target_modules`` selects ``module`` (list: the name or its last parts; string: a regex)."""
    if isinstance(targets, str):
        return targets == "all-linear" or re.fullmatch(targets, module) is not None
    return any(module == t or module.endswith("." + t) for t in targets)


def check_adapter_tensors(path: Path, cfg: dict[str, Any], tensors: dict[str, TensorMeta]) -> None:
    """Refuse an adapter_config.json that contradicts the adapter's tensors: a rank (``r`` or
    ``rank_pattern``) other than the LoRA matrices', or ``target_modules`` that do not name a module
    the tensors adapt."""
    r = cfg.get("r") if cfg.get("r") is not None else 8  # peft's default
    ranks = cfg.get("rank_pattern") or {}
    targets = cfg.get("target_modules")
    for name, t in tensors.items():
        parsed = lora_module_of(name)
        if parsed is None or len(t.shape) < 2:
            continue
        module, ab = parsed
        want = pattern_value(ranks, module, r)
        got = t.shape[0] if ab == "A" else t.shape[1]
        if got != want:
            raise CheckpointError(f"{path}: rank {want} for {module} contradicts {name} of shape {list(t.shape)} "
                                  f"(rank {got}); re-save the adapter")
        if targets is not None and not _targets_module(targets, module):
            raise CheckpointError(f"{path}: `target_modules` {short(targets)} does not select {module}, which the "
                                  "adapter's weights adapt; re-save the adapter")


def _same_weights(a: Path, b: Path, *, blocks: int = 16, block: int = 1 << 16) -> bool | None:
    """Whether two checkpoint folders hold the same weights: True / False, or None when it cannot be told.

    Tensor shapes first (headers only): a tensor both hold with other shapes is another model.
    With the same tensors, dtypes and file sizes, 16 blocks of 64 KiB spread over each file are
    compared, so the check reads at most 1 MiB per file. A copy of a checkpoint is the same; a
    re-save in another dtype or layout, or with an output head tied one way and not the other,
    cannot be told (None); so can nothing when either folder cannot be read.
    """
    try:
        fa, fb = safetensors_files(a), safetensors_files(b)
        if not fa or not fb:
            return None
        ma, mb = tensor_metas(fa), tensor_metas(fb)
        if any(ma[k].shape != mb[k].shape for k in ma.keys() & mb.keys()):
            return False
        if ma.keys() != mb.keys() or any(ma[k].dtype != mb[k].dtype for k in ma) \
                or [p.name for p in fa] != [p.name for p in fb]:
            return None
        for pa, pb in zip(fa, fb, strict=True):
            size = pa.stat().st_size
            if size != pb.stat().st_size:
                return None  # the same tensors laid out differently
            with open(pa, "rb") as x, open(pb, "rb") as y:
                for i in range(blocks):
                    at = (size - block) * i // max(blocks - 1, 1) if size > block else 0
                    x.seek(at)
                    y.seek(at)
                    if x.read(block) != y.read(block):
                        return False
    except (CheckpointError, OSError):
        return None
    return True


def adapter_base_mismatch(cfg: dict[str, Any], base: str | os.PathLike[str] | None) -> str | None:
    """Why ``base_model_name_or_path`` contradicts the model the adapter is applied on, or None.

    ``base`` is that model's folder or hub id. Judged only where it can be told: the adapter names
    an absolute folder that exists and holds other weights than ``base`` (another architecture, or
    bytes that differ; a copy of ``base`` elsewhere is the same), or a hub id other than ``base``'s
    when both are hub ids. A relative path, a folder that has moved or an empty field: no verdict.
    """
    named = cfg.get("base_model_name_or_path")
    if not isinstance(named, str) or not named or base is None or not str(base):
        return None
    base_s = str(base)
    if named == base_s:
        return None
    named_path, base_path = Path(os.path.expanduser(named)), Path(os.path.expanduser(base_s))
    if named_path.is_absolute():
        if not named_path.is_dir() or not base_path.is_dir():
            return None
        try:
            if named_path.samefile(base_path):
                return None
        except OSError:
            return None
        if _same_weights(named_path, base_path) is False:
            return f"it was trained on {named}, whose weights differ from {base_s}"
        return None
    if HUB_ID_RE.match(named) and HUB_ID_RE.match(base_s) and not base_path.exists() and not named_path.exists():
        return f"it was trained on {named}, not {base_s}"
    return None


def check_adapter_folder(folder: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None
                         ) -> dict[str, Any]:
    """Check a LoRA adapter folder before peft or vLLM reads it; returns its adapter_config.json.

    Its config's shape, its safetensors header, the config against the tensors, and (with
    ``base``, the folder or hub id of the model it is about to be applied on) the base it names.
    Its weights' values are checked by :func:`aclarena.models.tensors.check_finite_safetensors`.
    """
    folder = Path(folder)
    cfg = read_adapter_config(folder)
    weights = folder / "adapter_model.safetensors"
    if weights.is_file():
        check_adapter_tensors(folder / "adapter_config.json", cfg, tensor_metas([weights]))
    elif not (folder / "adapter_model.bin").is_file():
        raise CheckpointError(f"{folder} holds no adapter weights (adapter_model.safetensors)")
    why = adapter_base_mismatch(cfg, base)
    if why is not None:
        raise CheckpointError(f"adapter {folder} does not belong on this model: {why}; apply it to the model it was "
                              "trained on, or fix base_model_name_or_path in its adapter_config.json")
    return cfg


_LORA_RE = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$")


def lora_module_of(tensor_name: str) -> tuple[str, str] | None:
    """``('model.layers.0.self_attn.q_proj', 'A')`` for a PEFT LoRA tensor name, else None."""
    m = _LORA_RE.match(tensor_name)
    return (m.group("module"), m.group("ab")) if m else None

