"""Write tests/data/archives/results/demo-summary-<version>/: a real ``demo-summary`` result and what it reads
back as.

Runs the real ``aclarena-diag demo`` (the quick curriculum from the shipped mini base) at the toy size of
tests/integration/test_demo_quick.py (``--trl sft.max_steps=2 --trl rl.max_steps=1 -n 4``: every phase trains a
few steps, every analysis runs; a few minutes on two cores), keeps the ``demo/summary`` group as written (copied
with its attributes into a store of its own, so the archive stays small) and writes expected.json (the payload
read back, as JSON). Run once per released demo-summary result version; the folder is committed and never
rewritten, and tests/unit/test_backcompat.py keeps reading it. Usage (from the repository root):
python tests/data/archives/results/make_demo.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from aclarena.cli import main as cli
    from aclarena.results import demo
    from aclarena.store import ResultsStore

    out = Path(__file__).parent / f"{demo.RESULT_TYPE}-{demo.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "demo"
        code = cli(["demo", "--out", str(run), "--trl", "sft.max_steps=2", "--trl", "rl.max_steps=1", "-n", "4"])
        assert code == 0, code
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", demo.STORE_KEY)
    with ResultsStore(out).reader() as r:
        expected = {demo.STORE_KEY: plain(demo.read_demo_summary(r))}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
