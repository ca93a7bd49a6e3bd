"""What a checkpoint is, read without loading it: files, weights, dtype, tokenizer, lineage.

Everything here reads headers and small JSON files only (no torch), so that
``aclarena-diag checkpoints`` is fast and every analyzer can check its inputs before it
loads a model. :mod:`aclarena.models.loading` builds on it to load models.

Sources a manifest ``path`` may name:

* an HF model folder (``config.json`` and ``model.safetensors`` or a sharded
  ``model.safetensors.index.json``), relative to the run folder or absolute;
* a LoRA adapter folder (``adapter_config.json``, ``adapter_model.safetensors``),
  applied on the checkpoint named by ``on``;
* a hub id (``org/name``) when no such local folder exists.

The files are read by :mod:`~aclarena.models.files` (weights), :mod:`~aclarena.models.tokenizer_files`,
:mod:`~aclarena.models.config_checks` and :mod:`~aclarena.models.adapter_files`. Weights are read from
safetensors only; pickle files (``pytorch_model.bin``, ``*.pt``) need ``allow_pickle=True``
(``--allow-pickle``).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError
from aclarena.models.adapter_files import (
    adapter_base_mismatch,
    check_adapter_tensors,
    lora_module_of,
    read_adapter_config,
)
from aclarena.models.config_checks import check_config, config_tensor_mismatch
from aclarena.models.files import (
    DTYPE_NAMES,
    HUB_ID_RE,
    PICKLE_NAMES,
    SAFETENSORS_INDEX,
    SAFETENSORS_SINGLE,
    TensorMeta,
    check_pickle_weights,
    pickle_files,
    read_json_object,
    safetensors_files,
    tensor_metas,
)
from aclarena.models.tokenizer_files import check_side_files, has_chat_template, tokenizer_fingerprint
from aclarena.store.manifest import CheckpointSpec, Manifest


@dataclass
class CheckpointInfo:
    """A checkpoint as found on disk; ``problem`` says why it cannot be loaded, if so."""

    spec: CheckpointSpec
    source: str  # "folder" | "adapter" | "hub"
    location: str  # absolute folder, or the hub id
    weight_format: str | None = None  # "safetensors" | "pickle" | None
    tensors: dict[str, TensorMeta] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    adapter_config: dict[str, Any] = field(default_factory=dict)
    tokenizer_fingerprint: str | None = None
    problem: str | None = None
    chat_template: bool | None = None  # whether its tokenizer has one (None: not known, e.g. a hub id)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def loadable(self) -> bool:
        return self.problem is None

    @property
    def n_parameters(self) -> int | None:
        if not self.tensors:
            return None
        return sum(t.numel for t in self.tensors.values())

    @property
    def dtype(self) -> str | None:
        if not self.tensors:
            return None
        counts: Counter[str] = Counter()
        for t in self.tensors.values():
            counts[t.dtype] += t.numel
        code = counts.most_common(1)[0][0]
        return DTYPE_NAMES.get(code, code.lower())

    @property
    def architecture(self) -> str | None:
        archs = self.config.get("architectures")
        if archs:
            return str(archs[0])
        return self.config.get("model_type")

    def require_loadable(self) -> None:
        if self.problem is not None:
            raise CheckpointError(f"checkpoint {self.name!r}: {self.problem}")


class NonFiniteWeightsError(CheckpointError):
    """A checkpoint's weights hold NaN or infinite values: no result computed from it can be real."""


def locate(spec: CheckpointSpec, run_dir: str | os.PathLike[str]) -> tuple[str, str]:
    """Return (source, location): a local folder, an adapter folder, or a hub id."""
    raw = os.path.expanduser(spec.path)
    path = Path(raw) if os.path.isabs(raw) else Path(run_dir) / raw
    if path.exists():
        if not path.is_dir():
            raise CheckpointError(
                f"checkpoint {spec.name!r}: {path} is a file; `path` must name a checkpoint folder"
            )
        return ("adapter" if (path / "adapter_config.json").is_file() else "folder"), str(path.resolve())
    first = Path(run_dir) / raw.split("/")[0]
    looks_local = raw.startswith((".", "/", "~")) or first.exists() or spec.is_adapter
    if HUB_ID_RE.match(raw) and not looks_local:
        if hub_snapshot(raw) is None:
            raise CheckpointError(
                f"checkpoint {spec.name!r}: {path} does not exist and hub id {raw!r} is not in the local Hugging Face "
                f"cache; download it first (`hf download {raw}`) or fix `path` in the manifest"
            )
        return "hub", raw
    raise CheckpointError(
        f"checkpoint {spec.name!r}: folder {path} does not exist; fix `path` in the manifest or restore the folder"
    )


def hub_snapshot(repo_id: str) -> Path | None:
    """The local Hugging Face cache's snapshot folder of ``repo_id`` (the one its ``config.json`` is in), or None.

    Hub ids are resolved from that cache only, never over the network: a machine offline (or an id that is not
    cached) is one line at once instead of huggingface_hub's retries for half a minute.
    """
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except (ValueError, OSError):  # an id huggingface_hub does not accept
        return None
    return Path(found).parent if isinstance(found, str) else None


def inspect(
    spec: CheckpointSpec,
    manifest: Manifest,
    run_dir: str | os.PathLike[str],
    *,
    allow_pickle: bool = False,
    _seen: dict[str, CheckpointInfo] | None = None,
) -> CheckpointInfo:
    """Inspect a checkpoint without loading it; problems go to ``info.problem``, not raised."""
    seen = {} if _seen is None else _seen
    if spec.name in seen:
        return seen[spec.name]
    try:
        source, location = locate(spec, run_dir)
    except CheckpointError as e:
        info = CheckpointInfo(spec=spec, source="folder", location=spec.path, problem=_strip_name(str(e), spec))
        seen[spec.name] = info
        return info
    info = CheckpointInfo(spec=spec, source=source, location=location)
    seen[spec.name] = info
    folder = Path(location)
    try:
        if source == "hub":  # its cached snapshot is checked like a folder
            snapshot = hub_snapshot(location)
            if snapshot is None:
                raise CheckpointError(f"hub id {location!r} left the local Hugging Face cache; download it again")
            _inspect_folder(info, snapshot, allow_pickle)
        elif source == "adapter":
            _inspect_adapter(info, folder, manifest, run_dir, allow_pickle, seen)
        else:
            _inspect_folder(info, folder, allow_pickle)
    except CheckpointError as e:
        info.problem = _strip_name(str(e), spec)
    return info


def _strip_name(msg: str, spec: CheckpointSpec) -> str:
    prefix = f"checkpoint {spec.name!r}: "
    return msg[len(prefix):] if msg.startswith(prefix) else msg


def _inspect_folder(info: CheckpointInfo, folder: Path, allow_pickle: bool) -> None:
    cfg = folder / "config.json"
    if cfg.is_file():
        info.config = read_json_object(cfg)
        check_config(cfg, info.config)
    info.tokenizer_fingerprint = tokenizer_fingerprint(folder)
    info.chat_template = has_chat_template(folder)
    check_side_files(folder)
    files = safetensors_files(folder)
    if files:
        info.weight_format = "safetensors"
        info.tensors = tensor_metas(files)
    else:
        pk = pickle_files(folder)
        if pk:
            info.weight_format = "pickle"
            if not allow_pickle:
                raise CheckpointError(
                    f"{folder} has only pickle weights ({pk[0].name}), which can run code when loaded; "
                    "convert it to safetensors or pass --allow-pickle if you trust it"
                )
            check_pickle_weights(pk)
        else:
            raise CheckpointError(f"{folder} holds no weights (no *.safetensors or pytorch_model.bin); point `path` at a checkpoint folder")
    if not cfg.is_file():
        raise CheckpointError(f"{folder} has weights but no config.json; save the model with save_pretrained")
    _check_finite_shapes(info)
    problem = config_tensor_mismatch(info.config, info.tensors)
    if problem is not None:
        raise CheckpointError(f"{cfg} disagrees with the weights: {problem}; fix config.json or re-save the checkpoint")


def _check_finite_shapes(info: CheckpointInfo) -> None:
    for t in info.tensors.values():
        if any(d < 0 for d in t.shape):
            raise CheckpointError(f"tensor {t.name} in {t.file} has a negative dimension; re-save the checkpoint")


def _inspect_adapter(
    info: CheckpointInfo,
    folder: Path,
    manifest: Manifest,
    run_dir: str | os.PathLike[str],
    allow_pickle: bool,
    seen: dict[str, CheckpointInfo],
) -> None:
    info.adapter_config = read_adapter_config(folder)
    spec = info.spec
    if spec.on is None:
        raise CheckpointError(
            f"{folder} is a LoRA adapter; add on = \"<base checkpoint name>\" to its manifest entry"
        )
    base = inspect(manifest.resolve(spec.on), manifest, run_dir, allow_pickle=allow_pickle, _seen=seen)
    info.config = base.config
    info.tokenizer_fingerprint = tokenizer_fingerprint(folder) or base.tokenizer_fingerprint
    info.chat_template = has_chat_template(folder) if tokenizer_fingerprint(folder) else base.chat_template
    check_side_files(folder)
    files = [folder / "adapter_model.safetensors"] if (folder / "adapter_model.safetensors").is_file() else []
    if files:
        info.weight_format = "safetensors"
        info.tensors = tensor_metas(files)
    elif (folder / "adapter_model.bin").is_file():
        info.weight_format = "pickle"
        if not allow_pickle:
            raise CheckpointError(
                f"{folder} has only pickle weights (adapter_model.bin); convert it to safetensors or pass --allow-pickle"
            )
        check_pickle_weights([folder / "adapter_model.bin"])
    else:
        raise CheckpointError(f"{folder} holds no adapter weights (adapter_model.safetensors)")
    if base.problem is not None:
        raise CheckpointError(f"its base {spec.on!r} cannot be loaded: {base.problem}")
    if info.tensors:
        check_adapter_tensors(folder / "adapter_config.json", info.adapter_config, info.tensors)
    why = adapter_base_mismatch(info.adapter_config, base.location)
    if why is not None:
        raise CheckpointError(f"adapter {folder} does not belong on {spec.on!r}: {why}; set `on` to the model it was "
                              "trained on, or fix base_model_name_or_path in its adapter_config.json")
    fit = base  # an adapter on another adapter (a chain of adapter stages) fits the full model at the chain's end
    while fit.source == "adapter" and fit.spec.on is not None:
        fit = inspect(manifest.resolve(fit.spec.on), manifest, run_dir, allow_pickle=allow_pickle, _seen=seen)
    if fit.source != "hub" and info.tensors:
        check_adapter_fits(info, fit)


def check_adapter_fits(adapter: CheckpointInfo, base: CheckpointInfo) -> None:
    """Refuse an adapter whose LoRA matrices do not fit its base's weights (names the tensor)."""
    for name, t in adapter.tensors.items():
        parsed = lora_module_of(name)
        if parsed is None:
            continue
        module, ab = parsed
        target = base.tensors.get(f"{module}.weight")
        if target is None:
            raise CheckpointError(
                f"adapter tensor {name} targets {module}.weight, which base {base.name!r} does not have; "
                "apply the adapter to the model it was trained on"
            )
        if len(target.shape) != 2 or len(t.shape) != 2:
            continue
        out_f, in_f = target.shape
        ok = t.shape[1] == in_f if ab == "A" else t.shape[0] == out_f
        if not ok:
            raise CheckpointError(
                f"adapter tensor {name} has shape {list(t.shape)} but base {base.name!r} has {module}.weight "
                f"of shape {list(target.shape)}; apply the adapter to the model it was trained on"
            )


def require_same_tokenizer(infos: list[CheckpointInfo]) -> str | None:
    """Refuse to compare checkpoints whose tokenizers differ; returns the common fingerprint."""
    known = [i for i in infos if i.tokenizer_fingerprint is not None]
    if not known:
        return None
    first = known[0]
    for other in known[1:]:
        if other.tokenizer_fingerprint != first.tokenizer_fingerprint:
            raise CheckpointError(
                f"tokenizers differ: {first.name!r} ({first.tokenizer_fingerprint}) and {other.name!r} "
                f"({other.tokenizer_fingerprint}); per-token results can only be compared with the same tokenizer"
            )
    return first.tokenizer_fingerprint


def inspect_all(manifest: Manifest, run_dir: str | os.PathLike[str], *, allow_pickle: bool = False) -> list[CheckpointInfo]:
    seen: dict[str, CheckpointInfo] = {}
    return [inspect(s, manifest, run_dir, allow_pickle=allow_pickle, _seen=seen) for s in manifest]


def find_checkpoint_folders(root: Path) -> list[Path]:
    """Sub-folders of ``root`` (any depth up to 3) that hold a model or an adapter."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        names = set(filenames)
        is_ckpt = "adapter_config.json" in names or (
            "config.json" in names and (names & {*SAFETENSORS_SINGLE, SAFETENSORS_INDEX, *PICKLE_NAMES}
                                        or any(n.endswith(".safetensors") for n in names))
        )
        if is_ckpt and Path(dirpath) != root:
            found.append(Path(dirpath))
            dirnames[:] = []
        elif depth >= 3:
            dirnames[:] = []
        else:
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not d.startswith("checkpoint-"))
    return found

