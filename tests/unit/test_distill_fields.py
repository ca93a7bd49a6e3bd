"""trl overrides of distillation phases are checked against trl's DistillationConfig like SFT and RL ones."""

from __future__ import annotations

import pytest

from aclarena.errors import ConfigError
from aclarena.train.config import check_trl
from aclarena.train.phases import make_args


def test_distill_fields_are_trls(tmp_path):
    check_trl("distill", {"beta": 0.5, "max_completion_length": 16})
    with pytest.raises(ConfigError, match="unknown trl field 'lmbda'.*DistillationConfig"):
        check_trl("distill", {"lmbda": 1.0})
    with pytest.raises(ConfigError, match="must be a float"):
        check_trl("distill", {"beta": "reverse"})
    args = make_args("distill", tmp_path / "work", 3, {"beta": 0.0, "max_steps": 2}, {"max_completion_length": 8})
    assert type(args).__name__ == "DistillationConfig"
    assert (args.beta, args.max_steps, args.max_completion_length, args.seed) == (0.0, 2, 8, 3)
    assert args.output_dir == str(tmp_path / "work")
