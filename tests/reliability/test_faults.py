"""Fault injection: SIGKILL at random points of `probe` and `eval` then a rerun equals an uninterrupted
run; a full disk in the middle of `tokens`; the dashboard reading while a writer replaces results.h5.

SIGKILL of `tokens`, `vectors` and `train`, and the store-level cases (a killed writer mid-group, a
full disk, garbage/truncated files, SWMR readers) are tested where those features live; see the
table in docs/reliability.md.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed_helpers import ROOT, assert_same_contents, env, file_hash, store_contents

PROMPTS = "".join(json.dumps({"prompt": f"the total of order {i} is"}) + "\n" for i in range(24))


def _spawn(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aclarena", *argv], cwd=ROOT, env=env(OMP_NUM_THREADS="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_at_random(proc: subprocess.Popen, run: Path, rng: random.Random, *, after_first_write: bool) -> None:
    """SIGKILL after a random delay, counted from the first write of results.h5 when asked."""
    deadline = time.monotonic() + 300
    if after_first_write:
        while proc.poll() is None and not (run / "results.h5").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 2.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_sigkill_during_probe_then_rerun_equals_uninterrupted(fixture_run, tmp_path, cli):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(PROMPTS)
    argv = ("probe", "--ref", "seq-math", "--prompts", str(prompts), "--max-new-tokens", "24", "--batch-size", "2")
    whole = tmp_path / "whole"
    shutil.copytree(fixture_run, whole)
    assert cli(*argv, "--run", str(whole))[0] == 0
    want = store_contents(whole)
    rng = random.Random(9)
    for attempt in range(2):
        run = tmp_path / f"killed-{attempt}"
        shutil.copytree(fixture_run, run)
        _kill_at_random(_spawn(*argv, "--run", str(run)), run, rng, after_first_write=False)
        if not (run / "results.h5").exists() or "probes/seq-math/ids/values" not in store_contents(run):
            code, _, err = cli(*argv, "--run", str(run))  # killed before its one atomic write: redo it
            assert code == 0, err
        assert_same_contents({k: v for k, v in store_contents(run).items() if not k.endswith("/settings")},
                             {k: v for k, v in want.items() if not k.endswith("/settings")})
        assert not list(run.glob(".results.h5.*.tmp"))


@pytest.mark.slow
def test_sigkill_during_eval_then_rerun_equals_uninterrupted(fixture_run, tmp_path, cli):
    argv = ("eval", "--checkpoints", "base,seq-math,oracle-math,seq-search", "--suites", "math/id", "-n", "2",
            "--samples", "1", "--batch-size", "1")
    whole = tmp_path / "whole"
    shutil.copytree(fixture_run, whole)
    assert cli(*argv, "--run", str(whole))[0] == 0
    want = store_contents(whole)
    assert len({k.rsplit("/", 1)[0] for k in want}) == 4  # one cell per checkpoint
    rng = random.Random(3)
    partial = 0
    for attempt in range(2):
        run = tmp_path / f"killed-{attempt}"
        shutil.copytree(fixture_run, run)
        _kill_at_random(_spawn(*argv, "--run", str(run)), run, rng, after_first_write=True)
        cells_before = len({k.rsplit("/", 1)[0] for k in store_contents(run)}) if (run / "results.h5").exists() else 0
        partial += 0 < cells_before < 4
        code, out, err = cli(*argv, "--run", str(run), "--json")
        assert code == 0, err
        assert json.loads(out)["skipped"] == cells_before  # finished cells are not recomputed
        assert_same_contents(store_contents(run), want)
    assert partial >= 1, "no kill landed between two cells"


@pytest.mark.slow
def test_full_disk_during_tokens_is_a_clean_error(fixture_run, tmp_path, cli):
    """A file-size limit in the child (what a full disk looks like to the writer) when `tokens` writes."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(PROMPTS.splitlines(keepends=True)[:4]))
    assert cli("probe", "--run", str(fixture_run), "--ref", "seq-math", "--prompts", str(prompts),
               "--max-new-tokens", "8")[0] == 0
    store = fixture_run / "results.h5"
    before = file_hash(store)
    limit = store.stat().st_size + 4096  # the copy of the store fits, the new scores do not
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # else the kernel kills the writer instead of EFBIG
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from aclarena.cli import main\n"
        f"sys.exit(main(['tokens', '--run', {str(fixture_run)!r}, '--ref', 'seq-math']))\n"
    )
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env(OMP_NUM_THREADS="1"), capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and "no space left" in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert file_hash(store) == before  # earlier results intact, byte for byte
    code, _, err = cli("tokens", "--run", str(fixture_run), "--ref", "seq-math")  # room again: it finishes
    assert code == 0, err
    assert not list(fixture_run.glob(".results.h5.*.tmp"))


WRITER = """
import sys, time
import numpy as np
from aclarena.store import ResultsStore, Ragged
store = ResultsStore(sys.argv[1])
for i in range(40):
    store.write(f"live/r{i:03d}", {"x": Ragged.from_rows([np.arange(i + 1)] * 50), "y": np.full(2000, i)},
                result_type="live")
    if i == 0:
        print("ready", flush=True)
"""


def test_dashboard_reads_while_a_writer_appends(fixture_run):
    """Readers (the dashboard's data layer) see complete results only, however the writes interleave."""
    import numpy as np

    from aclarena.dashboard.data import reader

    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(fixture_run)], cwd=ROOT, env=env(),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    seen: list[int] = []
    while proc.poll() is None:
        with reader(fixture_run) as r:
            assert r is not None
            keys = sorted(k for k in r.results() if k.startswith("live/"))
            for k in keys[-2:]:  # the newest results are whole
                i = int(k[-3:])
                np.testing.assert_array_equal(r.read(f"{k}/y"), np.full(2000, i))
                assert len(r.ragged(f"{k}/x").all()) == 50 * (i + 1)
            seen.append(len(keys))
    assert proc.wait() == 0
    assert seen == sorted(seen) and seen[-1] <= 40
    assert len(set(seen)) > 1, "the reader never overlapped the writer"
