"""Write tests/data/archives/results/capability-cell-<version>/: real capability cells and what they read back as.

Runs the real ``aclarena-diag eval`` on the tests' fixture run (tests/fixtures.py: tiny random models) over
``base`` and ``seq-math`` on ``math/id`` and ``general`` (two items, two seeds, two sampled rollouts each: ok
cells with every per-item array), over ``broken`` (a copy of ``seq-math`` with truncated weights: an error
cell), then ``eval --import-lm-eval`` of tests/data/lm_eval/seq-math (imported cells, with and without
per-item scores); keeps the ``capability`` group as written (copied with its attributes into a store of its
own) and writes expected.json (the payloads read back, as JSON). Run once per released capability-cell
version; the folder is committed and never rewritten, and tests/unit/test_backcompat.py keeps reading it.
Usage (from the repository root): python tests/data/archives/results/make_capability.py
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

from archive_common import ROOT, keep_groups, plain, setup


def main() -> None:
    setup()
    from fixtures import make_run, make_tokenizer

    from aclarena.cli import main as cli
    from aclarena.results import capability
    from aclarena.store import CheckpointSpec, ResultsStore, load_manifest, write_manifest

    out = Path(__file__).parent / f"{capability.RESULT_TYPE}-{capability.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp) / "run", make_tokenizer())
        broken = run / "checkpoints" / "broken"
        shutil.copytree(run / "checkpoints" / "seq-math", broken)
        (broken / "model.safetensors").write_bytes((broken / "model.safetensors").read_bytes()[:1000])
        m = load_manifest(run)
        m.add(CheckpointSpec("broken", "checkpoints/broken", kind="stage", domain="search", parent="seq-math"))
        write_manifest(m, run)
        code = cli(["eval", "--run", str(run), "--checkpoints", "base,seq-math,broken", "--suites", "math/id,general",
                    "-n", "2", "--seeds", "0,1", "--samples", "2"])
        assert code == 1, code  # the broken checkpoint's cells are error cells
        # relative to the repository root: the cells record their source file, with no path of this machine
        lm_eval = sorted((ROOT / "tests" / "data" / "lm_eval" / "seq-math").glob("results_*.json"))[0].relative_to(ROOT)
        os.chdir(ROOT)
        code = cli(["eval", "--run", str(run), "--import-lm-eval", f"seq-math={lm_eval}", "--lm-eval-task",
                    "gsm8k=math/id"])
        assert code == 0, code
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", capability.ROOT)
    with ResultsStore(out).reader() as r:
        expected = {c.key: plain(capability.read_cell(r, c.key)) for c in capability.read_cells(r)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
