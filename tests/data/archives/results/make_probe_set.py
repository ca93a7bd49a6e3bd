"""Write tests/data/archives/results/probe-set-<version>/: a real probe set and what it reads back as.

Runs the real ``aclarena-diag probe`` verb (and ``tokens``, which the helper runs too) on the tests' token run
(tests/tokens_helpers.py ``make_token_run``: a peaked tiny reference ``seq-math``; six generated tokens per
prompt), then keeps the ``probes`` groups as written (copied with their attributes into a store of their own, so
the archive stays small; the token results are archived by make_tokens.py) and writes expected.json (the payloads
read back, as JSON). Run once per released version of the probe-set result type; the folder is committed and
never rewritten, and tests/unit/test_backcompat.py keeps reading it. Usage (from the repository root):
python tests/data/archives/results/make_probe_set.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from fixtures import make_tokenizer
    from tokens_helpers import make_token_run

    from aclarena.results import probes, read
    from aclarena.store import ResultsStore

    with tempfile.TemporaryDirectory() as tmp:
        run = make_token_run(Path(tmp) / "run", make_tokenizer(), max_new_tokens=6)
        with ResultsStore(run).reader() as r:
            keys = r.results(probes.PROBES)
        assert keys and all(k.startswith(f"{probes.PROBES}/") for k in keys), keys
        out = Path(__file__).parent / f"{probes.RESULT_TYPE}-{probes.RESULT_VERSION}"
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", keys)
        with ResultsStore(out).reader() as r:
            expected = {key: plain(read(r, key, probes.RESULT_TYPE)) for key in keys}
        (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
        print("wrote", out)


if __name__ == "__main__":
    main()
