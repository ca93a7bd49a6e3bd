"""Phase runners: one SFT or RL phase from a starting checkpoint into a checkpoint folder.

:func:`run_sft` trains with trl's ``SFTTrainer`` (assistant tokens only for conversations,
every token for plain ``text`` records); :func:`run_rl` with trl's ``GRPOTrainer``
(critic-free, group-relative advantages), with trl's own generation for single-turn prompts
or a ``rollout_func`` for multi-turn tool episodes (:mod:`aclarena.train.rollout`). Both are
plain functions that other parts reuse (consolidation, monitoring): a starting checkpoint, the
data, an output folder, trl overrides and extra callbacks.

Resumability, in two layers:

* A phase is *finished* when its output folder holds the completion marker
  (``.aclarena-phase.json``), written last, after the weights and tokenizer. A finished phase
  with the same fingerprint is never trained again: the runner returns its recorded result.
* Inside a phase the trainer saves checkpoints (``save_steps``) into a work folder; a killed
  phase resumes from the last one (``resume_from_checkpoint``). The work folder is deleted
  once the phase is finished (``keep_trainer_checkpoints`` keeps it), and discarded when its
  fingerprint differs from the phase's (the settings changed).

aclarena's defaults (lowest precedence, under the config's and the command line's
overrides): CPU-safe precision (``bf16`` only on CUDA, no gradient checkpointing), constant
learning rate (no warm-up: phases may be a few steps long), logging every few steps into the trainer's history
(which the curriculum copies into results.h5), ``report_to`` tensorboard when it is
installed (its event files end in the finished checkpoint's ``runs/``), trl's progress bars off
(the curriculum shows its own).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from aclarena.distributed import is_main_process, wait_for_everyone
from aclarena.errors import AclarenaError, CheckpointError, ConfigError
from aclarena.models.arch import context_length
from aclarena.train.phase_record import LOG_FILE, MARKER, PhaseResult, finished, write_json_atomic

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback

WORK_STATE = "aclarena-work.json"


@dataclass
class RLData:
    """The inputs of an RL phase.

    Attributes:
        dataset: a ``datasets.Dataset`` with a conversational ``prompt`` column (and any columns
            the reward functions take as keyword arguments).
        reward_funcs: trl reward functions ``(prompts, completions, **columns) -> list[float]``.
        rollout: a trl ``rollout_func(prompts, trainer)`` for multi-turn episodes, or None for
            trl's own single-turn generation.
        max_completion_length: tokens per completion (trl's generation), or the cap the rollout uses.
    """

    dataset: Any
    reward_funcs: list[Callable[..., list[float]]]
    rollout: Callable[..., dict[str, list[Any]]] | None = None
    max_completion_length: int = 64


# --- errors ----------------------------------------------------------------------------------

DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
DISK_WORDS = ("No space left", "File too large", "Disk quota", "Read-only file system", "Permission denied",
              "FileTooLarge", "StorageFull", "os error 27", "os error 28")


def disk_problem(e: BaseException) -> str | None:
    """A one-line reason when ``e`` is a failed write (full disk, file size limit, permissions), else None."""
    if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
        return e.strerror or str(e)
    text = str(e)
    for w in DISK_WORDS:
        if w in text:
            return w if not w.startswith("os error") else ("No space left on device" if w.endswith("28")
                                                           else "File too large")
    cause = e.__cause__ or e.__context__
    if cause is not None and cause is not e:
        return disk_problem(cause)
    return None


@contextlib.contextmanager
def disk_errors(what: str) -> Iterator[None]:
    """Turn a failed write while doing ``what`` into one line; finished phases stay as they are."""
    try:
        yield
    except AclarenaError:
        raise
    except Exception as e:
        reason = disk_problem(e)
        if reason is None:
            raise
        raise AclarenaError(f"cannot write while {what}: {reason}; free space (or fix permissions) and rerun: "
                            "finished phases are kept and this one resumes from its last saved step") from None


def check_writable(folder: str | os.PathLike[str]) -> None:
    """Create ``folder`` if needed and check that files can be written in it (one-line error otherwise)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".aclarena-write-test.{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        raise AclarenaError(f"cannot write in {folder}: {e.strerror or e}; choose a writable output folder (--out)") from None


# --- loading ---------------------------------------------------------------------------------


def load_start(start: str | os.PathLike[str], *, require_chat_template: bool = True, allow_pickle: bool = False,
               chat_template: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model and tokenizer a phase starts from: an HF folder, or a hub id (downloaded only when named).

    Goes through :mod:`aclarena.models.loading` (safetensors only unless ``allow_pickle``), in
    float32 on the CPU; the trainer moves it. The tokenizer must carry a chat template
    (``chat_template`` replaces it).
    """
    from aclarena.models.loading import LoadOptions, load_model, load_tokenizer
    from aclarena.store.manifest import CheckpointSpec, Manifest

    src = str(start)
    path = Path(src)
    spec = CheckpointSpec(name="start", path=str(path.resolve()) if path.exists() else src, kind="base")
    manifest = Manifest(name="phase", checkpoints={"start": spec})
    model = load_model(spec, manifest, ".", LoadOptions(dtype="float32", device="cpu", allow_pickle=allow_pickle))
    tok = load_tokenizer(spec, manifest, ".", require_chat_template=require_chat_template and chat_template is None)
    if chat_template is not None:
        tok.chat_template = chat_template
    if require_chat_template and not getattr(tok, "chat_template", None):
        raise CheckpointError(f"the tokenizer of {src} has no chat template; add one (chat_template.jinja) or use an "
                              "instruct tokenizer")
    model.train()
    return model, tok


# --- trl arguments ---------------------------------------------------------------------------


#: where report_to="tensorboard" writes: the trainer's output_dir/runs, moved into the finished checkpoint
TENSORBOARD = "runs"


def tensorboard_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None or importlib.util.find_spec("tensorboardX") is not None


def base_defaults(seed: int) -> dict[str, Any]:
    """Defaults shared by SFT and RL (the lowest precedence)."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "seed": seed,
        "data_seed": seed,
        "bf16": cuda and torch.cuda.is_bf16_supported(),
        "fp16": False,
        "use_cpu": not cuda,
        "gradient_checkpointing": False,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "save_strategy": "steps",
        "save_steps": 25,
        "save_total_limit": 1,
        "disable_tqdm": True,
        "report_to": ["tensorboard"] if tensorboard_installed() else "none",
        "dataloader_num_workers": 0,
    }


SFT_DEFAULTS: dict[str, Any] = {"per_device_train_batch_size": 8, "learning_rate": 5e-4, "logging_steps": 5}
RL_DEFAULTS: dict[str, Any] = {"per_device_train_batch_size": 8, "num_generations": 4, "learning_rate": 5e-5,
                               "logging_steps": 1, "beta": 0.0, "temperature": 1.0, "shuffle_dataset": True}
# on-policy distillation (trl's DistillationTrainer: the student samples every completion)
DISTILL_DEFAULTS: dict[str, Any] = {"per_device_train_batch_size": 8, "learning_rate": 1e-4, "logging_steps": 1,
                                    "temperature": 1.0}
DEFAULTS: dict[str, dict[str, Any]] = {"sft": SFT_DEFAULTS, "rl": RL_DEFAULTS, "distill": DISTILL_DEFAULTS}


def make_args(kind: str, output_dir: Path, seed: int, overrides: Mapping[str, Any], extra: Mapping[str, Any]) -> Any:
    """trl's SFTConfig / GRPOConfig / DistillationConfig (``kind`` sft, rl, distill): aclarena's
    defaults < ``extra`` (the runner's) < ``overrides`` (the user's)."""
    from trl import DistillationConfig, GRPOConfig, SFTConfig

    from aclarena.train.trl_fields import check_trl

    try:
        check_trl(kind, overrides)
    except ConfigError as e:
        raise ConfigError(str(e)) from None
    kwargs = {**base_defaults(seed), **DEFAULTS[kind], **extra, **overrides}
    kwargs["output_dir"] = str(output_dir)  # TensorBoard writes under output_dir/runs (transformers 5 has no logging_dir)
    cls = {"sft": SFTConfig, "rl": GRPOConfig, "distill": DistillationConfig}[kind]
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"trl rejects the {kind.upper()} settings: {first}") from None


# --- shared machinery ------------------------------------------------------------------------


def quiet() -> None:
    """Keep training output to aclarena's own progress view."""
    import warnings

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with contextlib.suppress(ImportError):
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=UserWarning, module=r"trl(\.|$)")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(trl|transformers|accelerate)(\.|$)")
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")


def last_checkpoint(work_dir: Path) -> str | None:
    """The newest *complete* trainer checkpoint in ``work_dir`` (None if there is none).

    The Trainer writes a checkpoint's ``trainer_state.json`` after its weights, optimizer and RNG
    states, so a checkpoint whose state file is missing or unreadable was cut short (a kill, a
    full disk) and is removed rather than resumed from.
    """
    if not work_dir.is_dir():
        return None
    found = []
    for p in work_dir.glob("checkpoint-*"):
        with contextlib.suppress(ValueError):
            found.append((int(p.name.rsplit("-", 1)[1]), p))
    for _, p in sorted(found, reverse=True):
        try:
            if not isinstance(json.loads((p / "trainer_state.json").read_text(encoding="utf-8")), dict):
                raise ValueError("trainer_state.json is not an object")
            return str(p)
        except (OSError, ValueError, RecursionError):
            if is_main_process():
                shutil.rmtree(p, ignore_errors=True)
    return None


def _prepare_work(work_dir: Path, fingerprint: str | None) -> None:
    """Keep the trainer checkpoints of an interrupted run of the same phase; discard others."""
    state = work_dir / WORK_STATE
    if work_dir.is_dir() and is_main_process():
        old = None
        with contextlib.suppress(OSError, ValueError, RecursionError):
            data = json.loads(state.read_text(encoding="utf-8"))
            old = data.get("fingerprint") if isinstance(data, dict) else None  # another shape: not this phase's
        if old != fingerprint:
            shutil.rmtree(work_dir, ignore_errors=True)
    if is_main_process():
        work_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(state, {"fingerprint": fingerprint})
    wait_for_everyone()


def _clean_log(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in history:
        out.append({k: (float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v)
                    for k, v in row.items() if isinstance(v, int | float | str) and not isinstance(v, bool)})
    return out


def _train_and_save(trainer: Any, tokenizer: Any, out_dir: Path, work_dir: Path, *, what: str,
                    meta: Mapping[str, Any], fingerprint: str | None, keep_work: bool) -> PhaseResult:
    from aclarena.train.callbacks import bind_callbacks, stopped_by_monitor
    from aclarena.train.progress import remove_printer

    remove_printer(trainer)
    bind_callbacks(trainer)  # drift monitors log through the trainer's callbacks (report_to included)
    resume = last_checkpoint(work_dir)
    resumed_from = None
    if resume is not None:
        with contextlib.suppress(ValueError):
            resumed_from = int(Path(resume).name.rsplit("-", 1)[-1])
    t0 = time.monotonic()
    with disk_errors(what):
        trainer.train(resume_from_checkpoint=resume)
        elapsed = time.monotonic() - t0
        stopped = stopped_by_monitor(trainer, f"training {out_dir.name}")
        if stopped is not None:  # not finished: its trainer checkpoint at the warning is kept to resume from
            raise stopped
        if is_main_process() and out_dir.exists():
            shutil.rmtree(out_dir)  # leftovers of a save that was interrupted (no marker)
        wait_for_everyone()
        trainer.save_model(str(out_dir))
        history = _clean_log(trainer.state.log_history)
        steps = int(trainer.state.global_step)
        if is_main_process():
            tokenizer.padding_side = "left"  # generation pads left; trl saves 'right'
            tokenizer.save_pretrained(str(out_dir))
            write_json_atomic(out_dir / LOG_FILE, history)
            if (work_dir / TENSORBOARD).is_dir():  # report_to's event files outlive the work folder
                shutil.move(str(work_dir / TENSORBOARD), str(out_dir / TENSORBOARD))
            from aclarena.reproducibility import environment

            marker = {"fingerprint": fingerprint, "steps": steps, "time_s": round(elapsed, 3),
                      "resumed_from_step": resumed_from, "finished_at": time.time(), "meta": dict(meta),
                      "environment": environment()}
            write_json_atomic(out_dir / MARKER, marker)  # last: the phase is finished from here on
            if not keep_work:
                shutil.rmtree(work_dir, ignore_errors=True)
        wait_for_everyone()
    return PhaseResult(folder=out_dir, steps=steps, time_s=elapsed, log_history=history,
                       resumed_from_step=resumed_from, meta=dict(meta))


def _default_work(out_dir: Path) -> Path:
    return out_dir.parent / f".work-{out_dir.name}"


def _set_up(out: Path, work_dir: str | os.PathLike[str] | None, fingerprint: str | None) -> Path:
    """Set up a phase that still has to run: quiet the libraries, and return its trainer-checkpoint
    folder, checked and prepared (after the output's parent is found writable), so that a phase
    fails before training rather than at its first save."""
    quiet()
    work = Path(work_dir) if work_dir is not None else _default_work(out)
    check_writable(out.parent)
    _prepare_work(work, fingerprint)
    return work


# --- the runners -----------------------------------------------------------------------------


def run_sft(
    start: str | os.PathLike[str],
    records: Sequence[Mapping[str, Any]] | Any,
    out_dir: str | os.PathLike[str],
    *,
    trl: Mapping[str, Any] | None = None,
    seed: int = 0,
    callbacks: Sequence[TrainerCallback] = (),
    work_dir: str | os.PathLike[str] | None = None,
    fingerprint: str | None = None,
    meta: Mapping[str, Any] | None = None,
    keep_trainer_checkpoints: bool = False,
    model: Any = None,
    tokenizer: Any = None,
    chat_template: str | None = None,
    peft_config: Any = None,
) -> PhaseResult:
    """Supervised fine-tuning of ``start`` on ``records`` into ``out_dir``; resumable.

    Args:
        start: HF folder or hub id of the starting checkpoint (``model``/``tokenizer`` may be
            given already loaded instead, e.g. a freshly initialised base).
        records: conversations ``{"messages": [...], "tools": [...] | JSON string | None}``
            (loss on assistant tokens only) or plain ``{"text": ...}`` (loss on every token);
            a list or a ``datasets.Dataset``.
        out_dir: the checkpoint folder; holds the completion marker once finished.
        trl: ``SFTConfig`` overrides (they win over aclarena's defaults).
        seed: training seed (data order, initialisation of anything random).
        callbacks: extra ``TrainerCallback`` objects (monitoring, progress).
        work_dir: where trainer checkpoints go (default: a hidden sibling of ``out_dir``).
        fingerprint: identity of the phase's settings; a finished folder with another one is an error.
        meta: recorded in the marker (name, parent, domain...).
        chat_template: replaces the starting tokenizer's chat template (saved with the result).
        peft_config: a peft ``LoraConfig``: only an adapter on the frozen ``start`` trains, and
            ``out_dir`` holds the adapter alone (``adapter_model.safetensors``).
    """
    out = Path(out_dir)
    if (done := finished(out, fingerprint)) is not None:
        return done
    work = _set_up(out, work_dir, fingerprint)
    from datasets import Dataset
    from trl import SFTTrainer

    if model is None or tokenizer is None:
        model, tokenizer = load_start(start, chat_template=chat_template)
    ds = records if isinstance(records, Dataset) else Dataset.from_list([dict(r) for r in records])
    if len(ds) == 0:
        raise ConfigError(f"no training records for {out.name}; check the phase's data settings")
    conversational = "messages" in ds.column_names
    keep = ["messages", "tools"] if conversational else ["text"]
    if not conversational and "text" not in ds.column_names:
        raise ConfigError(f"SFT records for {out.name} need `messages` (conversations) or `text`; got columns "
                          f"{ds.column_names}")
    ds = ds.remove_columns([c for c in ds.column_names if c not in keep])
    # deliberately not the model's whole context: 1,024 when its config sets none, and at most 4,096 tokens per
    # training sequence (memory), whatever the model takes
    positions = context_length(model.config) or 1024
    extra = {"assistant_only_loss": conversational, "max_length": min(positions, 4096), "packing": False}
    args = make_args("sft", work, seed, dict(trl or {}), extra)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer,
                         callbacks=list(callbacks), peft_config=peft_config)
    return _train_and_save(trainer, tokenizer, out, work, what=f"training {out.name}", meta=meta or {},
                           fingerprint=fingerprint, keep_work=keep_trainer_checkpoints)


def run_rl(
    start: str | os.PathLike[str],
    data: RLData,
    out_dir: str | os.PathLike[str],
    *,
    trl: Mapping[str, Any] | None = None,
    seed: int = 0,
    callbacks: Sequence[TrainerCallback] = (),
    work_dir: str | os.PathLike[str] | None = None,
    fingerprint: str | None = None,
    meta: Mapping[str, Any] | None = None,
    keep_trainer_checkpoints: bool = False,
    chat_template: str | None = None,
    peft_config: Any = None,
) -> PhaseResult:
    """GRPO of ``start`` on ``data`` (prompts, rewards, optional multi-turn rollout) into ``out_dir``; resumable.

    Arguments as :func:`run_sft`; ``trl`` overrides ``GRPOConfig``. Build ``data`` for an arena
    domain with :func:`aclarena.train.data.arena_rl_data`. With ``peft_config`` (a peft
    ``LoraConfig``) only an adapter on the frozen ``start`` trains, and ``out_dir`` holds the
    adapter alone (``adapter_model.safetensors``).
    """
    out = Path(out_dir)
    if (done := finished(out, fingerprint)) is not None:
        return done
    work = _set_up(out, work_dir, fingerprint)
    from trl import GRPOTrainer

    model, tokenizer = load_start(start, chat_template=chat_template)
    tokenizer.padding_side = "left"
    extra: dict[str, Any] = {"max_completion_length": data.max_completion_length}
    args = make_args("rl", work, seed, dict(trl or {}), extra)
    gen_batch = (args.generation_batch_size or args.per_device_train_batch_size * (args.steps_per_generation or 1))
    if gen_batch % args.num_generations:
        raise ConfigError(f"the generation batch ({gen_batch}) must be a multiple of num_generations "
                          f"({args.num_generations}); change per_device_train_batch_size or num_generations")
    kwargs: dict[str, Any] = {}
    if data.rollout is not None:
        kwargs["rollout_func"] = data.rollout
    if peft_config is not None:
        kwargs["peft_config"] = peft_config
    # trl annotates rewards as list[float | None]; ours return list[float] (the list is invariant)
    trainer = GRPOTrainer(model=model, reward_funcs=cast(Any, data.reward_funcs), args=args, train_dataset=data.dataset,
                          processing_class=tokenizer, callbacks=list(callbacks), **kwargs)
    return _train_and_save(trainer, tokenizer, out, work, what=f"training {out.name}", meta=meta or {},
                           fingerprint=fingerprint, keep_work=keep_trainer_checkpoints)


def run_trainer(
    build: Callable[[Any], Any],
    tokenizer: Any,
    out_dir: str | os.PathLike[str],
    *,
    kind: str,
    trl: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    seed: int = 0,
    work_dir: str | os.PathLike[str] | None = None,
    fingerprint: str | None = None,
    meta: Mapping[str, Any] | None = None,
    keep_trainer_checkpoints: bool = False,
) -> PhaseResult:
    """Any trl trainer as a resumable phase into ``out_dir`` (what :func:`run_sft` and :func:`run_rl` do
    with theirs); for trainers aclarena does not run itself (e.g. multi-teacher distillation).

    Args:
        build: ``build(args) -> trainer``, given trl's config for ``kind`` (``sft``, ``rl`` or
            ``distill``) made from aclarena's defaults < ``extra`` < ``trl``; its ``output_dir``
            is the work folder, so an interrupted phase resumes from its last saved step.
        tokenizer: saved beside the weights.
        (the rest as :func:`run_sft`)
    """
    out = Path(out_dir)
    if (done := finished(out, fingerprint)) is not None:
        return done
    work = _set_up(out, work_dir, fingerprint)
    args = make_args(kind, work, seed, dict(trl or {}), dict(extra or {}))
    trainer = build(args)
    return _train_and_save(trainer, tokenizer, out, work, what=f"training {out.name}", meta=meta or {},
                           fingerprint=fingerprint, keep_work=keep_trainer_checkpoints)
