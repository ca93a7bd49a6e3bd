"""The dashboard's per-store memo (issue 46, item 4): a repeat is served from memory, a new result in the
store (results.h5 replaced), a changed manifest or other arguments compute anew; errors are not kept."""

import numpy as np
import pytest

from aclarena.dashboard.data import fingerprint, per_store
from aclarena.store import ResultsStore


def test_a_repeat_is_served_from_memory_until_the_store_changes(tmp_path):
    (tmp_path / "aclarena.toml").write_text('name = "x"\n')
    calls = []

    @per_store(maxsize=4)
    def work(run_dir, view, kinds=None):
        calls.append((view, kinds))
        return {"view": view, "kinds": kinds}

    a = work(tmp_path, "all", kinds=["stage", "oracle"])
    assert work(tmp_path, "all", kinds=["stage", "oracle"]) is a  # lists compared by value
    assert len(calls) == 1
    work(tmp_path, "all", kinds=["stage"])
    assert len(calls) == 2
    before = fingerprint(tmp_path)
    ResultsStore(tmp_path).write("examples/x", {"v": np.arange(3)}, result_type="example")
    assert fingerprint(tmp_path) != before
    assert work(tmp_path, "all", kinds=["stage", "oracle"]) is not a  # a new result: computed anew
    assert len(calls) == 3
    (tmp_path / "aclarena.toml").write_text('name = "renamed"\n')
    work(tmp_path, "all", kinds=["stage", "oracle"])
    assert len(calls) == 4
    for k in range(6):  # the oldest entries leave
        work(tmp_path, f"v{k}")
    work(tmp_path, "all", kinds=["stage", "oracle"])
    assert len(calls) == 11


def test_errors_are_not_kept(tmp_path):
    calls = []

    @per_store()
    def fails(run_dir):
        calls.append(1)
        raise ValueError("damaged")

    for _ in range(2):
        with pytest.raises(ValueError):
            fails(tmp_path)
    assert len(calls) == 2
