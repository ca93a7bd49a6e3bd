"""Write tests/data/archives/results/displacement-{stats,summary}-<version>/: real displacement results and what
they read back as.

Runs the real ``aclarena-diag displacement`` verb on the tests' fixture run (tests/fixtures.py: tiny random
models; its updates seq-math (rl), seq-search (sft), oracle-math, lora-ecom (an adapter)), keeps each of the two
groups it writes (``displacement/stats``, ``displacement/summary``) in a folder of its own (copied with its
attributes into a store of its own) and writes each folder's expected.json (the payload read back, as JSON). Run
once per released version of these types; the folders are committed and never rewritten, and
tests/unit/test_backcompat.py keeps reading them. Usage (from the repository root):
python tests/data/archives/results/make_displacement.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from fixtures import make_run, make_tokenizer

    from aclarena.cli import main as cli
    from aclarena.results import displacement, read
    from aclarena.store import ResultsStore

    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp) / "run", make_tokenizer())
        code = cli(["displacement", "--run", str(run)])
        assert code == 0, code
        for key, rtype in ((displacement.STATS_KEY, displacement.STATS_TYPE),
                           (displacement.SUMMARY_KEY, displacement.SUMMARY_TYPE)):
            out = Path(__file__).parent / f"{rtype}-{displacement.RESULT_VERSION}"
            out.mkdir(exist_ok=True)
            keep_groups(run / "results.h5", out / "results.h5", key)
            with ResultsStore(out).reader() as r:
                expected = {key: plain(read(r, key, rtype))}
            (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
            print("wrote", out)


if __name__ == "__main__":
    main()
