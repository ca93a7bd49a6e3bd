"""Sharded generation and scoring in one process: the ranks' shares put together equal the whole
(sampling included, since each batch is seeded by its number); and the GPU check's CPU mode."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from distributed_helpers import ROOT, env

from aclarena.envs import sample_tasks
from aclarena.envs.rollout import generate_trajectories
from aclarena.models.loading import load_model, load_tokenizer
from aclarena.store.manifest import load_manifest


def test_sampled_rollouts_sharded_equal_one_process(fixture_run):
    m = load_manifest(fixture_run)
    model, tok = load_model("seq-math", m, fixture_run), load_tokenizer("seq-math", m, fixture_run)
    tasks = sample_tasks("math/id", 5, seed=1, split="eval")
    kw = dict(do_sample=True, temperature=1.0, seed=7, batch_size=2, max_new_tokens=10)
    whole = generate_trajectories(model, tok, tasks, **kw)
    parts = [generate_trajectories(model, tok, tasks, shard=(r, 2), **kw) for r in range(2)]
    for i, tr in enumerate(whole):
        mine = [p[i] for p in parts if p[i] is not None]
        assert len(mine) == 1  # exactly one rank played each task
        assert mine[0].messages == tr.messages and mine[0].reward == tr.reward
    # the batch seeds differ: not every batch samples the same text
    assert len({json.dumps(t.messages[2:]) for t in whole}) > 1


def test_sharded_scoring_equals_whole(fixture_run, tokenizer):
    from tokens_helpers import PROMPTS

    from aclarena.probes.generation import generate_probe_set
    from aclarena.probes.teacher_forcing import BatchPlan, reference_outputs, score

    m = load_manifest(fixture_run)
    ref, ckpt = load_model("seq-math", m, fixture_run), load_model("seq-search", m, fixture_run)
    probe = generate_probe_set(ref, load_tokenizer("seq-math", m, fixture_run), PROMPTS * 2, name="p",
                               reference="seq-math")
    whole = score(ckpt, reference_outputs(ref, probe, batch_size=3), probe)
    n = len(BatchPlan.make(probe, 3).batches)
    assert n >= 3
    merged = {k: np.full_like(getattr(whole, k), 7) for k in ("entropy", "kl", "js", "top1", "status")}
    for rank in range(2):
        mine = list(range(rank, n, 2))
        cache = reference_outputs(ref, probe, batch_size=3, batches=mine)
        part = score(ckpt, cache, probe, batches=mine)
        idx = cache.plan.positions_of(mine)
        for k in merged:
            merged[k][idx] = getattr(part, k)[idx]
    for k, v in merged.items():
        np.testing.assert_array_equal(v.view(np.uint8), getattr(whole, k).view(np.uint8), err_msg=k)


def test_gpu_check_plan_and_cpu_smoke_run(tmp_path):
    script = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")]
    plan = subprocess.run([*script, "--dry-run", "--json"], env=env(), capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    models = json.loads(plan.stdout)["plan"]["models"]
    # Qwen3-0.6B and Qwen3-8B from their configs: 0.6 B and 8.2 B parameters
    assert abs(models["0.6b"]["params_total"] / 1e9 - 0.596) < 0.01
    assert abs(models["8b"]["params_total"] / 1e9 - 8.19) < 0.01
    bad = subprocess.run([*script, "--models", "70b", "--dry-run"], env=env(), capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "unknown model shape '70b'" in bad.stderr
    out = tmp_path / "r.json"
    res = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--tiny", "--save", str(out)],
                         env=env(PYTHON=sys.executable, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(out.read_text())
    (s,) = doc["scoring"]
    assert s["tokens_per_s"] > 0 and s["finite_kl_positions"] == s["scored_positions"] and s["kl_mean"] > 0
    assert doc["task_vectors"]["gram_shape"] and {v["exit"] for v in doc["cli"].values()} == {0}
    assert "scoring tiny:" in res.stdout and "task vectors:" in res.stdout
