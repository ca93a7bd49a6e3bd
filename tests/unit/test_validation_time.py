"""benchmarks/validation_time.py: the phase times it reads from a study's log."""

from __future__ import annotations

import pytest
from train_helpers import load_benchmark


def test_durations_as_the_progress_lines_print_them():
    bench = load_benchmark("validation_time")
    assert [bench.seconds(t) for t in ("54s", "5m30s", "1h2m3s", "0.5s")] == [54.0, 330.0, 3723.0, 0.5]
    with pytest.raises(ValueError):
        bench.seconds("soon")


def test_a_stage_is_its_sft_and_rl_phases_of_the_chain(tmp_path):
    bench = load_benchmark("validation_time")
    log = tmp_path / "new-0.log"
    log.write_text(
        "[aclarena 13:23:39] end: seq-ecom-sft (sft)  loss 0.161  entropy 0.359: 100/100 steps in 5m30s (0.303 steps/s)\n"
        "[aclarena 13:24:34] end: seq-ecom (rl)  loss 0  reward 0  entropy 0.696: 5/5 steps in 54s (0.0932 steps/s)\n"
        "[aclarena 13:38:40] end: oracle-ecom (rl)  loss 0  reward 0  entropy 0.484: 5/5 steps in 1m00s (0.0826 steps/s)\n"
        "[aclarena 13:27:24] end: seq-if-sft (sft)  loss 0.425  entropy 0.503: 300/300 steps in 2m49s (1.77 steps/s)\n",
        encoding="utf-8")
    assert bench.stage_seconds(log, "ecom") == 384.0  # the oracle's phase is not the chain's
    assert bench.stage_seconds(log, "if") == 169.0
    with pytest.raises(SystemExit, match="no phase of seq-math"):
        bench.stage_seconds(log, "math")
