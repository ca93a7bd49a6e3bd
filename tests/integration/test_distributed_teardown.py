"""How the ranks leave the process group (real gloo processes under torchrun): together after a
normal finish, and without waiting for the group's timeout when rank 0 fails after the others
are done."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed_helpers import ROOT, env

pytestmark = pytest.mark.slow

SCRIPT = """
import sys, time
from aclarena.distributed import world

mode, out = sys.argv[1], sys.argv[2]
with world("cpu") as w:
    if w.is_main:  # rank 0 still has work (writing results) when rank 1 is done
        time.sleep(1.5)
        if mode == "fail":
            raise SystemExit(5)
        open(f"{out}/written", "w").write(repr(time.time()))
open(f"{out}/left{w.rank}", "w").write(repr(time.time()))
"""


def _torchrun(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    script = tmp_path / "leave.py"
    script.write_text(SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), mode,
           str(tmp_path)]
    return subprocess.run(cmd, cwd=ROOT, env=env(OMP_NUM_THREADS="1", ACLARENA_DIST_TIMEOUT_S="300"),
                          capture_output=True, text=True, timeout=240)


def test_a_rank_that_is_done_leaves_after_rank_0_has_written(tmp_path):
    res = _torchrun(tmp_path, "ok")
    assert res.returncode == 0, res.stderr
    written = float((tmp_path / "written").read_text())
    assert float((tmp_path / "left1").read_text()) >= written
    assert float((tmp_path / "left0").read_text()) >= written


def test_rank_0_failing_after_the_others_are_done_ends_the_run_at_once(tmp_path):
    start = time.monotonic()
    res = _torchrun(tmp_path, "fail")
    # rank 1 waits at the exit barrier; it must not wait there for the group's 300 s timeout
    assert res.returncode != 0
    assert time.monotonic() - start < 120, res.stderr
    assert not (tmp_path / "written").exists() and not (tmp_path / "left1").exists()
