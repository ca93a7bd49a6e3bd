"""trl configs with a report_to backend: aclarena's defaults are accepted by the installed transformers and trl."""

from __future__ import annotations

import pytest

from aclarena.train.phases import make_args


@pytest.mark.parametrize("kind", ["sft", "rl", "distill"])
def test_report_to_tensorboard_builds_every_phase_kind(kind, tmp_path):
    # base_defaults picks tensorboard when it is installed: transformers 5 has no `logging_dir`
    # field any more, and passing it made every phase fail ("unexpected keyword argument")
    args = make_args(kind, tmp_path / "work", 0, {"max_steps": 2}, {"report_to": ["tensorboard"]})
    assert args.report_to == ["tensorboard"] and args.output_dir == str(tmp_path / "work")
