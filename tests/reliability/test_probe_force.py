"""`probe --force` and `tokens` at the same time (issue 15): replacing a probe set drops its token
scores in the same atomic write (a kill between two steps left new sequences beside old scores), and
`tokens` re-checks the probe set's digest under the writer lock before it writes scores."""

from __future__ import annotations

import numpy as np
import pytest
from distributed_helpers import file_hash
from reliability_helpers import VERB_ARGV, fill

from aclarena.results.probes import probe_key, read_probe_set, write_probe_set
from aclarena.results.tokens import tokens_key
from aclarena.store import ResultsStore


def _probe_and_score(run, tmp_path, cli):
    code, _, err = cli(*fill(VERB_ARGV["probe"], run, tmp_path))
    assert code == 0, err
    code, _, err = cli(*fill(VERB_ARGV["tokens"], run, tmp_path))
    assert code == 0, err
    assert ResultsStore(run).has(tokens_key("seq-math"))


def test_a_kill_after_probe_force_writes_leaves_no_old_scores(fixture_run, tmp_path, cli, monkeypatch):
    _probe_and_score(fixture_run, tmp_path, cli)
    old = read_probe_set(ResultsStore(fixture_run), "seq-math").digest

    def killed(self, key):  # a kill right after the probe set is written, before a second step
        raise SystemExit(137)

    monkeypatch.setattr(ResultsStore, "delete", killed)
    code, _, err = cli(*fill([*VERB_ARGV["probe"], "--force", "--max-new-tokens", "6"], fixture_run, tmp_path))
    assert code == 0, err
    store = ResultsStore(fixture_run)
    assert read_probe_set(store, "seq-math").digest != old  # the new probe set is in
    assert not store.has(tokens_key("seq-math"))  # and the old scores are gone with the same write


def test_tokens_refuses_to_write_scores_for_a_probe_set_replaced_meanwhile(fixture_run, tmp_path, cli, monkeypatch):
    code, _, err = cli(*fill(VERB_ARGV["probe"], fixture_run, tmp_path))
    assert code == 0, err
    store = ResultsStore(fixture_run)
    import aclarena.models.loading as loading

    real_load = loading.load_model

    def load_and_replace(spec, *a, **k):  # `probe --force` lands while tokens loads a checkpoint
        if getattr(spec, "name", spec) == "seq-search":
            probe = read_probe_set(store, "seq-math")
            probe.ids[0] = np.where(probe.scored[0], (probe.ids[0] + 1) % 50, probe.ids[0])
            write_probe_set(store, probe, overwrite=True)
        return real_load(spec, *a, **k)

    monkeypatch.setattr(loading, "load_model", load_and_replace)
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and "was replaced while these scores were computed" in lines[0], err
    assert not store.has(tokens_key("seq-math"))  # no scores of the old sequences beside the new ones
    assert store.has(probe_key("seq-math"))


@pytest.mark.parametrize("drop_missing", [True, False])
def test_write_many_drop_is_one_step(tmp_path, drop_missing):
    store = ResultsStore(tmp_path)
    store.write("a/b", {"x": np.arange(3)}, result_type="t")
    before = file_hash(tmp_path / "results.h5")
    store.write_many([("c", {"y": np.arange(2)}, "t", "0.1.0", {})], drop=["zz" if drop_missing else "a/b"])
    assert store.has("c") and store.has("a/b") == drop_missing
    assert file_hash(tmp_path / "results.h5") != before
