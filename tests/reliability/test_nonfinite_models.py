"""Non-finite models (issue 15): a checkpoint with NaN or infinite weights never yields a result that
looks real. The matrix (test_bad_input_matrix.py) covers the reference of `probe`, `tokens` and `eval`;
this covers a later checkpoint of `tokens`, whose reference is healthy."""

from __future__ import annotations

from distributed_helpers import file_hash
from reliability_helpers import VERB_ARGV, _poison, fill, seed_store


def test_tokens_with_a_nan_later_checkpoint_leaves_the_store_unchanged(fixture_run, tmp_path, cli):
    seed_store(fixture_run)
    code, _, err = cli(*fill(VERB_ARGV["probe"], fixture_run, tmp_path))
    assert code == 0, err
    _poison(fixture_run, float("nan"), "seq-search")
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("aclarena-diag tokens: error: checkpoint 'seq-search' has NaN weights"), lines[0]
    # the reference's outputs were computed, but they are written only with a checkpoint's scores
    assert file_hash(fixture_run / "results.h5") == before
