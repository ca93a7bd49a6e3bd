"""The drift monitor's scalars reach a real ``report_to`` backend: TensorBoard event files, read back."""

from __future__ import annotations

import numpy as np
import pytest
from monitor_helpers import make_probe, plain_trainer

from aclarena.results.monitor_series import load_monitor
from aclarena.store import SeriesReader


def test_monitor_series_read_back_from_tensorboard_event_files(tokenizer, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="the dev extra installs tensorboard (pip install -e '.[dev]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from aclarena.diagnostics.monitor_metrics import METRICS
    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
    from aclarena.train.callbacks import DriftMonitorCallback

    model = build_model(tiny_config(tokenizer), seed=0)
    ref = save_checkpoint(model, tokenizer, tmp_path / "ref")
    probe = make_probe(model, tokenizer, folder=ref)
    logs = tmp_path / "tb"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(logs))
    steps, every = 5, 2
    monitor = DriftMonitorCallback([probe], run_dir=tmp_path / "run", label="tb", every_n_steps=every,
                                   references={"math": ref})
    trainer = plain_trainer(model, tokenizer, tmp_path / "out", steps=steps, lr=3e-2, callbacks=[monitor],
                            report_to="tensorboard")
    monitor.bind(trainer)
    trainer.train()

    acc = EventAccumulator(str(logs), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    with SeriesReader(tmp_path / "run") as r:
        stored = load_monitor(r, "tb").probes["math"]
    want_steps = [0, 2, 4, 5]  # the start, every 2 steps, and the last step
    assert stored["step"].tolist() == want_steps
    # the HF TensorBoard callback files every key not starting with eval_/test_ under train/
    for metric in METRICS:
        tag = f"train/monitor/math/{metric}"
        assert tag in tags, f"{tag} missing; TensorBoard has {sorted(tags)}"
        points = acc.Scalars(tag)
        # non-finite values are not logged (kl_share_high has no KL mass to share at the stage start)
        finite = np.isfinite(stored[metric])
        assert [p.step for p in points] == stored["step"][finite].tolist(), (metric, [p.step for p in points])
        # event files hold float32: equal to the stored series at that precision
        assert [p.value for p in points] == pytest.approx(stored[metric][finite].tolist(), rel=1e-6, abs=1e-7), metric
    assert [p.step for p in acc.Scalars("train/monitor/math/fkl")] == want_steps
    fkl = [p.value for p in acc.Scalars("train/monitor/math/fkl")]
    assert fkl[0] == 0.0 and fkl[-1] > 0  # the stage start, then drift (the learning rate forces it)
    assert "train/loss" in tags  # the trainer's own logging still reaches the backend
