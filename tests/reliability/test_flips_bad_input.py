"""`aclarena-diag flips` (issue 17) × every bad input: the damaged runs of the matrix, what issue 17
lists, and every option's bad values. Each: exit 1, exactly one `aclarena-diag flips: error: ...` line
naming the problem, no traceback, results.h5 byte-identical afterwards. docs/reliability.md lists the
cases with the line each printed (recorded into the JUnit report by `record_property`)."""

from __future__ import annotations

import pytest
from distributed_helpers import file_hash
from flips_helpers import write_cells
from reliability_helpers import FLIPS_CASES, fill, seed_store


@pytest.mark.parametrize("case", FLIPS_CASES, ids=[c.label for c in FLIPS_CASES])
def test_flips_bad_input(fixture_run, tmp_path, cli, record_property, case):
    seed_store(fixture_run)
    write_cells(fixture_run)
    if case.setup is not None:
        case.setup(fixture_run)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(case.argv, fixture_run, tmp_path))
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    if lines:
        record_property("error", lines[0].replace(str(fixture_run), "RUN").replace(str(tmp_path), "TMP"))
    assert code == 1, (code, err)
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("aclarena-diag flips: error: "), err
    assert case.needle.lower() in lines[0].lower(), lines[0]
    assert file_hash(fixture_run / "results.h5") == before
