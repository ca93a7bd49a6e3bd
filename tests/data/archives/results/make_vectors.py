"""Write tests/data/archives/results/task-vector-{gram,summary,pairs}-<version>/: real task-vector results and what
they read back as.

Runs the real ``aclarena-diag vectors`` verb with two ``--pair`` cosines on the tests' fixture run
(tests/fixtures.py: tiny random models, an oracle and a LoRA adapter), keeps each of the three groups it writes
(``vectors/gram``, ``vectors/summary``, ``vectors/pairs``) in a folder of its own (copied with its attributes into
a store of its own) and writes each folder's expected.json (the payload read back, as JSON). Run once per
released version of these types; the folders are committed and never rewritten, and
tests/unit/test_backcompat.py keeps reading them. Usage (from the repository root):
python tests/data/archives/results/make_vectors.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from fixtures import make_run, make_tokenizer

    from aclarena.cli import main as cli
    from aclarena.results import read, vectors
    from aclarena.store import ResultsStore

    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp) / "run", make_tokenizer())
        code = cli(["vectors", "--run", str(run), "--pair", "seq-search-base:oracle-math-base",
                    "--pair", "lora-ecom - seq-search:seq-search - seq-math"])
        assert code == 0, code
        for key, rtype in ((vectors.GRAM_KEY, vectors.GRAM_TYPE), (vectors.SUMMARY_KEY, vectors.SUMMARY_TYPE),
                           (vectors.PAIRS_KEY, vectors.PAIRS_TYPE)):
            out = Path(__file__).parent / f"{rtype}-{vectors.RESULT_VERSION}"
            out.mkdir(exist_ok=True)
            keep_groups(run / "results.h5", out / "results.h5", key)
            with ResultsStore(out).reader() as r:
                expected = {key: plain(read(r, key, rtype))}
            (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
            print("wrote", out)


if __name__ == "__main__":
    main()
