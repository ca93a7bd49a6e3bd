"""Write tests/data/archives/results/flips-<version>/: a real ``flips`` result and what it reads back as.

Runs the real ``aclarena-diag flips`` verb on the tests' fixture run (tests/fixtures.py: tiny
random models; tests/flips_helpers.py: its capability cells), keeps the run's results.h5 and
writes expected.json (the payload read back, as JSON). Run once per released flips result
version; the folder is committed and never rewritten, and tests/unit/test_backcompat.py keeps
reading it. Usage (from the repository root): python tests/data/archives/results/make_flips.py
"""

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[4]


def plain(x: Any) -> Any:
    """A payload as JSON-able data (dataclasses as dicts, arrays as lists)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def setup() -> None:
    """The tests' import path, offline hub, quiet progress and pinned CPU kernels (as tests/conftest.py)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("ACLARENA_PROGRESS_INTERVAL", "0")
    from aclarena.reproducibility import pin_cpu_kernels

    pin_cpu_kernels()


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
