"""The probe-set result type read from one module: the view without text holds the same sequences as the whole
payload, a replaced probe set drops its token results, and a probe set missing a part is one line naming its key."""

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from aclarena.errors import AclarenaError, StoreError
from aclarena.results import probes
from aclarena.store import ResultsStore

RESULTS = Path(__file__).resolve().parents[1] / "data" / "archives" / "results"


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RESULTS / f"{probes.RESULT_TYPE}-{probes.RESULT_VERSION}", run)
    return run


def test_the_view_without_text_holds_the_sequences_of_the_whole_payload(tmp_path):
    store = ResultsStore(_copy(tmp_path))
    whole = probes.read_probe_set(store, "seq-math")
    bare = probes.read_probe_set(store, "seq-math", with_text=False)
    assert probes.list_probe_sets(store) == ["seq-math"]
    assert whole.vocab and whole.texts[0] and bare.vocab is None and set(bare.texts) == {""}
    assert bare.digest == whole.digest == store.attrs(probes.probe_key("seq-math"))["digest"]
    for a, b in zip(whole.ids, bare.ids, strict=True):
        np.testing.assert_array_equal(a, b)
    assert [len(t) for t in bare.token_text] == [len(x) for x in whole.ids]
    assert "".join(whole.token_text[0]) == whole.texts[0]
    assert (bare.sources, bare.settings, bare.warnings) == (whole.sources, whole.settings, whole.warnings)


def test_an_unknown_probe_set_names_the_known_ones(tmp_path):
    with pytest.raises(AclarenaError, match="seq-math"):
        probes.read_probe_set(ResultsStore(_copy(tmp_path)), "seq-mat")


def test_replacing_a_probe_set_drops_its_token_results(tmp_path):
    store = ResultsStore(_copy(tmp_path))
    probe = probes.read_probe_set(store, "seq-math")
    store.write("tokens/seq-math/reference", {"x": np.arange(2)}, result_type="t")
    probes.write_probe_set(store, probe, overwrite=True)
    assert not store.has("tokens/seq-math") and store.has(probes.probe_key("seq-math"))
    check = probes.require_probe_digest("seq-math", "0" * 16)
    with store.reader() as r, pytest.raises(AclarenaError, match="replaced"):
        check(r)


@pytest.mark.parametrize("part", ["ids", "warnings", "token_text"])
def test_a_probe_set_missing_a_part_is_one_line(tmp_path, part):
    run = _copy(tmp_path)
    with h5py.File(run / "results.h5", "a") as f:
        del f[f"{probes.probe_key('seq-math')}/{part}"]
    with pytest.raises(StoreError, match="probes/seq-math is damaged"):
        probes.read_probe_set(ResultsStore(run), "seq-math")
