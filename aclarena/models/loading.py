"""Loading checkpoints: the one module every analyzer and trainer uses to get a model.

* HF folders and hub ids through ``transformers``; LoRA adapter folders through ``peft``,
  applied on the checkpoint their manifest entry names with ``on``.
* safetensors only unless ``allow_pickle=True``; ``trust_remote_code`` off unless asked.
* CPU by default in float32; ``device="auto"`` picks CUDA when present, where
  ``dtype="auto"`` keeps the stored dtype (bf16 for most LLM checkpoints).
* Every problem is checked first from the files (:mod:`.checkpoint`) and reported as one
  line naming the checkpoint and the fix, before anything large is read.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from aclarena.errors import AclarenaError, CheckpointError, ConfigError, did_you_mean
from aclarena.models.checkpoint import CheckpointInfo, NonFiniteWeightsError, inspect
from aclarena.models.files import library_reason
from aclarena.models.tokenizer_files import check_side_files, has_chat_template
from aclarena.store.manifest import CheckpointSpec, Manifest

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class LoadOptions:
    """How to load: ``dtype`` (``auto``, ``float32``, ``bfloat16``, ``float16``), ``device``
    (``cpu``, ``cuda``, ``cuda:1``, ``auto``), ``allow_pickle``, ``trust_remote_code``,
    ``merge_adapter`` (fold LoRA into the weights: faster scoring, same outputs to ~1e-6),
    and ``device_map`` for models larger than one GPU (``"auto"``)."""

    dtype: str = "auto"
    device: str = "cpu"
    allow_pickle: bool = False
    trust_remote_code: bool = False
    merge_adapter: bool = False
    device_map: str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise CheckpointError(f"dtype {self.dtype!r} is not supported; use auto, float32, bfloat16 or float16")
        check_device(self.device)


DEVICE_RE = re.compile(r"(cpu|cuda|mps|auto|cuda:\d+)\Z")


def check_device(device: str) -> None:
    """Refuse a device name torch would not take (``gpu``), before anything is loaded or stored."""
    if not isinstance(device, str) or not DEVICE_RE.match(device):
        raise ConfigError(f"device {device!r} is not known{did_you_mean(str(device), ('cpu', 'cuda', 'auto'))}; "
                          "use cpu, cuda, cuda:N or auto")


def resolve_device(device: str) -> str:
    import torch

    check_device(device)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CheckpointError(f"device {device!r} asked for but CUDA is not available; use --device cpu")
    return device


def torch_dtype(name: str, info: CheckpointInfo | None, device: str) -> torch.dtype:
    import torch

    if name == "auto":
        if device.startswith("cuda") and info is not None and info.dtype in ("bfloat16", "float16"):
            return getattr(torch, info.dtype)
        return torch.float32
    return getattr(torch, name)


def load_model(
    spec: CheckpointSpec | str,
    manifest: Manifest,
    run_dir: str | os.PathLike[str],
    options: LoadOptions | None = None,
) -> PreTrainedModel:
    """Load a checkpoint of the manifest as a causal LM in eval mode."""
    opts = options or LoadOptions()
    if isinstance(spec, str):
        spec = manifest.resolve(spec)
    info = inspect(spec, manifest, run_dir, allow_pickle=opts.allow_pickle)
    info.require_loadable()
    device = resolve_device(opts.device)
    if info.source == "adapter":
        model = _load_adapter(info, manifest, run_dir, opts, device)
    else:
        model = _load_full(info, opts, device)
    model.eval()
    check_finite_weights(model, info.name)
    return model


def check_finite_weights(model: torch.nn.Module, name: str, *, chunk: int = 1 << 22) -> None:
    """Refuse a model with a NaN or infinite parameter or buffer (names the checkpoint and the tensor).

    Every verb that runs a model loads it here, so no result is ever computed from such weights
    (scores of all NaN, a probe set of end-of-text tokens, an "ok" cell of score 0 looked real).
    Checked in chunks so the check never holds more than ``chunk`` booleans at once.
    """
    import torch

    with torch.no_grad():
        for kind, tensors in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
            for tname, t in tensors:
                if not t.is_floating_point() or t.numel() == 0 or t.device.type == "meta":
                    continue
                flat = t.detach().reshape(-1)
                for start in range(0, flat.numel(), chunk):
                    part = flat[start:start + chunk]
                    if not bool(torch.isfinite(part).all()):
                        n_nan = int(torch.isnan(part).sum())
                        what = "NaN" if n_nan else "infinite"
                        raise NonFiniteWeightsError(nonfinite_message(name, what, f"{kind} {tname}"))


def nonfinite_message(name: str, what: str, where: str) -> str:
    """The one line for a checkpoint with NaN or infinite weights (``what``) in ``where``."""
    return (f"checkpoint {name!r} has {what} weights ({where}); no result computed from it would be real: re-save it "
            "from a healthy run or drop it from the manifest")


def _load_full(info: CheckpointInfo, opts: LoadOptions, device: str) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {
        "dtype": torch_dtype(opts.dtype, info, device),
        "trust_remote_code": opts.trust_remote_code,
        "use_safetensors": None if opts.allow_pickle else True,
    }
    if opts.device_map is not None:
        kwargs["device_map"] = opts.device_map
    if info.source == "hub":  # resolved from the local cache only (inspect found it there): no network retries
        kwargs["local_files_only"] = True
    what = f"checkpoint {info.name!r} cannot be loaded from {info.location}"
    with library_errors(what):
        loaded: Any = AutoModelForCausalLM.from_pretrained(info.location, output_loading_info=True, **kwargs)
    model, loading = loaded  # with output_loading_info, (model, {"missing_keys": ..., ...})
    missing = sorted(loading.get("missing_keys") or ())
    if missing:  # transformers would initialise them at random: every result from that model would be noise
        raise CheckpointError(f"{what}: the weights lack {len(missing)} tensor(s) its config.json needs (e.g. "
                              f"{missing[0]}); fix config.json or re-save the checkpoint")
    if opts.device_map is None:
        # transformers' `to` is wrapped by a decorator whose stub loses the bound self
        model.to(device)
    return model


def _load_adapter(
    info: CheckpointInfo, manifest: Manifest, run_dir: str | os.PathLike[str], opts: LoadOptions, device: str
) -> PreTrainedModel:
    from peft import PeftModel

    assert info.spec.on is not None
    base = load_model(manifest.resolve(info.spec.on), manifest, run_dir,
                      LoadOptions(dtype=opts.dtype, device=device, allow_pickle=opts.allow_pickle,
                                  trust_remote_code=opts.trust_remote_code, merge_adapter=True,
                                  device_map=opts.device_map))
    with library_errors(f"adapter {info.name!r} cannot be applied on {info.spec.on!r}"):
        model = PeftModel.from_pretrained(base, info.location, adapter_name=info.name, is_trainable=False)
    if opts.merge_adapter:
        return model.merge_and_unload()
    # an unmerged PeftModel forwards the PreTrainedModel interface every caller uses (forward, generate, config)
    return cast("PreTrainedModel", model)


def load_tokenizer(
    spec: CheckpointSpec | str,
    manifest: Manifest,
    run_dir: str | os.PathLike[str],
    *,
    trust_remote_code: bool = False,
    padding_side: str = "left",
    require_chat_template: bool = False,
) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer (an adapter without one uses its base's), left-padded for generation."""
    from transformers import AutoTokenizer

    if isinstance(spec, str):
        spec = manifest.resolve(spec)
    info = inspect(spec, manifest, run_dir, allow_pickle=True)
    location = info.location
    while info.source == "adapter" and not _has_tokenizer(Path(info.location)):
        assert info.spec.on is not None
        info = inspect(manifest.resolve(info.spec.on), manifest, run_dir, allow_pickle=True)
        location = info.location
    if info.source != "hub" and not _has_tokenizer(Path(location)):
        raise CheckpointError(f"checkpoint {spec.name!r} has no tokenizer files in {location}; save the tokenizer beside the weights")
    if info.source != "hub":
        try:  # transformers reads them past their shape (a list where the object goes is its AttributeError)
            check_side_files(Path(location))
        except CheckpointError as e:
            raise CheckpointError(f"tokenizer of {spec.name!r}: {e}") from None
    if require_chat_template and info.source != "hub" and not has_chat_template(Path(location)):
        raise CheckpointError(
            f"the tokenizer of {spec.name!r} has no chat template; add one (chat_template.jinja) or use an instruct tokenizer"
        )
    with library_errors(f"tokenizer of {spec.name!r} cannot be loaded from {location}"):
        tok = AutoTokenizer.from_pretrained(location, trust_remote_code=trust_remote_code,
                                            **({"local_files_only": True} if info.source == "hub" else {}))
    tok.padding_side = padding_side
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json"))


@contextlib.contextmanager
def library_errors(what: str) -> Iterator[None]:
    """The one path from a library's error to aclarena's one line: ``with library_errors("checkpoint 'x' cannot
    be loaded from DIR"):`` around a transformers / peft / torch call turns any exception it raises (torch's
    UnpicklingError, transformers' StrictDataclassClassValidationError, a RuntimeError of mismatched sizes, ...)
    into a :class:`CheckpointError` ``"{what}: {reason}"``, and keeps transformers' multi-line LOAD REPORT off the
    terminal (the missing or mismatched tensors it lists are checked by the caller and by inspect)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    except AclarenaError:
        raise
    except Exception as e:
        raise CheckpointError(f"{what}: {library_reason(e)}") from None
    finally:
        hf_logging.set_verbosity(level)
