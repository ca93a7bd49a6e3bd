"""Files written by each released store format version must keep reading back equal."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from aclarena.store import ResultsStore, SeriesReader

ARCHIVES = Path(__file__).resolve().parents[1] / "data" / "archives"
sys.path.insert(0, str(ARCHIVES))
from fixtures import assert_equal_data  # noqa: E402
from make_archive import expected  # noqa: E402


@pytest.mark.parametrize("version", sorted(p.name for p in ARCHIVES.iterdir() if p.is_dir()))
def test_archive_reads_back(version, tmp_path):
    run = tmp_path / version
    shutil.copytree(ARCHIVES / version, run)
    store = ResultsStore(run)
    assert_equal_data(store.read("examples/all"), expected())
    assert store.attrs("examples/all")["result-type"] == "example"
    with SeriesReader(run) as r:
        np.testing.assert_allclose(r.read("monitor/demo")["kl"], np.arange(4) / 4)
    # an old store accepts new results
    store.write("more", {"x": np.arange(2)}, result_type="t")
    assert_equal_data(store.read("examples/all"), expected())
