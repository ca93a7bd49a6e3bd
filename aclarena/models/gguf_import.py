"""GGUF in: write an HF safetensors folder from a ``.gguf`` file (``aclarena-diag import``).

The file is streamed (:class:`GgufStream`, issue 45): transformers' own GGUF code reads the metadata
only (the config, and the tokenizer rebuilt from the file's vocabulary, merges and chat template), the
model is built on the ``meta`` device for its tensor names and shapes, and each tensor is then read,
dequantized by the ``gguf`` package, passed through transformers' tensor processor for the
architecture (llama.cpp's Q/K row permutation undone, ...), converted and appended to a safetensors
shard before the next is read: memory is bounded by the largest tensor, not the model. A tensor of a
type the ``gguf`` package cannot dequantize is refused before anything is written.
``streaming=False`` keeps the previous implementation for comparison (``benchmarks/gguf_import.py``):
``from_pretrained(folder, gguf_file=...)`` loads the whole model, which transformers marks as quantized
and will not save, so its state dict is loaded into a model built from the same config without its
``quantization_config`` and saved. Either way the folder is written beside its place and renamed there
only when complete.

What the source was is recorded in ``aclarena-import.json``: the file's name, size and SHA-256, its
architecture, its quantization (the file type, e.g. ``Q4_1``, and the count of tensors of each GGML
type), the dtype written, and the end-of-sequence ids of the generation config, to which the chat
template's end-of-turn token is added when the file does not name it (Gemma's ``<end_of_turn>``);
``aclarena-diag checkpoints`` shows the quantization. A dequantized
Q4 model holds exactly the values llama.cpp computes with, but not those of the float model the GGUF
was made from: results on it describe the quantized model.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aclarena.errors import AclarenaError
from aclarena.store.staging import check_replaceable, replace_folder, staging_folder

IMPORT_RECORD = "aclarena-import.json"
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class GgufImport:
    """What ``import_gguf`` wrote and where it came from (also saved as ``aclarena-import.json``)."""

    out: str
    source: str
    source_bytes: int
    source_sha256: str
    architecture: str | None
    quantization: str | None
    tensor_types: dict[str, int] = field(default_factory=dict)
    dtype: str = "float32"
    parameters: int = 0
    format: str = "gguf"
    eos_token_ids: list[int] = field(default_factory=list)
    end_of_turn: str | None = None
    end_of_turn_id: int | None = None
    end_of_turn_added: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_gguf(source: str | os.PathLike[str]) -> Path:
    """The ``.gguf`` file ``source`` names: itself, or the one file of that kind in a folder."""
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise AclarenaError(f"{path} is not a .gguf file; give a .gguf file or a folder holding one")
        return path
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.gguf") if p.is_file())
        if not found:
            raise AclarenaError(f"no .gguf file in {path}; give the file itself or a folder holding one")
        if len(found) > 1:
            raise AclarenaError(f"{path} holds {len(found)} .gguf files ({', '.join(p.name for p in found[:4])}); "
                                "give the one to import")
        return found[0]
    raise AclarenaError(f"{path} does not exist; give a .gguf file or a folder holding one")


def _gguf_module() -> Any:
    try:
        import gguf
    except ImportError:
        raise AclarenaError("reading GGUF files needs the gguf package: pip install 'aclarena[gguf]' "
                            "(or pip install gguf)") from None
    return gguf


def describe_gguf(path: Path) -> dict[str, Any]:
    """Architecture, file type (the quantization llama.cpp names, e.g. ``Q4_1``) and the count of
    tensors of each GGML type, read from the file's header with the ``gguf`` package."""
    gguf = _gguf_module()
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError, KeyError, IndexError) as e:
        raise AclarenaError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e}); check the download") from None

    def field_value(key: str) -> Any:
        f = reader.get_field(key)
        if f is None:
            return None
        try:
            return f.contents()
        except (ValueError, IndexError, TypeError):
            return None

    arch = field_value("general.architecture")
    file_type = field_value("general.file_type")
    types = Counter(gguf.GGMLQuantizationType(int(t.tensor_type)).name for t in reader.tensors)
    quant = None
    if isinstance(file_type, int):
        try:
            quant = gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            quant = str(file_type)
    elif types:  # no file type: the type most tensors have
        quant = types.most_common(1)[0][0]
    return {"architecture": arch if isinstance(arch, str) else None, "quantization": quant,
            "tensor_types": dict(sorted(types.items()))}


def sha256_of(path: Path, block: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def import_gguf(source: str | os.PathLike[str], out: str | os.PathLike[str], *, dtype: str = "float32",
                force: bool = False, streaming: bool = True, max_shard_bytes: int = 5 << 30,
                progress: bool = False, phase: Callable[[str], None] | None = None, bar: Any = None) -> GgufImport:
    """Write the model and tokenizer of a GGUF file as an HF safetensors folder ``out``.

    Args:
        source: a ``.gguf`` file or a folder holding exactly one.
        out: the folder to write (refused when it exists, unless ``force``).
        dtype: ``float32`` (the dequantized values exactly), ``bfloat16`` or ``float16``.
        force: replace an existing ``out`` (only once the new folder is complete).
        streaming: dequantize and write tensor by tensor (:class:`GgufStream`); False loads the whole
            model with transformers first (the implementation before issue 45, kept for comparison).
        max_shard_bytes: the size of each safetensors shard (streaming).
        progress: show progress on stderr (a bar on a terminal, lines in a log).
        phase: called with the name of each phase as it starts (hashing, reading, writing: minutes each on a
            1 GB file), for progress lines.
        bar: an open :func:`aclarena.progress.progress` to add the tensor-by-tensor task to (instead of
            opening one: the CLI's, which also shows the phases).
    """
    say = phase or (lambda _: None)
    if dtype not in DTYPES:
        raise AclarenaError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    path = find_gguf(source)
    out_dir = Path(out).expanduser()
    if (out_dir.exists() or out_dir.is_symlink()) and not force:
        raise AclarenaError(f"{out_dir} already exists; choose another --out or pass --force to replace it")
    check_replaceable(out_dir, lambda d: (d / IMPORT_RECORD).is_file(), what="import")
    if out_dir.resolve() == path.parent.resolve() or out_dir.resolve() in path.resolve().parents:
        raise AclarenaError(f"--out {out_dir} holds the source file; write the import to another folder")
    say(f"reading the header of {path.name}")
    info = describe_gguf(path)
    say(f"hashing {path.name} ({path.stat().st_size / 1e9:.2f} GB, SHA-256)")
    digest = sha256_of(path)
    check_dequantizable(path)
    model: Any = None
    streamed = False
    if streaming:
        try:
            say("reading the config and the tokenizer (transformers, metadata only)")
            stream = GgufStream(path, dtype, max_shard_bytes=max_shard_bytes, show_progress=progress, bar=bar)
            model, tokenizer, parameters = stream, stream.tokenizer, stream.parameters
            streamed = True
        except NotStreamable as e:  # e.g. MoE files whose expert tensors transformers splits or stacks itself
            import sys

            print(f"note: {e}; importing with transformers' whole-model GGUF loading instead (memory: the whole "
                  "model)", file=sys.stderr)
    if model is None:  # the previous implementation: transformers loads the whole model, then it is rebuilt and saved
        from aclarena.models.loading import library_errors

        say("reading and dequantizing the tensors and the tokenizer (transformers)")
        loaded, tokenizer = _load(path)
        say(f"rebuilding the model in {dtype}")
        with library_errors(f"the GGUF model of {path} does not fit its own metadata"):
            model = _rebuild(loaded, dtype)
        parameters = sum(p.numel() for p in model.parameters())
    eot_text, eot, added = _stop_at_end_of_turn(model, tokenizer)
    record = GgufImport(out=str(out_dir), source=str(path.resolve()), source_bytes=path.stat().st_size,
                        source_sha256=digest, architecture=info["architecture"], quantization=info["quantization"],
                        tensor_types=info["tensor_types"], dtype=dtype, parameters=parameters,
                        eos_token_ids=_eos_list(model.generation_config.eos_token_id),
                        end_of_turn=eot_text.strip() or None if eot is not None else None, end_of_turn_id=eot,
                        end_of_turn_added=added)
    say(f"writing {out_dir}" + (" tensor by tensor" if streamed else ""))
    _write(model, tokenizer, record, out_dir)
    return record


def _eos_list(eos: Any) -> list[int]:
    if isinstance(eos, int):
        return [eos]
    return [int(i) for i in eos] if isinstance(eos, list | tuple) else []


def _stop_at_end_of_turn(model: Any, tokenizer: Any) -> tuple[str, int | None, bool]:
    """Add the chat template's end-of-turn token to the generation config's eos ids when it is not there.

    A GGUF names one eos (Gemma 3: ``<eos>``, 1) while its template ends a turn with another token
    (``<end_of_turn>``, 106); plain transformers ``generate`` on the folder would then run past the end
    of a turn. (aclarena stops there anyway: :func:`aclarena.models.chat.stop_token_ids`.) Returns the
    template's end-of-turn text and id (None when it has none) and whether the id was added.
    """
    from aclarena.models.chat import end_of_turn

    text, eot = end_of_turn(tokenizer)
    eos = _eos_list(model.generation_config.eos_token_id)
    if eot is None or eot in eos:
        return text, eot, False
    model.generation_config.eos_token_id = [*eos, eot]
    return text, eot, True


def check_dequantizable(path: Path) -> None:
    """Refuse, before anything is written, a file holding a tensor of a type the gguf package cannot dequantize."""
    gguf = _gguf_module()
    from gguf import quants

    ok = set(getattr(quants, "_type_traits", {})) | {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16}
    reader = gguf.GGUFReader(str(path))
    for t in reader.tensors:
        kind = gguf.GGMLQuantizationType(int(t.tensor_type))
        if kind not in ok:
            version = _version("gguf")
            raise AclarenaError(f"{path}: tensor {t.name} is {kind.name}, which the gguf package{version} cannot "
                                "dequantize; convert the file with llama.cpp to a supported type (e.g. Q8_0, Q4_K, F16)")


def dequantize(data: Any, qtype: Any, *, max_elements: int = 1 << 18) -> Any:
    """``gguf.quants.dequantize`` of one tensor's bytes, the same values bit for bit, in row blocks of about
    ``max_elements`` values instead of the package's groups of 16 rows: fewer numpy calls on blocks that
    still fit the cache (2-3x less CPU for Q8_0, Q4_K and Q6_K on an 8.4M-value tensor, one core; blocks of
    4M values were slower again); memory is the tensor and one block."""
    import numpy as np
    from gguf import quants

    traits = getattr(quants, "_type_traits", {}).get(qtype)
    if traits is None or not hasattr(traits, "dequantize_rows"):
        return quants.dequantize(data, qtype)  # F32, F16, or a gguf package of another layout
    traits.init_grid()
    rows = data.reshape(-1, data.shape[-1])
    per_row = rows.shape[1] // traits.type_size * traits.block_size
    out = np.empty((rows.shape[0], per_row), dtype=np.float32)
    step = max(1, max_elements // max(1, per_row))
    for a in range(0, rows.shape[0], step):
        out[a:a + step] = traits.dequantize_rows(rows[a:a + step]).reshape(-1, per_row)
    return out.reshape(*data.shape[:-1], per_row)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f" {version(package)}"
    except PackageNotFoundError:
        return ""


class NotStreamable(AclarenaError):
    """The file's tensors do not map one to one onto the model's: :func:`import_gguf` loads it whole instead."""


class GgufStream:
    """A GGUF file's model, written tensor by tensor: what :func:`_write` saves in place of a loaded model.

    The config and tokenizer come from transformers' own GGUF reading (metadata only); the model is built
    on the ``meta`` device for its tensor names and shapes, and transformers' GGUF name map and tensor
    processor (llama.cpp's Q/K permutation undone, Gemma's norm offsets) give each file tensor its HF name
    and values. :meth:`save_pretrained` then reads one tensor's bytes (``pread``, no memory map), dequantizes
    it with the gguf package, converts it and appends it to a safetensors shard
    (:class:`aclarena.models.writing.ShardedWriter`) before the next: memory is bounded by a few copies of
    the largest tensor, not by the model. A log gets progress lines (:mod:`aclarena.progress`).
    """

    def __init__(self, path: Path, dtype: str, *, max_shard_bytes: int = 5 << 30, show_progress: bool = False,
                 bar: Any = None) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.modeling_gguf_pytorch_utils import (
            TENSOR_PROCESSORS,
            TensorProcessor,
            get_gguf_hf_weights_map,
            load_gguf_checkpoint,
        )

        from aclarena.progress import quiet_libraries

        gguf = _gguf_module()
        quiet_libraries()
        self.path, self.dtype, self.max_shard_bytes, self.show_progress = path, dtype, max_shard_bytes, show_progress
        self.bar = bar  # an open progress display to add the task to (else one of its own)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            self.config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
            parsed = load_gguf_checkpoint(str(path), return_tensors=False)
            with torch.device("meta"):
                skeleton = AutoModelForCausalLM.from_config(self.config)
        except (ValueError, KeyError, NotImplementedError, OSError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise AclarenaError(f"transformers cannot read {path}: {first}") from None
        if hasattr(self.config, "quantization_config"):
            del self.config.quantization_config
        self.generation_config = skeleton.generation_config
        self.parsed = parsed
        self.reader = gguf.GGUFReader(str(path))
        arch = self.reader.get_field("general.architecture")
        arch_name = arch.contents() if arch is not None else ""
        self.processor = TENSOR_PROCESSORS.get(arch_name, TensorProcessor)(config=parsed.get("config", {}))
        self.name_map = get_gguf_hf_weights_map(skeleton, self.processor)
        shapes = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
        tied = set(getattr(skeleton, "_tied_weights_keys", None) or {}) if getattr(
            self.config, "tie_word_embeddings", False) else set()
        self.plan: list[tuple[Any, str]] = []  # (GGUF tensor, HF name), in file order
        for t in self.reader.tensors:
            hf = self.name_map.get(t.name)
            if hf is not None and hf in shapes:
                self.plan.append((t, hf))
        got = {hf for _, hf in self.plan}
        missing = sorted(set(shapes) - got - tied)
        unexpected = sorted(t.name for t in self.reader.tensors if self.name_map.get(t.name) not in shapes)
        if missing or len(got) != len(self.plan):
            raise NotStreamable(f"the file's tensors are not one-to-one with the model's (missing {missing[:3]}, "
                                f"unmapped {unexpected[:3]})")
        self.shapes = shapes
        self.parameters = sum(math.prod(shapes[hf]) for _, hf in self.plan)
        self.unmapped = unexpected

    def _tensor(self, t: Any) -> Any:
        """One file tensor dequantized and processed, as float32 numpy (read with ``pread``, not the memory map)."""
        import numpy as np

        raw = bytearray(int(t.n_bytes))  # writable: an F32 tensor's values are used in place, not copied
        if os.preadv(self._fd, [raw], int(t.data_offset)) != len(raw):
            raise AclarenaError(f"{self.path} ends inside tensor {t.name}; the file is truncated: download it again")
        data = np.frombuffer(raw, dtype=t.data.dtype).reshape(t.data.shape)
        weights = dequantize(data, t.tensor_type)
        result = self.processor.process(weights=weights, name=t.name, tensor_key_mapping=self.name_map,
                                        parsed_parameters=self.parsed)
        return result.weights

    def save_pretrained(self, folder: str | os.PathLike[str], **_: Any) -> None:
        """Write ``config.json``, ``generation_config.json`` and the weights (shards of ``max_shard_bytes``)."""
        import numpy as np
        import torch

        from aclarena.models.writing import ShardedWriter
        from aclarena.progress import progress

        folder = Path(folder)
        torch_dtype = getattr(torch, self.dtype)
        layout = [(hf, torch_dtype, self.shapes[hf]) for _, hf in self.plan]
        self.config.dtype = self.dtype
        self.config.save_pretrained(folder)
        self.generation_config.save_pretrained(folder)
        self._fd = os.open(self.path, os.O_RDONLY)
        total = sum(int(t.n_bytes) for t, _ in self.plan)
        try:
            with (ShardedWriter(folder, layout, max_shard_bytes=self.max_shard_bytes) as writer,
                  (contextlib.nullcontext(self.bar) if self.bar is not None else progress(self.show_progress)) as bar):
                task = bar.add_task(f"import {self.path.name} (MB read)", total=round(total / 1e6, 1))
                for t, hf in self.plan:
                    w = self._tensor(t)
                    if tuple(w.shape) != self.shapes[hf]:
                        raise AclarenaError(f"the GGUF model of {self.path} does not fit its own metadata: tensor "
                                            f"{t.name} has shape {list(w.shape)} but the config makes {hf} "
                                            f"{list(self.shapes[hf])}; this file cannot be imported")
                    writer.write(hf, torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).to(torch_dtype))
                    del w  # the next tensor is read only now: one tensor (and its quantized bytes) at a time
                    bar.advance(task, round(int(t.n_bytes) / 1e6, 1))
        finally:
            os.close(self._fd)


def _load(path: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aclarena.progress import quiet_libraries

    _gguf_module()
    quiet_libraries()
    from aclarena.models.loading import library_errors

    # the loaders' one error path: whatever transformers raises (a config its tensors contradict: a size
    # mismatch, a validation error) is one line, and its LOAD REPORT stays off the terminal
    with library_errors(f"transformers cannot read {path}"), _no_piped_bar():
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return model, tokenizer


@contextlib.contextmanager
def _no_piped_bar() -> Iterator[None]:
    """transformers draws its GGUF conversion bar with tqdm directly (not through its own switch): keep it off a
    stderr that is not a terminal (a piped log), as aclarena's own bars are."""
    import functools
    import sys

    from transformers import modeling_gguf_pytorch_utils as mod

    original = mod.tqdm
    if not sys.stderr.isatty():
        mod.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        mod.tqdm = original


def _rebuild(model: Any, dtype: str) -> Any:
    """The same weights in a model transformers will save: built from the config without its
    ``quantization_config``, the dequantized state dict loaded strictly, cast to ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {k: v.detach().to(torch.float32) for k, v in model.state_dict().items()}
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    tied = {k for k in missing if k.endswith("lm_head.weight") and getattr(config, "tie_word_embeddings", False)}
    if set(missing) - tied or unexpected:
        raise AclarenaError(f"the GGUF model's tensors do not fit its config (missing {sorted(set(missing) - tied)[:3]}, "
                            f"unexpected {sorted(unexpected)[:3]}); this architecture cannot be imported")
    fresh.generation_config = copy.deepcopy(model.generation_config)
    return fresh.to(getattr(torch, dtype)).eval()


def _write(model: Any, tokenizer: Any, record: GgufImport, out_dir: Path) -> None:
    parent = out_dir.parent
    try:
        staging = staging_folder(out_dir, "import")  # and the staging folders of killed imports removed
        mask = os.umask(0)
        os.umask(mask)
        staging.chmod(0o777 & ~mask)  # the folder a plain mkdir makes (0755 usually), not mkdtemp's 0700
    except OSError as e:
        raise AclarenaError(f"cannot write in {parent}: {e.strerror or e}; choose another --out") from None
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / IMPORT_RECORD).write_text(json.dumps(record.to_dict(), indent=2) + "\n", encoding="utf-8")
        check_replaceable(out_dir, lambda d: (d / IMPORT_RECORD).is_file(), what="import")  # again, just before
        replace_folder(staging, out_dir)
    except OSError as e:
        raise AclarenaError(f"cannot write {out_dir}: {e.strerror or e} (nothing was left half-written)") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def read_import_record(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``aclarena-import.json`` of a folder written by :func:`import_gguf`, or None."""
    try:
        data = json.loads((Path(folder) / IMPORT_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
