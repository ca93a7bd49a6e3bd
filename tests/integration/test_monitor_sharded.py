"""The drift monitor under FSDP2: every process scores its share with the sharded weights, rank 0 gathers.

Two processes over gloo on CPU (tests/sharded_monitor_worker.py under torch.distributed.run):
the same numbers as one process scoring the same weights, every process in every check, the
reference checkpoint sharded when loaded, and bad input refused on every process before training.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from aclarena.errors import AclarenaError
from aclarena.results.monitor_series import load_monitor
from aclarena.store import SeriesReader

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                           "127.0.0.1", "--master_port", str(port), str(ROOT / "tests" / "sharded_monitor_worker.py"),
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.mark.slow
def test_fsdp2_scores_match_one_process(fsdp_run):
    ranks = [json.loads((fsdp_run / f"rank{r}.json").read_text()) for r in (0, 1)]
    for info in ranks:
        assert info["sharded"] and info["param_types"] == ["DTensor"]  # the weights were sharded while training
        assert info["checks"] == 4  # every process scored every check (steps 0, 2, 4 and the last, 5)
        assert info["sharded_references"] == ["Qwen3ForCausalLM"]  # the reference folder was sharded once loaded
    assert ranks[1]["history"] == []  # only rank 0 computes the metrics and logs
    result = json.loads((fsdp_run / "result.json").read_text())
    sharded, one = result["sharded"], result["one_process"]
    assert [r["step"] for r in sharded] == [r["step"] for r in one] == [0, 2, 4, 5]
    for a, b in zip(sharded, one, strict=True):
        finite = {k for k, v in b.items() if k != "step" and v == v}
        assert set(a) - {"step", "monitor/warnings"} == finite, (set(a), finite)
        for k in finite:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (a["step"], k)
    assert sharded[0]["monitor/math/fkl"] == 0.0 and sharded[-1]["monitor/math/fkl"] > 0.1  # start, then drift
    assert sharded[0]["monitor/math/kl_all"] > 0  # the reference is another checkpoint
    with SeriesReader(fsdp_run / "run") as r:
        stored = load_monitor(r, "fsdp").probes["math"]
    assert stored["step"].tolist() == [0, 2, 4, 5]  # one writer, one row per check
    assert stored["fkl"][-1] == pytest.approx(sharded[-1]["monitor/math/fkl"])


@pytest.mark.slow
def test_fsdp2_probe_of_another_tokenizer_is_refused_on_every_process(fsdp_run):
    for r in (0, 1):
        step, said = (fsdp_run / f"bad-{r}.txt").read_text().split("\n", 1)
        assert step == "0"  # refused before the first step
        assert said.startswith("probe set 'math' was made with another tokenizer") and "\n" not in said
    assert not (fsdp_run / "bad-run" / "series.h5").exists()  # nothing written


def test_zero3_and_fsdp1_are_refused_in_one_line(tokenizer):
    from aclarena.models.tiny import build_model, tiny_config
    from aclarena.train.monitor_sharding import sharding_of

    model = build_model(tiny_config(tokenizer), seed=0)
    zero3 = SimpleNamespace(hf_deepspeed_config=SimpleNamespace(is_zero3=lambda: True))
    with pytest.raises(AclarenaError, match="ZeRO-3") as e:
        sharding_of(model, zero3)
    assert "\n" not in str(e.value)
    assert sharding_of(model, SimpleNamespace(fsdp=True)) is None  # FSDP asked for, weights whole (accelerate on CPU)
    model._fsdp_wrapped_module = model.model  # what FSDP1's wrapper has
    with pytest.raises(AclarenaError, match="FSDP1") as e:
        sharding_of(model, SimpleNamespace(fsdp=True))
    assert "\n" not in str(e.value)
