"""The study's validation reads the chain's own monitored stage (issue 42): the ground truth evaluated while the
chain trains leaves the training exactly as it is without it, and the lead-time table read from the chain equals the
one a retrain of the stage computes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from train_helpers import small_config, weights

pytestmark = pytest.mark.slow

MONITOR = '\n[monitor]\nstages = ["ecom"]\nevery_n_steps = 1\n'


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, object]:
    from aclarena.train.config import load_config
    from aclarena.train.curriculum import run_curriculum
    from aclarena.train.lead_time import LeadTimeSettings, ground_truth_riders

    root = tmp_path_factory.mktemp("rides")
    path = root / "cfg.toml"
    text = small_config(("math", "search", "ecom")) + MONITOR
    path.write_text(text, encoding="utf-8")
    cfg = load_config(path)
    settings = LeadTimeSettings(stage="ecom", n=6, eval_every=2, every_n_steps=1)
    rode = root / "rode"
    run_curriculum(cfg, rode, show_progress=False, config_text=text, riders=ground_truth_riders(cfg, [settings]))
    # the same run without the riders: its earlier stages copied (trained alike), the ecom stage trained again
    plain = root / "plain"
    shutil.copytree(rode, plain)
    for name in ("checkpoints/seq-ecom-sft", "checkpoints/seq-ecom", "series.h5"):
        shutil.rmtree(plain / name) if (plain / name).is_dir() else (plain / name).unlink()
    run_curriculum(cfg, plain, show_progress=False, config_text=text)
    return rode, plain, settings


def test_the_ground_truth_leaves_the_chain_as_it_trains_without_it(runs):
    rode, plain, _ = runs
    for phase in ("seq-ecom-sft", "seq-ecom"):  # SFT's data order and GRPO's samples both draw on torch's RNG
        a, b = weights(rode / "checkpoints" / phase), weights(plain / "checkpoints" / phase)
        assert all(torch.equal(a[k], b[k]) for k in a), phase


def test_the_lead_time_read_from_the_chain_equals_a_retrain(runs):
    from aclarena.train.lead_time import measure_lead_time

    rode, plain, settings = runs
    chain = measure_lead_time(rode, settings)
    assert chain["source"] == "chain" and chain["cost"] == {"recorded_while_the_chain_trained": True}
    assert not (rode / "work" / "lead-time").exists()
    again = measure_lead_time(rode, settings, force=True, reuse_chain=False)
    assert again["source"] == "retrain" and again["cost"]["ground_truth_evaluations"] > 0
    assert chain["steps"] == again["steps"] == 3 + 2
    assert chain["table"] == again["table"]
    assert chain["ground_truth"] == again["ground_truth"]
    assert chain["drop_test"] == again["drop_test"]
    for domain, cols in again["series"].items():  # the monitor's checks of the same weights
        for metric, values in cols.items():
            assert chain["series"][domain][metric] == pytest.approx(values, nan_ok=True), (domain, metric)
    # a run trained without the ground truth riding along retrains, as before
    assert measure_lead_time(plain, settings)["source"] == "retrain"
