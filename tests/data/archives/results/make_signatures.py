"""Write tests/data/archives/results/drift-signature-<version>/: real ``drift-signature`` results and what they
read back as.

Runs the real ``aclarena-diag signatures`` verb on the tests' fixture run (tests/fixtures.py: tiny random
models; its three updates seq-math (rl), seq-search (sft), lora-ecom (consolidation)), keeps the
``signatures`` groups as written (copied with their attributes into a store of their own, so the archive
stays small: the probe sets and token scores they were computed from are left out) and writes expected.json
(the payloads read back, as JSON). Run once per released drift-signature result version; the folder is
committed and never rewritten, and tests/unit/test_backcompat.py keeps reading it. Usage (from the
repository root): python tests/data/archives/results/make_signatures.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from fixtures import make_run, make_tokenizer

    from aclarena.cli import main as cli
    from aclarena.results import signatures
    from aclarena.store import ResultsStore

    out = Path(__file__).parent / f"{signatures.RESULT_TYPE}-{signatures.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp) / "run", make_tokenizer())
        code = cli(["signatures", "--run", str(run), "-n", "10", "--max-new-tokens", "16", "--n-boot", "200"])
        assert code == 0, code
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", signatures.ROOT)
    with ResultsStore(out).reader() as r:
        expected = {s.key: plain(s) for s in signatures.list_signatures(r)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
