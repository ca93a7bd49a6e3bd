"""Write tests/data/archives/results/flips-<version>/: a real ``flips`` result and what it reads back as.

Runs the real ``aclarena-diag flips`` verb on the tests' fixture run (tests/fixtures.py: tiny
random models; tests/flips_helpers.py: its capability cells), keeps the run's results.h5 and
writes expected.json (the payload read back, as JSON). Run once per released flips result
version; the folder is committed and never rewritten, and tests/unit/test_backcompat.py keeps
reading it. Usage (from the repository root): python tests/data/archives/results/make_flips.py
"""

import json
import shutil
import tempfile
from pathlib import Path

from archive_common import plain, setup


def main() -> None:
    setup()
    from fixtures import make_run, make_tokenizer
    from flips_helpers import write_cells

    from aclarena.cli import main as cli
    from aclarena.results import flips
    from aclarena.store import ResultsStore

    out = Path(__file__).parent / f"flips-{flips.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp) / "run", make_tokenizer())
        write_cells(run)
        code = cli(["flips", "--run", str(run), "--from", "seq-math", "--to", "seq-search", "--suite", "math/id",
                    "--budgets", "1,10", "--batch-size", "4"])
        assert code == 0, code
        out.mkdir(exist_ok=True)
        shutil.copyfile(run / "results.h5", out / "results.h5")
    with ResultsStore(out).reader() as r:
        expected = {e["key"]: plain(flips.read_flips_data(r, e["key"])) for e in flips.list_flips(r)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
