"""An SFT phase with a LoRA adapter (``run_sft(..., peft_config=...)``): only the adapter trains."""

from __future__ import annotations

import torch


def test_sft_phase_trains_an_adapter_on_the_frozen_start(tokenizer, tmp_path):
    from peft import LoraConfig, PeftModel
    from safetensors.torch import load_file

    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
    from aclarena.train.data import expert_records
    from aclarena.train.phases import load_start, run_sft

    start = save_checkpoint(build_model(tiny_config(tokenizer, max_positions=1024), seed=3), tokenizer,
                            tmp_path / "start")
    before = load_file(str(start / "model.safetensors"))
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
    trl = {"max_steps": 2, "per_device_train_batch_size": 2, "learning_rate": 1e-2, "save_strategy": "no",
           "logging_steps": 1, "report_to": []}
    res = run_sft(start, expert_records("math", 4, 0), tmp_path / "out", trl=trl, seed=0, peft_config=lora)
    assert res.steps == 2
    out = tmp_path / "out"
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    adapter = load_file(str(out / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    assert any(k.endswith("lora_B.weight") and adapter[k].abs().sum() > 0 for k in adapter)  # B starts at 0
    kept = load_file(str(start / "model.safetensors"))
    assert all(torch.equal(before[k], kept[k]) for k in before)  # the start is frozen, not rewritten
    model, _ = load_start(start)
    merged = PeftModel.from_pretrained(model, out).merge_and_unload().state_dict()
    changed = [k for k, v in before.items() if k in merged and not torch.equal(v, merged[k])]
    assert changed and all("proj" in k for k in changed)  # the linear layers moved, nothing else
