"""Same seed, same code, same kind of machine: the same checkpoints, bit for bit, and the same scores.

The tiny curriculum is trained twice by ``aclarena-diag train``: once as this machine's torch
would run it by default, once as on a host of the same kind whose CPU has no AVX-512
(``ATEN_CPU_CAPABILITY=avx2``, which is how torch runs there). Before aclarena pinned its
kernels (aclarena.reproducibility) the two gave different weights from the first step of the
base on; now every checkpoint is identical and so are the eval scores (greedy and sampled).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from train_helpers import REPO, TINY, cli_env, train_cmd, weights

from aclarena.reproducibility import PORTABLE_ENV

pytestmark = pytest.mark.slow


def _native_env() -> dict[str, str]:
    env = cli_env()
    for k in (*PORTABLE_ENV, "ACLARENA_CPU_KERNELS"):
        env.pop(k, None)
    return env


def _native_capability() -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], env=_native_env(), capture_output=True, text=True,
                          check=True).stdout.strip()


def _eval(run, env) -> list[tuple]:
    cmd = [sys.executable, "-m", "aclarena", "eval", "--run", str(run), "--checkpoints", "seq-math,seq-search,seq-if",
           "--suites", "math/id,search/id,if/id", "-n", "3", "--samples", "2", "--json"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = json.loads(proc.stdout)["cells"]
    return sorted((c["checkpoint"], c["suite"], c["status"], c["mean"], c.get("avg_k_mean")) for c in cells)


@pytest.mark.timeout(3600)  # two tiny curricula and their evaluation: minutes on a loaded 2-core machine
def test_same_seed_gives_identical_checkpoints_and_scores_across_cpu_generations(tmp_path):
    native = _native_capability()
    if native == "AVX2":
        pytest.skip("this CPU runs torch's AVX2 kernels already: no other kernel set to compare against")
    a, b = tmp_path / "a", tmp_path / "b"
    env_a = _native_env()
    env_b = {**_native_env(), "ATEN_CPU_CAPABILITY": "avx2"}  # a host of the same kind without AVX-512
    for out, env in ((a, env_a), (b, env_b)):
        proc = subprocess.run(train_cmd(TINY, out), cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-2000:]
    names = sorted(p.name for p in (a / "checkpoints").iterdir())
    assert names == sorted(p.name for p in (b / "checkpoints").iterdir()) and "seq-if" in names
    import torch

    for name in names:
        wa, wb = weights(a / "checkpoints" / name), weights(b / "checkpoints" / name)
        assert set(wa) == set(wb)
        differ = [k for k in wa if not torch.equal(wa[k], wb[k])]
        assert not differ, f"{name}: {len(differ)} tensors differ, e.g. {differ[:3]}"
        marker = json.loads((a / "checkpoints" / name / ".aclarena-phase.json").read_text())
        assert marker["environment"]["cpu_capability"] == "AVX2"  # pinned by aclarena-diag
        assert (a / "checkpoints" / name / "tokenizer.json").read_bytes() == \
            (b / "checkpoints" / name / "tokenizer.json").read_bytes()
    assert _eval(a, env_a) == _eval(b, env_b)


def test_opting_out_keeps_the_native_kernels():
    """``ACLARENA_CPU_KERNELS=native`` leaves torch's own choice (and pinning never overrides the user's)."""
    from aclarena.reproducibility import pin_cpu_kernels

    env = {"ACLARENA_CPU_KERNELS": "native"}
    assert pin_cpu_kernels(env) == {} and env == {"ACLARENA_CPU_KERNELS": "native"}
    env = {"ATEN_CPU_CAPABILITY": "avx512"}
    set_ = pin_cpu_kernels(env)
    import platform

    if platform.machine().lower() in ("x86_64", "amd64"):
        assert env["ATEN_CPU_CAPABILITY"] == "avx512" and set_ == {"MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
