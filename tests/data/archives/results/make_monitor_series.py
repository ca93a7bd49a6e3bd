"""Write tests/data/archives/results/monitor-series-<version>/: a real ``series.h5`` of the drift monitor and what
it reads back as.

Trains the tests' small curriculum of two stages with a ``[monitor]`` section (tests/train_helpers.py
``small_config(("math", "search"))``, the search stage's SFT phase forced to drift as in
tests/integration/test_monitor_curriculum.py, so that warnings fire; the real ``aclarena-diag train``), then runs
the real ``aclarena-diag monitor --lead-time --stage search -n 8 --eval-every 2 --every 1`` on it (the search stage
retrained with the monitor and the ground truth of math); keeps the run's ``series.h5`` as written (every label:
``seq-search-sft``, ``seq-search`` and their lead-time retrains, with ``bench``) and writes expected.json (each
label's payload read back, as JSON). The folder's version is what the file's ``monitor/<label>`` groups record
(none: the first version). Run once per released monitor-series version; the folder is committed and never
rewritten, and tests/unit/test_backcompat.py keeps reading it.

``--code DIR``: the aclarena that trains and writes series.h5 (a checkout of an older commit, whose file the
current code must keep reading); expected.json is always read by this tree's code. Usage (from the repository
root): python tests/data/archives/results/make_monitor_series.py [--code DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from archive_common import ROOT, plain, setup

# the search stage's SFT phase, forced to drift from the first step (tests/integration/test_monitor_curriculum.py)
SEARCH_SFT = "[stages.sft.trl]\nmax_steps = 12\nlearning_rate = 0.05\nwarmup_steps = 0\n"
MONITOR = "[monitor]\nevery_n_steps = 2\nprobe_n = 4\nprobe_max_new_tokens = 16\n"


def config() -> str:
    from train_helpers import small_config

    text = small_config(("math", "search"))
    head, tail = text.split('[[stages]]\ndomain = "search"')
    tail = tail.replace("[stages.sft]\nn = 8\n", "[stages.sft]\nn = 8\n" + SEARCH_SFT, 1)
    return head + '[[stages]]\ndomain = "search"' + tail + "\n" + MONITOR


def aclarena(code: Path, *args: str) -> None:
    """``aclarena-diag args`` run by the aclarena of ``code`` (its own process: another checkout's package)."""
    env = dict(os.environ, PYTHONPATH=str(code), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", ACLARENA_PROGRESS_INTERVAL="0")
    proc = subprocess.run([sys.executable, "-m", "aclarena", *args], cwd=code, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the aclarena checkout that writes series.h5")
    code = parser.parse_args().code.resolve()
    setup()
    from aclarena.results import monitor_series as ms
    from aclarena.store import SERIES_NAME, SeriesReader

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "cfg.toml"
        cfg.write_text(config(), encoding="utf-8")
        run = Path(tmp) / "run"
        aclarena(code, "train", "--config", str(cfg), "--out", str(run))
        aclarena(code, "monitor", "--run", str(run), "--lead-time", "--stage", "search", "-n", "8", "--eval-every",
                 "2", "--every", "1")
        with SeriesReader(run) as r:
            versions = {str(r.attrs(ms.monitor_key(label)).get("result-version", ms.FIRST_VERSION))
                        for label in ms.monitor_labels(r)}
        assert len(versions) == 1, versions
        out = Path(__file__).parent / f"{ms.RESULT_TYPE}-{versions.pop()}"
        out.mkdir(exist_ok=True)
        shutil.copyfile(run / SERIES_NAME, out / SERIES_NAME)
    with SeriesReader(out) as r:
        expected = {label: plain(ms.load_monitor(r, label)) for label in ms.monitor_labels(r)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out, "with series.h5 written by", code)


if __name__ == "__main__":
    main()
