"""Write tests/data/archives/results/monitor-lead-time-<version>/: a real ``monitor-lead-time`` result and what it
reads back as.

Trains the tests' small curriculum of three stages (tests/train_helpers.py ``small_config(("math", "search",
"ecom"))``, the real ``aclarena-diag train``), then runs the real ``aclarena-diag monitor --lead-time --stage ecom
-n 6 --eval-every 2 --every 1`` on it (the ecom stage retrained with the monitor and the ground truth of math and
search); keeps the ``monitor/lead-time`` group as written (copied with its attributes into a store of its own) and
writes expected.json (the payload read back, as JSON). Run once per released monitor-lead-time result version; the
folder is committed and never rewritten, and tests/unit/test_backcompat.py keeps reading it. Usage (from the
repository root): python tests/data/archives/results/make_lead_time.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from train_helpers import small_config

    from aclarena.cli import main as cli
    from aclarena.results import lead_time
    from aclarena.store import ResultsStore

    out = Path(__file__).parent / f"{lead_time.RESULT_TYPE}-{lead_time.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "cfg.toml"
        cfg.write_text(small_config(("math", "search", "ecom")), encoding="utf-8")
        run = Path(tmp) / "run"
        assert cli(["train", "--config", str(cfg), "--out", str(run)]) == 0
        code = cli(["monitor", "--run", str(run), "--lead-time", "--stage", "ecom", "-n", "6", "--eval-every", "2",
                    "--every", "1"])
        assert code == 0, code
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", lead_time.ROOT)
    with ResultsStore(out).reader() as r:
        expected = {key: plain(lead_time.read_lead_time(r, key)) for key in
                    (f"{lead_time.ROOT}/{name}" for name in r.keys(lead_time.ROOT))}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
