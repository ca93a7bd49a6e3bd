"""Helpers of the drift-monitor tests: a plain transformers Trainer on a tiny model, probe sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixtures import corpus

PROMPTS = [
    {"messages": [{"role": "user", "content": f"what is {a} + {b}?"}]} for a, b in ((3, 4), (12, 9), (7, 30), (41, 2))
] + [{"messages": [{"role": "user", "content": "search the capital city of the river"}]},
     {"messages": [{"role": "user", "content": "please cancel my order and confirm"}]}]


def make_probe(model: Any, tokenizer: Any, name: str = "math", reference: str = "ref", *, folder: Path | None = None,
               max_new_tokens: int = 24) -> Any:
    """Frozen greedy generations of ``model`` on a few chat prompts (tokenizer fingerprint recorded)."""
    from aclarena.models.tokenizer_files import tokenizer_fingerprint
    from aclarena.probes.generation import GenerationSettings, generate_probe_set

    probe = generate_probe_set(model, tokenizer, PROMPTS, name=name, reference=reference,
                               settings=GenerationSettings(max_new_tokens=max_new_tokens, temperature=1.0, seed=0))
    if folder is not None:
        probe.settings["tokenizer"] = tokenizer_fingerprint(folder)
    return probe


def lm_dataset(tokenizer: Any, n: int = 64, seed: int = 0) -> Any:
    from datasets import Dataset

    texts = corpus(n, seed=seed)
    enc = [tokenizer(t, truncation=True, max_length=64)["input_ids"] for t in texts]
    return Dataset.from_list([{"input_ids": ids} for ids in enc])


def plain_trainer(model: Any, tokenizer: Any, out: Path, *, steps: int, lr: float, callbacks: list[Any],
                  save_steps: int = 1000, seed: int = 0, report_to: str = "none", **extra: Any) -> Any:
    """A plain ``transformers.Trainer`` (not trl) training ``model`` as a language model on CPU."""
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    args = TrainingArguments(**{
        "output_dir": str(out), "max_steps": steps, "per_device_train_batch_size": 4, "learning_rate": lr,
        "lr_scheduler_type": "constant", "warmup_steps": 0, "logging_steps": 1, "save_strategy": "steps",
        "save_steps": save_steps, "report_to": report_to, "use_cpu": True, "disable_tqdm": True, "seed": seed,
        "dataloader_num_workers": 0, **extra,
    })
    return Trainer(model=model, args=args, train_dataset=lm_dataset(tokenizer),
                   data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                   processing_class=tokenizer, callbacks=callbacks)


def fsdp_trainer(model: Any, tokenizer: Any, out: Path, *, steps: int, lr: float, callbacks: list[Any],
                 **extra: Any) -> Any:
    """:func:`plain_trainer` with FSDP2 (``fully_shard`` through accelerate) on CPU processes over gloo.

    accelerate 1.15 applies its FSDP plugin only on accelerator devices: on CPU processes it
    silently trains with DDP (whole weights on every process). This trainer turns that one
    switch, so that accelerate's own FSDP2 preparation (``fsdp2_prepare_model``: each decoder
    layer, then the root, sharded with ``fully_shard``) runs on CPU as it would on GPUs.
    """
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    class CpuFsdpTrainer(Trainer):
        def create_accelerator_and_postprocess(self) -> None:
            super().create_accelerator_and_postprocess()
            state = self.accelerator.state
            if state.distributed_type == DistributedType.MULTI_CPU:
                state.distributed_type = DistributedType.FSDP
                state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
                self.is_fsdp_enabled = True

    args = TrainingArguments(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, learning_rate=lr,
        lr_scheduler_type="constant", warmup_steps=0, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, disable_tqdm=True, seed=0, dataloader_num_workers=0, fsdp=True,
        fsdp_config={"version": 2}, **extra,
    )
    return CpuFsdpTrainer(model=model, args=args, train_dataset=lm_dataset(tokenizer),
                          data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                          processing_class=tokenizer, callbacks=callbacks)
