"""Write tests/data/archives/v<MAJOR>/results.h5 with every element type of that store version.

Run once per released store format version; the file is committed and never rewritten, and
tests/unit/test_backcompat.py keeps reading it.  Usage: python tests/data/archives/make_archive.py
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from aclarena.store import STORE_VERSION, Json, Ragged, ResultsStore, SeriesWriter, Table  # noqa: E402


def expected() -> dict:
    return {
        "ragged": Ragged.from_rows([np.arange(3, dtype=np.float32), np.arange(0, dtype=np.float32),
                                    np.arange(5, dtype=np.float32) / 2]),
        "array": np.arange(12, dtype=np.int64).reshape(3, 4),
        "strings": ["seq-math", "seq-search"],
        "text": "probe of seq-math",
        "count": 3,
        "ratio": 0.25,
        "settings": Json({"q": 0.06, "nested": {"a": [1, 2]}}),
        "table": Table({"checkpoint": ["a", "b"], "kl": [0.5, 1.5], "flag": [True, False]}),
        "nested": {"inner": np.array([1.0, 2.0])},
    }


if __name__ == "__main__":
    out = Path(__file__).parent / f"v{STORE_VERSION.split('.')[0]}"
    out.mkdir(exist_ok=True)
    for f in ("results.h5", "series.h5"):
        (out / f).unlink(missing_ok=True)
    ResultsStore(out).write("examples/all", expected(), result_type="example", manifest_text='[run]\nname = "archive"\n')
    with SeriesWriter(out, {"monitor/demo": {"step": "i8", "kl": "f8"}}) as w:
        w.append("monitor/demo", [{"step": i, "kl": i / 4} for i in range(4)])
    for f in out.glob("*.lock"):
        f.unlink()
    print("wrote", out)
