"""A phase with ``report_to="tensorboard"`` (aclarena's default when tensorboard is installed) trains, and its
event files end in the finished checkpoint's ``runs/`` (the work folder they are written in is deleted)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_tensorboard_events_outlive_the_work_folder(kind, tokenizer, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
    from aclarena.train.data import arena_rl_data, expert_records
    from aclarena.train.phases import TENSORBOARD, run_rl, run_sft

    start = save_checkpoint(build_model(tiny_config(tokenizer, max_positions=1024), seed=3), tokenizer,
                            tmp_path / "start")
    trl = {"max_steps": 2, "per_device_train_batch_size": 4, "save_strategy": "no", "logging_steps": 1,
           "report_to": ["tensorboard"]}
    out, work = tmp_path / "out", tmp_path / "work"
    if kind == "sft":
        run_sft(start, expert_records("math", 4, 0), out, trl=trl, seed=0, work_dir=work)
    else:
        run_rl(start, arena_rl_data("math", 4, 0), out, trl={**trl, "num_generations": 2, "max_completion_length": 8},
               seed=0, work_dir=work)
    assert not work.exists()
    events = sorted((out / TENSORBOARD).rglob("events.out.tfevents.*"))
    assert events, f"no event files under {out / TENSORBOARD}"
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert any(tag.endswith("loss") for tag in acc.Tags()["scalars"])
