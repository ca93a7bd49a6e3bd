"""Write tests/data/archives/results/token-{reference,scores,summary}-<version>/: real token results and what
they read back as.

Runs the real ``aclarena-diag probe`` and ``aclarena-diag tokens`` verbs on the tests' token run
(tests/tokens_helpers.py ``make_token_run``: a peaked tiny reference ``seq-math`` and two later stages whose
output heads drifted; six generated tokens per prompt), then keeps, per result type, its groups as written
(copied with their attributes into a store of its own, so each archive stays small) and writes expected.json
(the payloads read back, as JSON). Run once per released version of the token result types; the folders are
committed and never rewritten, and tests/unit/test_backcompat.py keeps reading them. Usage (from the
repository root): python tests/data/archives/results/make_tokens.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from fixtures import make_tokenizer
    from tokens_helpers import make_token_run

    from aclarena.results import read, tokens
    from aclarena.store import ResultsStore

    with tempfile.TemporaryDirectory() as tmp:
        run = make_token_run(Path(tmp) / "run", make_tokenizer(), max_new_tokens=6)
        with ResultsStore(run).reader() as r:
            by_type: dict[str, list[str]] = {}
            for key in r.results(tokens.ROOT):
                by_type.setdefault(r.attrs(key)["result-type"], []).append(key)
        assert sorted(by_type) == sorted((tokens.REFERENCE_TYPE, tokens.SCORES_TYPE, tokens.SUMMARY_TYPE)), by_type
        for rtype, keys in sorted(by_type.items()):
            out = Path(__file__).parent / f"{rtype}-{tokens.RESULT_VERSION}"
            out.mkdir(exist_ok=True)
            keep_groups(run / "results.h5", out / "results.h5", keys)
            with ResultsStore(out).reader() as r:
                expected = {key: plain(read(r, key, rtype)) for key in keys}
            (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
            print("wrote", out)


if __name__ == "__main__":
    main()
