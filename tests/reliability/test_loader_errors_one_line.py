"""One loader error path: a library's own error (transformers' config validation) and pickle weights that
torch's weights_only loader refuses end in one line, exit 1.

Each test failed on the code before its fix (issue 33, checked against main at 2f42103 / a7087bc)."""

from __future__ import annotations

from pathlib import Path

from distributed_helpers import file_hash
from reliability_helpers import VERB_ARGV, checkpoint_rows, fill, one_line, seed_store, set_config


def test_a_library_error_is_one_line(fixture_run, tmp_path, cli):
    """A config transformers' own validation refuses (layer_types longer than num_hidden_layers): was exit 3
    with StrictDataclassClassValidationError over two lines."""
    seed_store(fixture_run)
    set_config(fixture_run, layer_types=["full_attention"] * 3)
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    line = one_line(err, "tokens")
    assert "'seq-math' cannot be loaded" in line and "layer_types" in line, line


def _unsafe_pickle(run: Path) -> None:
    import torch
    from safetensors.torch import load_file

    f = run / "checkpoints" / "seq-math" / "model.safetensors"
    state = load_file(f)
    state["note"] = Path("x")  # a class: torch's weights_only loader refuses it (and the payload never runs)
    torch.save(state, f.parent / "pytorch_model.bin")
    f.unlink()


def test_pickle_weights_only_refuses_is_not_loadable(fixture_run, tmp_path, cli):
    seed_store(fixture_run)
    _unsafe_pickle(fixture_run)
    row = checkpoint_rows(cli, fixture_run, "--allow-pickle")["seq-math"]
    assert row["loadable"] is False and "weights_only" in row["problem"] and "PosixPath" in row["problem"], row
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path), "--allow-pickle")
    assert code == 1, err
    assert "weights_only" in one_line(err, "tokens")
    assert file_hash(fixture_run / "results.h5") == before
