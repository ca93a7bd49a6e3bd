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

from make_flips import plain, setup


def main() -> None:
    setup()
    import h5py
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
        (out / "results.h5").unlink(missing_ok=True)
        with h5py.File(run / "results.h5", "r") as src, h5py.File(out / "results.h5", "w") as dst:
            dst.attrs.update(src.attrs)
            dst.create_group(probes.PROBES).attrs.update(src[probes.PROBES].attrs)
            for key in keys:
                src.copy(src[key], dst[probes.PROBES], name=key.split("/", 1)[1])
        with ResultsStore(out).reader() as r:
            expected = {key: plain(read(r, key, probes.RESULT_TYPE)) for key in keys}
        (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
        print("wrote", out)


if __name__ == "__main__":
    main()
