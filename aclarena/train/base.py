"""Stage 0: the base model a curriculum starts from.

* **Real runs** name an HF base (``[base] model = "Qwen/Qwen3-8B-Base"`` or a folder). Nothing is
  trained; the manifest points at it. A hub id is downloaded by transformers when first loaded
  (that is the only download aclarena ever causes); its tokenizer must carry a chat template
  (``[base] chat_template = "file.jinja"`` supplies one). SFT phases with assistant-only loss need
  ``{% generation %}`` markers: trl adds them itself for the templates it knows (Qwen3 among them).
* **The mini arena** starts from the base shipped inside the package
  (:mod:`aclarena.models.shipped`, ``aclarena/models/mini_base/``): :func:`copy_shipped_base`
  checks its fingerprint and copies it into the run. With ``rebuild = true`` (and for the ``tiny``
  preset) :func:`build_mini_base` builds one instead: a byte-level BPE of ``vocab_size`` tokens
  trained on the arena's text (:func:`aclarena.envs.data.tokenizer_corpus`), a small Qwen3 (a few
  million parameters, ``max_positions`` >= 1,024 so that e-commerce conversations fit), pretrained
  on what a base model knows (:func:`aclarena.train.data.pretraining_records`: the world's
  passages, chat, multiple-choice practice, copying, generic tool chains, short instructions,
  arithmetic) and none of the task formats. The ``tiny`` preset is the same at toy size (hidden
  64, 2 layers) for tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError
from aclarena.train.config import BaseSpec
from aclarena.train.phase_record import PhaseResult, finished
from aclarena.train.phases import run_sft

TINY = {"vocab_size": 512, "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
        "intermediate_size": 128}


def architecture(spec: BaseSpec) -> dict[str, int]:
    """Model sizes of a mini base (the ``tiny`` preset overrides them with toy sizes)."""
    sizes = {k: getattr(spec, k) for k in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                           "intermediate_size", "max_positions")}
    if spec.preset == "tiny":
        sizes.update(TINY)
    return sizes


def build_mini_base(spec: BaseSpec, out_dir: str | os.PathLike[str], *, seed: int, fingerprint: str | None = None,
                    callbacks: list[Any] | None = None, work_dir: str | os.PathLike[str] | None = None,
                    keep_trainer_checkpoints: bool = False) -> PhaseResult:
    """Train the tokenizer, initialise a small Qwen3 and pretrain it into ``out_dir`` (resumable)."""
    done = finished(out_dir, fingerprint)
    if done is not None:
        return done
    from aclarena.envs.data import tokenizer_corpus
    from aclarena.models.tiny import build_model, tiny_config, train_tokenizer
    from aclarena.train.data import pretraining_records

    sizes = architecture(spec)
    tok = train_tokenizer(tokenizer_corpus(), vocab_size=sizes["vocab_size"], model_max_length=sizes["max_positions"])
    config = tiny_config(tok, hidden_size=sizes["hidden_size"], num_layers=sizes["num_layers"],
                         num_heads=sizes["num_heads"], num_kv_heads=sizes["num_kv_heads"],
                         intermediate_size=sizes["intermediate_size"], max_positions=sizes["max_positions"])
    model = build_model(config, seed=seed)
    model.train()
    records = pretraining_records(tok, chat_examples=spec.chat_examples, mc_examples=spec.mc_examples, seed=seed,
                                  tool_examples=spec.tool_examples, arithmetic_examples=spec.arithmetic_examples,
                                  copy_examples=spec.copy_examples, tool_chain_examples=spec.tool_chain_examples,
                                  instruction_examples=spec.instruction_examples, story_examples=spec.story_examples,
                                  passage_repeats=spec.passage_repeats)
    # documents packed into 512-token rows (as in pretraining): no padding between short and long texts
    trl = {"learning_rate": 2e-3, "per_device_train_batch_size": 4, "packing": True, "packing_strategy": "wrapped",
           "max_length": 512, "num_train_epochs": 1, "logging_steps": 10, "warmup_steps": 10,
           "lr_scheduler_type": "cosine", **spec.trl}
    n_params = sum(p.numel() for p in model.parameters())
    return run_sft("<new>", records, out_dir, trl=trl, seed=seed, callbacks=callbacks or (), work_dir=work_dir,
                   fingerprint=fingerprint, model=model, tokenizer=tok,
                   meta={"name": "base", "seed": seed, "parameters": n_params, "architecture": sizes},
                   keep_trainer_checkpoints=keep_trainer_checkpoints)


def copy_shipped_base(out_dir: str | os.PathLike[str], *, fingerprint: str | None = None) -> PhaseResult:
    """Start a run from the base shipped inside the package: check its fingerprint, copy it into ``out_dir``.

    The copy keeps the run self-contained (an upgrade of aclarena never changes a run's base);
    its marker carries the run's ``fingerprint`` and the shipped base's pretraining steps and log,
    so the run records the base's pretraining as if it had built it. A missing or modified shipped
    file is a one-line error naming it and the rebuild command; nothing is pretrained instead.
    """
    import shutil
    import time

    from aclarena.models.shipped import SHIP_FILES, recorded, shipped_base
    from aclarena.train.phase_record import LOG_FILE, MARKER, read_log, write_json_atomic
    from aclarena.train.phases import check_writable

    t0 = time.monotonic()
    done = finished(out_dir, fingerprint)
    if done is not None:
        return done
    src = shipped_base()
    rec = recorded(src)
    out = Path(out_dir)
    check_writable(out.parent)
    if out.exists():
        shutil.rmtree(out)  # leftovers of an interrupted copy (no marker)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in SHIP_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, tmp / name)
    os.replace(tmp, out)
    logs = read_log(out / LOG_FILE)
    # time_s is this run's (the copy); the pretraining's own time stays in the meta
    meta = {**rec.get("meta", {}), "name": "base", "shipped": rec["fingerprint"],
            "pretraining_time_s": rec.get("time_s")}
    steps, time_s = int(rec.get("steps") or 0), round(time.monotonic() - t0, 3)
    write_json_atomic(out / MARKER, {"fingerprint": fingerprint, "steps": steps, "time_s": time_s,
                                      "resumed_from_step": None, "finished_at": time.time(), "meta": meta})
    return PhaseResult(folder=out, steps=steps, time_s=time_s, log_history=logs, meta=meta)


def check_external_base(spec: BaseSpec) -> str:
    """Check that an HF base exists (locally, or as a hub id) and that its tokenizer has a chat template.

    Returns the location to write in the manifest (an absolute folder or the hub id). A hub
    id is not downloaded here: only its local files are checked when present.
    """
    from aclarena.models.tokenizer_files import has_chat_template

    assert spec.model is not None
    path = Path(spec.model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise CheckpointError(f"[base] model = {spec.model!r} is a file; name an HF model folder or a hub id")
        if spec.chat_template is None and not has_chat_template(path):
            raise CheckpointError(
                f"the tokenizer of base {spec.model!r} has no chat template; add chat_template.jinja to the folder, "
                "set [base] chat_template = \"file.jinja\", or use a base whose tokenizer has one"
            )
        return str(path.resolve())
    if spec.model.startswith((".", "/", "~")) or spec.model.count("/") != 1:
        raise CheckpointError(f"[base] model = {spec.model!r}: no such folder, and not a hub id (org/name)")
    return spec.model
