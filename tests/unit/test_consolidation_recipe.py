"""Consolidation sizes (SDFT, MMOPD, MLE) follow the run's base: a preset's sizes, a real base's own recipe, or refuse (issue 15)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aclarena.consolidate.options import MLEOptions, MMOPDOptions, SDFTOptions
from aclarena.consolidate.recipe import DEFAULTS, sizes
from aclarena.errors import AclarenaError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

REAL = """
[run]
name = "real"

[base]
model = "some-org/some-8b-base"

[defaults.sft]
max_steps = 300
per_device_train_batch_size = 2
learning_rate = 1e-5

[defaults.rl]
max_steps = 200
per_device_train_batch_size = 8
num_generations = 4
learning_rate = 1e-6

[[stages]]
domain = "math"
phases = ["sft", "rl"]
[stages.sft]
n = 500
[stages.rl]
n = 300

[[stages]]
domain = "search"
phases = ["sft", "rl"]
[stages.sft]
n = 800
[stages.rl]
n = 200
"""


def test_presets_keep_their_sizes(tmp_path):
    shutil.copy(EXAMPLES / "tiny.toml", tmp_path / "curriculum.toml")
    assert sizes("sdft", tmp_path, SDFTOptions()) == DEFAULTS["tiny"]["sdft"]
    assert sizes("mle", tmp_path, MLEOptions(steps=7)).steps == 7


def test_a_real_base_inherits_the_curriculum_recipe_not_the_mini_sizes(tmp_path):
    (tmp_path / "curriculum.toml").write_text(REAL)
    sd = sizes("sdft", tmp_path, SDFTOptions())
    assert (sd.n, sd.steps, sd.batch, sd.lr) == (800, 300, 2, 1e-5)  # [defaults.sft], the largest SFT n
    mle = sizes("mle", tmp_path, MLEOptions())
    assert (mle.n, mle.steps, mle.batch, mle.lr) == (300, 200, 8, 1e-6)  # [defaults.rl], the largest RL n
    assert mle.extra == {}  # nothing of the tiny/mini recipes
    assert mle.lr != DEFAULTS["mini"]["mle"].lr and sd.steps != DEFAULTS["mini"]["sdft"].steps
    assert sizes("mmopd", tmp_path, MMOPDOptions(lr=3e-6, n=10)).lr == 3e-6  # the command line wins


def test_the_paper_config_without_steps_refuses_naming_what_is_missing(tmp_path):
    shutil.copy(EXAMPLES / "paper.toml", tmp_path / "curriculum.toml")
    with pytest.raises(AclarenaError, match=r"sdft on this run needs --n, --steps: .*not a mini or tiny preset") as e:
        sizes("sdft", tmp_path, SDFTOptions())
    assert "\n" not in str(e.value)
    got = sizes("sdft", tmp_path, SDFTOptions(n=64, steps=100))
    assert (got.batch, got.lr) == (2, 1e-5)  # examples/paper.toml's [defaults.sft]


def test_no_curriculum_refuses_without_explicit_sizes(tmp_path):
    with pytest.raises(AclarenaError, match=r"mle on this run needs --n, --steps, --batch, --lr: the run has no "
                                            r"curriculum.toml"):
        sizes("mle", tmp_path, MLEOptions())
    got = sizes("mle", tmp_path, MLEOptions(n=8, steps=3, batch=4, lr=1e-4))
    assert (got.n, got.steps, got.batch, got.lr) == (8, 3, 4, 1e-4)
