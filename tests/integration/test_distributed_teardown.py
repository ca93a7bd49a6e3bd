"""How the ranks leave the process group (real gloo processes under torchrun): together after a
normal finish, without waiting for the group's timeout when rank 0 fails after the others are
done, and, when they fail, only after rank 0 has said the one-line error (torchrun stops every
process as soon as one exits with an error)."""

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


# a verb whose rank 0 fails later than rank 1, run through the command line's error handling
FAILING = """
import sys, time
import aclarena.cli.tokens as verb
from aclarena.distributed import world
from aclarena.errors import AclarenaError

def run(args):
    with world("cpu") as w:
        if w.is_main:
            time.sleep(float(sys.argv[1]))
        raise AclarenaError(f"checkpoint {args.ref!r} is not in the manifest")

verb.run = run
from aclarena.cli import main
raise SystemExit(main(["tokens", "--run", sys.argv[2], "--ref", "seq-mth"]))
"""


def _torchrun(tmp_path: Path, *argv: str, script: str = SCRIPT, **extra_env: str) -> subprocess.CompletedProcess:
    path = tmp_path / "leave.py"
    path.write_text(script)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(path), *argv]
    return subprocess.run(cmd, cwd=ROOT, env=env(OMP_NUM_THREADS="1", ACLARENA_DIST_TIMEOUT_S="300", **extra_env),
                          capture_output=True, text=True, timeout=240)


def _said(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("aclarena-diag")]


def test_a_rank_that_is_done_leaves_after_rank_0_has_written(tmp_path):
    res = _torchrun(tmp_path, "ok", str(tmp_path))
    assert res.returncode == 0, res.stderr
    written = float((tmp_path / "written").read_text())
    assert float((tmp_path / "left1").read_text()) >= written
    assert float((tmp_path / "left0").read_text()) >= written


def test_rank_0_failing_after_the_others_are_done_ends_the_run_at_once(tmp_path):
    start = time.monotonic()
    res = _torchrun(tmp_path, "fail", str(tmp_path))
    # rank 1 waits at the exit barrier; it must not wait there for the group's 300 s timeout
    assert res.returncode != 0
    assert time.monotonic() - start < 120, res.stderr
    assert not (tmp_path / "written").exists() and not (tmp_path / "left1").exists()


def test_rank_0_failing_later_than_the_others_still_says_its_error(tmp_path):
    res = _torchrun(tmp_path, "1.5", str(tmp_path), script=FAILING)
    assert res.returncode == 1
    assert _said(res.stderr) == ["aclarena-diag tokens: error: checkpoint 'seq-mth' is not in the manifest"], \
        res.stderr


def test_a_rank_says_its_own_error_when_rank_0_never_does(tmp_path):
    start = time.monotonic()
    res = _torchrun(tmp_path, "600", str(tmp_path), script=FAILING, ACLARENA_ERROR_WAIT_S="3")
    assert res.returncode != 0
    assert _said(res.stderr) == ["aclarena-diag tokens (rank 1): error: checkpoint 'seq-mth' is not in the manifest"], \
        res.stderr
    assert time.monotonic() - start < 120
