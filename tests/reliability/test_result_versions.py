"""Stored results are read by their version: a probe set of a newer major version is refused in one line, and
every stored result type's reader checks it.

Each test failed on the code before its fix (issue 33, checked against main at 2f42103 / a7087bc)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from distributed_helpers import file_hash
from reliability_helpers import VERB_ARGV, fill, one_line

from aclarena.errors import AclarenaError
from aclarena.store import ResultsStore


def _mark_version(run: Path, key: str, version: str) -> None:
    import h5py

    with h5py.File(run / "results.h5", "r+") as f:
        f[key].attrs["result-version"] = version


def test_a_probe_set_of_a_newer_major_version_is_refused(fixture_run, tmp_path, cli):
    """Before: `tokens` scored a probe set whose layout it does not know, silently."""
    from aclarena.results.probes import probe_key

    code, _, err = cli(*fill(VERB_ARGV["probe"], fixture_run, tmp_path))
    assert code == 0, err
    _mark_version(fixture_run, probe_key("seq-math"), "1.0.0")
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    line = one_line(err, "tokens")
    assert "written by a newer aclarena" in line and "1.0.0" in line and "upgrade aclarena" in line, line
    assert file_hash(fixture_run / "results.h5") == before


def test_every_stored_result_is_read_by_its_version(fixture_run):
    """The check sits in the store's reader, so it holds for every result type: reads, attributes, slices,
    lazy rows and child keys of a newer major are refused; a newer minor is read; listing still works."""
    store = ResultsStore(fixture_run)
    store.write("any/result", {"x": np.arange(4), "nested": {"y": np.ones(2)}}, result_type="anything",
                result_version="0.1.0")
    _mark_version(fixture_run, "any/result", "0.9.0")
    assert store.read("any/result/x").tolist() == [0, 1, 2, 3]
    _mark_version(fixture_run, "any/result", "3.0.0")
    with store.reader() as r:
        assert r.results() == ["any/result"] and r.has("any/result/x")
        for read in (lambda: r.read("any/result/x"), lambda: r.attrs("any/result"), lambda: r.read("any/result"),
                     lambda: r.slice("any/result/x", slice(0, 2)), lambda: r.read("any/result/nested/y"),
                     lambda: r.keys("any/result")):
            with pytest.raises(AclarenaError, match=r"any/result was written by a newer aclarena \(anything result "
                                                    r"version 3.0.0, this one reads 0.x\); upgrade aclarena"):
                read()
    with pytest.raises(AclarenaError, match="newer than this aclarena reads"):
        store.write("any/other", {"x": np.arange(2)}, result_type="anything", result_version="1.0.0")
