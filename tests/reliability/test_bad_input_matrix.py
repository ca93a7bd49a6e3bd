"""Every verb × every bad input of issues 2-6: one line, exit 1, no traceback, results.h5 unchanged.

The cases are listed in tests/reliability_helpers.py (and shown in docs/reliability.md)."""

from __future__ import annotations

import importlib.util

import pytest
from distributed_helpers import file_hash
from reliability_helpers import BAD_ARGS, DAMAGES, VERB_ARGV, fill, seed_store

CASES = [pytest.param(d, verb, id=f"{verb}-{d.apply.__name__}") for d in DAMAGES for verb in d.verbs]


def _one_line_error(code: int, err: str, verb: str, needle: str) -> None:
    assert code == 1, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"aclarena-diag {verb}: error: "), lines[0]
    assert needle.lower() in lines[0].lower(), lines[0]


@pytest.mark.parametrize("damage, verb", CASES)
def test_damaged_run(fixture_run, tmp_path, cli, damage, verb):
    seed_store(fixture_run)
    damage.apply(fixture_run)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(VERB_ARGV[verb], fixture_run, tmp_path))
    _one_line_error(code, err, verb, damage.needle)
    assert file_hash(fixture_run / "results.h5") == before


@pytest.mark.parametrize("verb, label, argv, needle, issue", BAD_ARGS, ids=[f"{c[0]}-{c[1]}" for c in BAD_ARGS])
def test_bad_arguments(fixture_run, tmp_path, cli, verb, label, argv, needle, issue):
    seed_store(fixture_run)
    if verb == "forgetting":  # it needs a capability matrix to reach --chain
        from capability_helpers import write_fixture_matrix

        write_fixture_matrix(fixture_run)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(argv, fixture_run, tmp_path))
    _one_line_error(code, err, verb, needle)
    assert file_hash(fixture_run / "results.h5") == before


@pytest.mark.parametrize("damage", [d for d in DAMAGES if d.apply.__name__ in ("missing_folder", "no_weights",
                                                                               "pickle_only")],
                         ids=lambda d: d.apply.__name__)
def test_eval_records_an_unloadable_checkpoint_as_an_error_cell(fixture_run, tmp_path, cli, damage):
    """eval's documented answer (issue 5): an error cell, exit 1 with one line; earlier results intact."""
    from aclarena.results.capability import read_cells
    from aclarena.store import ResultsStore

    seed_store(fixture_run)
    damage.apply(fixture_run)
    code, _, err = cli(*fill(VERB_ARGV["eval"], fixture_run, tmp_path))
    _one_line_error(code, err, "eval", "seq-math")
    store = ResultsStore(fixture_run)
    assert list(store.read("sentinel/result/x")) == list(range(16))
    with store.reader() as r:
        cells = read_cells(r)
    assert [(c.checkpoint, c.status) for c in cells] == [("seq-math", "error")]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
@pytest.mark.parametrize("verb", ["probe", "eval"])
def test_engine_vllm_without_vllm(fixture_run, tmp_path, cli, verb):
    """The `gpu` extra missing: one line naming the install command, nothing loaded or stored."""
    seed_store(fixture_run)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill([*VERB_ARGV[verb], "--engine", "vllm"], fixture_run, tmp_path))
    _one_line_error(code, err, verb, "needs vLLM")
    assert "pip install" in err and "[gpu]" in err
    assert file_hash(fixture_run / "results.h5") == before
