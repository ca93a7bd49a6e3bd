"""Write tests/data/archives/results/routing-<version>/: real ``routing`` results and what they read back as.

Runs the real ``aclarena-diag consolidate --method mle --routers-only`` on the tests' fixture run
(tests/fixtures.py: its chain's domains math and search; the rule, learned and bandit routers trained and
scored on labelled contexts, no expert trained), keeps the ``routing`` groups as written (copied with their
attributes into a store of their own) and writes expected.json (the payloads read back, as JSON). Run once
per released routing result version; the folder is committed and never rewritten, and
tests/unit/test_backcompat.py keeps reading it. Usage (from the repository root):
python tests/data/archives/results/make_routing.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from fixtures import make_run, make_tokenizer

    from aclarena.cli import main as cli
    from aclarena.results import routing
    from aclarena.store import ResultsStore

    out = Path(__file__).parent / f"{routing.RESULT_TYPE}-{routing.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp) / "run", make_tokenizer())
        code = cli(["consolidate", "--run", str(run), "--method", "mle", "--routers-only"])
        assert code == 0, code
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", routing.ROOT)
    with ResultsStore(out).reader() as r:
        expected = {p.key: plain(p) for p in routing.read_reports(r).values()}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
