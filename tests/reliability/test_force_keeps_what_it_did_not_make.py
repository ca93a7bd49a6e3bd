"""`--force` never deletes what the verb did not make, and a failed rerun never replaces a good result:
`import --force` replaces only an earlier import, a killed import's staging folder is removed by the next one,
`eval --force` keeps a good cell over an error cell; no tqdm bar in a piped log.

Each test failed on the code before its fix (issue 43, checked against its branch at 3c35d94)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from reliability_helpers import VERB_ARGV, fill, no_weights, one_line, tree


def _dead_pid() -> int:
    """The id of a process that has ended (what a killed writer leaves in its temporary names)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory, tokenizer):
    pytest.importorskip("gguf")
    from gguf_helpers import write_llama_gguf

    from aclarena.models.tiny import build_model, tiny_config

    model = build_model(tiny_config(tokenizer, arch="llama", num_heads=4, num_kv_heads=2), seed=3)
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_llama_gguf(model, tokenizer, path)
    return path


def test_import_force_never_deletes_a_folder_it_did_not_write(gguf_file, fixture_run, tmp_path, cli):
    """`import --force --out RUN` (a run folder) and `--out FILE`: refused in one line, every file as it was;
    an earlier import (its aclarena-import.json is there) and an empty folder are still replaced."""
    before = tree(fixture_run)
    code, _, err = cli("import", str(gguf_file), "--out", str(fixture_run), "--force")
    assert code == 1, err
    assert "did not write" in one_line(err, "import")
    assert tree(fixture_run) == before
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    code, _, err = cli("import", str(gguf_file), "--out", str(a_file), "--force")
    assert code == 1 and "is a file" in one_line(err, "import") and a_file.read_text() == "mine"
    out = tmp_path / "m"
    out.mkdir()
    assert cli("import", str(gguf_file), "--out", str(out), "--force")[0] == 0  # an empty folder
    (out / "stale.txt").write_text("from the earlier import")
    assert cli("import", str(gguf_file), "--out", str(out), "--force")[0] == 0  # an earlier import
    assert (out / "aclarena-import.json").is_file() and not (out / "stale.txt").exists()
    assert not list(tmp_path.glob(".m.*"))


def test_a_killed_imports_staging_folder_is_removed_by_the_next_import(gguf_file, tmp_path, cli):
    out = tmp_path / "m"
    dead = tmp_path / f".m.import-{_dead_pid()}-abc123"
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"\0" * 1024)
    alive = tmp_path / f".m.import-{os.getpid()}-live"  # a live writer's: left alone
    alive.mkdir()
    code, _, err = cli("import", str(gguf_file), "--out", str(out))
    assert code == 0, err
    assert not dead.exists() and alive.exists()


def test_eval_force_never_replaces_a_good_cell_with_an_error_cell(fixture_run, tmp_path, cli):
    from aclarena.results.capability import read_cells
    from aclarena.store import ResultsStore

    argv = fill(VERB_ARGV["eval"], fixture_run, tmp_path)
    code, _, err = cli(*argv)
    assert code == 0, err

    def cells() -> dict[str, tuple[str, float]]:
        with ResultsStore(fixture_run).reader() as r:
            return {c.key: (c.status, c.mean) for c in read_cells(r)}

    good = cells()
    assert good and all(s == "ok" for s, _ in good.values())
    no_weights(fixture_run)  # the rerun cannot load seq-math
    code, _, err = cli(*argv, "--force")
    assert code == 1
    line = one_line(err, "eval")
    assert "kept" in line and "seq-math" in line
    assert cells() == good


def test_import_draws_no_bar_into_a_piped_log(gguf_file, tmp_path, cli):
    code, _, err = cli("import", str(gguf_file), "--out", str(tmp_path / "m"))
    assert code == 0 and "de-quantizing" not in err and "it/s" not in err, err
