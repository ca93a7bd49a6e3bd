"""Write tests/data/archives/results/train-log-<version>/: real ``train-log`` results and what they read back as.

Trains examples/tiny.toml (the real ``aclarena-diag train``: the mini base, every stage's SFT and RL phases and the
oracles at toy size, a minute or two on two cores), keeps the ``train`` group as written (copied with its
attributes into a store of its own) and writes expected.json (the payloads read back, as JSON; ``time_s`` as
written then). Run once per released train-log result version; the folder is committed and never rewritten, and
tests/unit/test_backcompat.py keeps reading it. Usage (from the repository root):
python tests/data/archives/results/make_train_log.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import ROOT, keep_groups, plain, setup


def main() -> None:
    setup()
    from aclarena.cli import main as cli
    from aclarena.results import train_log
    from aclarena.store import ResultsStore

    out = Path(__file__).parent / f"{train_log.RESULT_TYPE}-{train_log.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "tiny"
        assert cli(["train", "--config", str(ROOT / "examples" / "tiny.toml"), "--out", str(run)]) == 0
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", train_log.ROOT)
    with ResultsStore(out).reader() as r:
        expected = {p.key: plain(p) for p in train_log.read_train_logs(r).values()}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
