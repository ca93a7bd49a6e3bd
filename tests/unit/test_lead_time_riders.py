"""The ground truth that rides the chain's own monitored stage (`ground_truth_riders`, issue 42): added to a phase
only when the chain's monitor scores what the lead-time measurement needs, with its settings stored beside it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from train_helpers import small_config

from aclarena.results.monitor_series import BENCH_SETTINGS_ATTR, MonitorStore, bench_name
from aclarena.train.lead_time import GroundTruthCallback, LeadTimeSettings, ground_truth_riders, lead_plan
from aclarena.train.plan import plan

SETTINGS = LeadTimeSettings(stage="ecom", n=6, eval_every=2, every_n_steps=1)


@pytest.fixture()
def cfg(tmp_path):
    from aclarena.train.config import load_config

    path = tmp_path / "cfg.toml"
    path.write_text(small_config(("math", "search", "ecom")) + '\n[monitor]\nstages = ["ecom"]\nevery_n_steps = 1\n',
                    encoding="utf-8")
    return load_config(path)


def monitor(tmp_path, rules, *, every=1, probes=("monitor-math", "monitor-search", "razor-ecom")):
    return SimpleNamespace(store=MonitorStore(tmp_path), every_n_steps=every, rules=dict(rules),
                           probes=[SimpleNamespace(name=p) for p in probes])


def test_the_ground_truth_rides_each_phase_of_the_stage_with_its_settings(cfg, tmp_path):
    riders = ground_truth_riders(cfg, [SETTINGS])
    jobs = {j.name: j for j in plan(cfg, 1)}
    p = lead_plan(cfg, SETTINGS)
    assert p.names == ["seq-ecom-sft", "seq-ecom"] and p.rides
    for name in p.names:
        mon = monitor(tmp_path, p.rules)
        [gt] = riders(jobs[name], mon)
        assert isinstance(gt, GroundTruthCallback) and gt.store is mon.store and gt.series == bench_name(name)
        assert (gt.suites, gt.n, gt.seed, gt.every_n_steps) == (["math/id", "search/id"], 6, 0, 2)
        stored = json.loads(mon.store.attrs[bench_name(name)][BENCH_SETTINGS_ATTR])
        assert stored == {"suites": ["math/id", "search/id"], "n": 6, "seed": 0, "every": 2} == p.ground_truth()
    assert riders(jobs["seq-search-sft"], monitor(tmp_path, p.rules)) == []  # not the measured stage


@pytest.mark.parametrize("change", ["every", "rules", "probes"])
def test_nothing_rides_a_monitor_that_does_not_score_what_the_measurement_needs(cfg, tmp_path, change):
    p = lead_plan(cfg, SETTINGS)
    job = next(j for j in plan(cfg, 1) if j.name == "seq-ecom-sft")
    kwargs = {"every": {"every": 5}, "rules": {}, "probes": {"probes": ("monitor-math", "monitor-search")}}[change]
    mon = monitor(tmp_path, {} if change == "rules" else p.rules, **kwargs)
    assert ground_truth_riders(cfg, [SETTINGS])(job, mon) == []


def test_a_dense_schedule_or_a_single_phase_always_retrains(cfg, tmp_path):
    job = next(j for j in plan(cfg, 1) if j.name == "seq-ecom-sft")
    for s in (LeadTimeSettings(stage="ecom", n=20, eval_every=2, every_n_steps=1, dense=2),
              LeadTimeSettings(stage="ecom", n=6, eval_every=2, every_n_steps=1, phases=("sft",))):
        assert not lead_plan(cfg, s).rides
        assert ground_truth_riders(cfg, [s])(job, monitor(tmp_path, lead_plan(cfg, s).rules)) == []
