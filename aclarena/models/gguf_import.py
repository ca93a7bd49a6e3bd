"""GGUF in: write an HF safetensors folder from a ``.gguf`` file (``aclarena-diag import``).

transformers reads GGUF files itself (``from_pretrained(folder, gguf_file=...)``: the tensors are
dequantized, llama.cpp's Q/K row permutation undone, the tokenizer rebuilt from the file's vocabulary,
merges and chat template), but it marks the model as quantized with ``gguf`` and refuses
``save_pretrained``. So the dequantized state dict is loaded into a model built from the same config
without its ``quantization_config``, cast to the chosen dtype and saved with its tokenizer. The folder
is written beside its place and renamed there only when complete.

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
                force: bool = False, phase: Callable[[str], None] | None = None) -> GgufImport:
    """Write the model and tokenizer of a GGUF file as an HF safetensors folder ``out``.

    Args:
        source: a ``.gguf`` file or a folder holding exactly one.
        out: the folder to write (refused when it exists, unless ``force``).
        dtype: ``float32`` (the dequantized values exactly), ``bfloat16`` or ``float16``.
        force: replace an existing ``out`` (only once the new folder is complete).
        phase: called with the name of each phase as it starts (hashing, reading, rebuilding, writing:
            minutes each on a 1 GB file), for progress lines.
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
    say("reading and dequantizing the tensors and the tokenizer (transformers)")
    model, tokenizer = _load(path)
    from aclarena.models.loading import library_errors

    say(f"rebuilding the model in {dtype}")
    with library_errors(f"the GGUF model of {path} does not fit its own metadata"):
        rebuilt = _rebuild(model, dtype)
    eot_text, eot, added = _stop_at_end_of_turn(rebuilt, tokenizer)
    record = GgufImport(out=str(out_dir), source=str(path.resolve()), source_bytes=path.stat().st_size,
                        source_sha256=digest, architecture=info["architecture"], quantization=info["quantization"],
                        tensor_types=info["tensor_types"], dtype=dtype,
                        parameters=sum(p.numel() for p in rebuilt.parameters()),
                        eos_token_ids=_eos_list(rebuilt.generation_config.eos_token_id),
                        end_of_turn=eot_text.strip() or None if eot is not None else None, end_of_turn_id=eot,
                        end_of_turn_added=added)
    say(f"writing {out_dir}")
    _write(rebuilt, tokenizer, record, out_dir)
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
