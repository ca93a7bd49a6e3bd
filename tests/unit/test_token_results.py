"""The token result types read from one module: the whole payloads and the column, row and attribute readers
the Tokens page uses agree, and a result whose arrays do not fit together is one line naming its key."""

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from aclarena.errors import StoreError
from aclarena.results import tokens
from aclarena.store import ResultsStore

RESULTS = Path(__file__).resolve().parents[1] / "data" / "archives" / "results"


def _copy(rtype: str, tmp_path: Path) -> Path:
    run = tmp_path / rtype
    shutil.copytree(RESULTS / f"{rtype}-{tokens.RESULT_VERSION}", run)
    return run


def test_the_page_readers_read_what_the_whole_payload_holds(tmp_path):
    run = _copy(tokens.SCORES_TYPE, tmp_path)
    with ResultsStore(run).reader() as r:
        whole = tokens.read_scores(r, "seq-math", "seq-search")
        cols = tokens.scores_columns(r, "seq-math", "seq-search", tokens.SCORE_FIELDS)
        row = tokens.sequence_values(r, "seq-math", "seq-search", ("kl", "topk_ids"), 2)
        meta = tokens.read_scores_meta(r, "seq-math", "seq-search")
    assert whole.key == tokens.scores_key("seq-math", "seq-search") and whole.checkpoint == "seq-search"
    for name in tokens.SCORE_FIELDS:
        np.testing.assert_array_equal(cols[name], getattr(whole, name))
    a, b = int(whole.offsets[2]), int(whole.offsets[3])
    assert b > a and row == {"kl": whole.kl[a:b].tolist(), "topk_ids": whole.topk_ids[a:b].tolist()}
    assert meta == whole.meta and meta.settings["checkpoint"] == "seq-search" and meta.n_nonfinite == 0
    assert whole.topk_ids.shape == (int(whole.offsets[-1]), meta.settings["topk"])


def test_the_reference_rows_are_the_offsets_of_every_column(tmp_path):
    run = _copy(tokens.REFERENCE_TYPE, tmp_path)
    with ResultsStore(run).reader() as r:
        ref = tokens.read_reference(r, "seq-math")
        np.testing.assert_array_equal(tokens.row_offsets(r, "seq-math"), ref.offsets)
        assert tokens.reference_name(r, "seq-math") == ref.reference == "seq-math"
        assert tokens.stored_settings(r, tokens.reference_key("seq-math")) == ref.settings
        with pytest.raises(ValueError, match="no stored token array kl"):
            tokens.reference_columns(r, "seq-math", ("entropy", "kl"))
    assert ref.n_positions == len(ref.entropy) == int(ref.offsets[-1]) and ref.n_invalid == 0


@pytest.mark.parametrize("damage,what", [
    ("rows", "kl does not have the rows of entropy"),
    ("topk", "topk_ids is not 2-d"),
    ("settings", "the settings attribute is not a JSON object"),
])
def test_a_token_result_whose_parts_do_not_fit_is_one_line(tmp_path, damage, what):
    run = _copy(tokens.SCORES_TYPE, tmp_path)
    key = tokens.scores_key("seq-math", "seq-ecom")
    with h5py.File(run / "results.h5", "r+") as f:
        g = f[key]
        if damage == "rows":  # the same positions, cut into other sequences
            offsets = g["kl/offsets"][()]
            offsets[1] += 1
            del g["kl/offsets"]
            g["kl"].create_dataset("offsets", data=offsets)
        elif damage == "topk":
            flat = g["topk_ids/values"][()].reshape(-1)
            n = len(g["entropy/values"])
            del g["topk_ids/values"]
            g["topk_ids"].create_dataset("values", data=flat[:n])
        else:
            g.attrs["settings"] = "[1, 2]"
    with ResultsStore(run).reader() as r, pytest.raises(StoreError) as e:
        tokens.read_scores(r, "seq-math", "seq-ecom")
    line = str(e.value)
    assert "\n" not in line and f"{run / 'results.h5'}:{key} is damaged" in line and what in line
