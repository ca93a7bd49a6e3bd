"""A rejection-sampling SFT phase in a curriculum: the tiny policy samples, the verified samples (or the
documented expert bootstrap) are trained on, the weights move, and the train log says where the data came from."""

import pytest
from train_helpers import BASE, changed, weights

from aclarena.store import ResultsStore
from aclarena.train.config import parse_config
from aclarena.train.curriculum import run_curriculum

RS = BASE.format(rl_steps=1) + """
[[stages]]
domain = "math"
phases = ["sft"]
[stages.sft]
data = "rejection"
n = 4
k = 2
max_per_task = 1
fallback = "expert-if-empty"
"""


@pytest.mark.slow
def test_rs_sft_phase_trains_on_verified_samples_or_its_recorded_bootstrap(tmp_path):
    out = tmp_path / "run"
    run = run_curriculum(parse_config(RS, "rs.toml"), out, show_progress=False)
    row = next(r for r in run.rows() if r["name"] == "seq-math")
    rep = row["data"]
    assert (rep["tasks"], rep["k"], rep["samples"], rep["fallback"]) == (4, 2, 8, "expert-if-empty")
    assert rep["kept"] <= rep["tasks_solved"] <= 4  # at most one verified sample per task
    # the bootstrap applies exactly when the policy solved nothing, and names every task it covered
    assert rep["fallback_tasks"] == (4 if rep["tasks_solved"] == 0 else 0) == len(rep["fallback_task_ids"])
    assert rep["records"] == rep["kept"] + rep["fallback_tasks"] > 0
    assert changed(weights(out / "checkpoints" / "base"), weights(out / "checkpoints" / "seq-math"))
    assert row["steps"] == 3
    with ResultsStore(out).reader() as r:
        stored = r.read("train/seq-math/data")
        attrs = r.attrs("train/seq-math")
    assert stored == rep and attrs["data_fallback_tasks"] == rep["fallback_tasks"]
    again = run_curriculum(parse_config(RS, "rs.toml"), out, show_progress=False)  # finished: no new sampling
    assert next(r for r in again.rows() if r["name"] == "seq-math")["data"] == rep
