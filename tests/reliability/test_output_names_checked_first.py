"""A name is checked before anything is written: `consolidate --name` of every method and the names
derived from it (merge-ta's NAME-l0.5), and the one check of an output folder.

Each test failed on the code before its fix (issue 33, checked against main at 2f42103 / a7087bc)."""

from __future__ import annotations

import pytest
from reliability_helpers import one_line, seed_store, tree

from aclarena.errors import AclarenaError

SOURCES = ["--sources", "seq-math,seq-search"]
BAD_NAMES = [
    ("merge-uniform ../../escape", ["--method", "merge-uniform", *SOURCES, "--name", "../../escape"], "../../escape"),
    ("merge-uniform absolute --name", ["--method", "merge-uniform", *SOURCES, "--name", "{outside}/abs"], "abs"),
    ("merge-ta ../escape (derives ../escape-l0.5)",
     ["--method", "merge-ta", "--lambdas", "0.5", *SOURCES, "--name", "../escape"], "../escape"),
    ("merge-ties .hidden", ["--method", "merge-ties", *SOURCES, "--name", ".hidden"], ".hidden"),
    ("merge-dare a/b", ["--method", "merge-dare", *SOURCES, "--name", "a/b"], "a/b"),
    ("merge-uniform over a stage checkpoint", ["--method", "merge-uniform", *SOURCES, "--name", "seq-math"],
     "already a stage checkpoint"),
    ("merge-ta derived name over a stage checkpoint's folder",
     ["--method", "merge-ta", "--lambdas", "1", *SOURCES, "--name", "seq"], "is the folder of checkpoint 'seq-math'"),
    ("mmopd ../escape", ["--method", "mmopd", "--name", "../escape"], "../escape"),
    ("sdft ../escape", ["--method", "sdft", "--name", "../escape"], "../escape"),
    ("mle /abs", ["--method", "mle", "--name", "/abs"], "/abs"),
]


@pytest.mark.parametrize("label, argv, needle", BAD_NAMES, ids=[b[0] for b in BAD_NAMES])
def test_consolidate_checks_every_name_before_writing(fixture_run, tmp_path, cli, label, argv, needle):
    run = fixture_run
    if "folder of checkpoint" in needle:  # a checkpoint whose folder is where merge-ta would write NAME-l1
        (run / "checkpoints" / "seq-math").rename(run / "checkpoints" / "seq-l1")
        text = (run / "aclarena.toml").read_text().replace('path = "checkpoints/seq-math"', 'path = "checkpoints/seq-l1"')
        (run / "aclarena.toml").write_text(text)
    seed_store(run)
    outside = tmp_path / "outside"
    outside.mkdir()
    before, around = tree(run), sorted(p.name for p in tmp_path.iterdir())
    code, _, err = cli("consolidate", *[a.format(outside=outside) for a in argv], "--run", str(run))
    assert code == 1, err
    assert needle in one_line(err, "consolidate")
    assert tree(run) == before  # nothing written in the run: no folder, manifest and results.h5 as they were
    assert sorted(p.name for p in tmp_path.iterdir()) == around and not any(outside.iterdir())
    assert not (tmp_path.parent / "escape").exists() and not (tmp_path / "escape").exists()


def test_output_folder_is_the_one_check(tmp_path):
    """The library check (i35's `repair --name` is wired to it too): valid names and derived names pass,
    anything that would land outside RUN/checkpoints, or through a link, is refused."""
    from aclarena.store.manifest import output_folder

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    assert output_folder(run, "merge-ta-l0.5") == run.absolute() / "checkpoints" / "merge-ta-l0.5"
    for bad in ("..", "../x", "/etc", "a/b", ".x", "", "x\n", "~x", None):
        with pytest.raises(AclarenaError, match="not allowed"):
            output_folder(run, bad)
    (run / "checkpoints" / "link").symlink_to(tmp_path)
    with pytest.raises(AclarenaError, match="symbolic link"):
        output_folder(run, "link")
