"""Write tests/data/archives/results/consolidation-<version>/: real ``consolidation`` records of each kind and what
they read back as.

Trains examples/tiny.toml (``aclarena-diag train``: every stage and oracle at toy size, a few minutes on two
cores), then runs the real ``aclarena-diag consolidate --method sdft`` (a checkpoint record with the trainer's
log and a summary), ``--method mle`` (four expert records and the MLE routes record ``consolidate/mle``),
``--method merge-uniform`` (a record without a log) and ``aclarena-diag repair --method svd-restore`` (a repair
record); keeps the ``consolidate`` group as written (copied with its attributes into a store of its own) and
writes expected.json (the payloads read back, as JSON). Run once per released consolidation result version; the
folder is committed and never rewritten, and tests/unit/test_backcompat.py keeps reading it. Usage (from the
repository root): python tests/data/archives/results/make_consolidation.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import ROOT, keep_groups, plain, setup


def main() -> None:
    setup()
    from aclarena.cli import main as cli
    from aclarena.results import consolidation
    from aclarena.store import ResultsStore

    out = Path(__file__).parent / f"{consolidation.RESULT_TYPE}-{consolidation.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "tiny"
        assert cli(["train", "--config", str(ROOT / "examples" / "tiny.toml"), "--out", str(run)]) == 0
        for argv in (["consolidate", "--method", "sdft"], ["consolidate", "--method", "mle"],
                     ["consolidate", "--method", "merge-uniform"],
                     ["repair", "--from", "seq-math", "--to", "seq-search", "--method", "svd-restore",
                      "--rank-percent", "10", "--name", "fix"]):
            code = cli([argv[0], "--run", str(run), *argv[1:]])
            assert code == 0, (argv, code)
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", consolidation.ROOT)
    with ResultsStore(out).reader() as r:
        expected = {f"{consolidation.ROOT}/{p.name}": plain(p) for p in consolidation.list_consolidations(r)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
