"""One write lock per run over the manifest and publishing: two writers at once keep both entries, staging
folders have unique names and only dead writers' are swept, a folder another writer published meanwhile gets no
record of this run, a symlinked checkpoints folder outside the run is refused.

Each test failed on the code before its fix (issue 43, checked against its branch at 3c35d94) unless its
docstring says it guards against refusing something healthy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from reliability_helpers import one_line


def _dead_pid() -> int:
    """The id of a process that has ended (what a killed writer leaves in its temporary names)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


REPAIR = ["repair", "--from", "seq-math", "--to", "seq-search", "--method", "layer-rollback",
          "--select", "displacement", "--count", "1"]


def test_two_repairs_at_once_keep_both_manifest_entries(fixture_run, monkeypatch):
    """Two writers of one manifest at once (threads here; processes take the same flock): before, each read the
    manifest, added its entry and wrote it back, so the later write dropped the earlier entry."""
    import threading
    import time

    import aclarena.store as store_pkg
    import aclarena.store.manifest as manifest_mod
    from aclarena.analysis.repair import repair
    from aclarena.store import load_manifest

    real = manifest_mod.load_manifest

    def slow(run_dir):  # a reader that takes its time, as on a loaded machine
        m = real(run_dir)
        time.sleep(0.4)
        return m

    monkeypatch.setattr(manifest_mod, "load_manifest", slow)
    monkeypatch.setattr(store_pkg, "load_manifest", slow)
    errors: list[BaseException] = []

    def one(name: str) -> None:
        try:
            repair(fixture_run, old="seq-math", new="seq-search", method="layer-rollback", select="displacement",
                   count=1, name=name)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    threads = [threading.Thread(target=one, args=(n,)) for n in ("fix-a", "fix-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    names = set(load_manifest(fixture_run).checkpoints)
    assert {"fix-a", "fix-b"} <= names


def test_staging_folders_of_one_output_are_unique_and_only_dead_writers_are_swept(tmp_path):
    """Two `repair`/`consolidate` runs of one --name shared `.NAME.tmp`: each removed the other's half-written
    folder, and the one that published last could publish the other's weights."""
    from aclarena.consolidate.checkpoint_merge import temporary_folder

    out = tmp_path / "checkpoints" / "fix"
    a, b = temporary_folder(out), temporary_folder(out)
    assert a != b and a.is_dir() and b.is_dir()
    dead = out.parent / f".fix.tmp-{_dead_pid()}-zz"
    dead.mkdir()
    c = temporary_folder(out)
    assert not dead.exists() and a.is_dir() and b.is_dir() and c.is_dir()


def test_repair_killed_after_publishing_can_be_rerun(fixture_run, cli):
    """A repair killed between renaming its folder into place and writing the manifest left a folder that no rerun
    would take ("exists and is not in the manifest"); now the rerun takes its own output back."""
    before = (fixture_run / "aclarena.toml").read_text()
    code, _, err = cli(*REPAIR, "--name", "fix", "--run", str(fixture_run))
    assert code == 0, err
    (fixture_run / "aclarena.toml").write_text(before)  # as if killed before the manifest was written
    code, out, err = cli(*REPAIR, "--name", "fix", "--run", str(fixture_run), "--json")
    assert code == 0, err
    from aclarena.store import load_manifest

    assert load_manifest(fixture_run).resolve("fix").method == "repair-layer-rollback"
    # a folder repair did not write is still refused
    (fixture_run / "checkpoints" / "mine").mkdir()
    (fixture_run / "checkpoints" / "mine" / "notes.txt").write_text("x")
    code, _, err = cli(*REPAIR, "--name", "mine", "--run", str(fixture_run))
    assert code == 1 and "not in the manifest" in one_line(err, "repair")


def test_a_symlinked_checkpoints_folder_outside_the_run_is_refused(fixture_run, tmp_path, cli):
    elsewhere = tmp_path / "elsewhere"
    (fixture_run / "checkpoints").rename(elsewhere)
    (fixture_run / "checkpoints").symlink_to(elsewhere)
    listing = sorted(p.name for p in elsewhere.iterdir())
    code, _, err = cli(*REPAIR, "--name", "fix", "--run", str(fixture_run))
    assert code == 1, err
    assert "outside the run" in one_line(err, "repair")
    assert sorted(p.name for p in elsewhere.iterdir()) == listing
    code, _, err = cli("consolidate", "--method", "merge-uniform", "--sources", "seq-math,seq-search", "--name", "m",
                       "--run", str(fixture_run))
    assert code == 1 and "outside the run" in one_line(err, "consolidate")
    assert sorted(p.name for p in elsewhere.iterdir()) == listing


def test_a_linked_results_h5s_stale_temporary_is_removed(fixture_run, tmp_path):
    """results.h5 a link into another folder: a killed writer's temporary copy lies beside the target, where the
    sweep of the run folder never looked; it is removed now, a live writer's is not."""
    from reliability_helpers import seed_store

    from aclarena.store import ResultsStore

    seed_store(fixture_run)
    other = tmp_path / "store"
    other.mkdir()
    (fixture_run / "results.h5").rename(other / "results.h5")
    (fixture_run / "results.h5").symlink_to(other / "results.h5")
    stale = other / f".results.h5.{_dead_pid()}.deadbeef.tmp"
    stale.write_bytes(b"\0" * 4096)
    live = other / f".results.h5.{os.getpid()}.cafecafe.tmp"
    live.write_bytes(b"\0")
    ResultsStore(fixture_run).write("another/result", {"x": [1, 2]}, result_type="sentinel")
    assert not stale.exists() and live.exists()
    assert (fixture_run / "results.h5").is_symlink()


def test_results_h5_open_in_another_process_is_named_so(fixture_run, cli):
    """Before: "truncated or corrupted ... move it aside to start a new store", for a file that is fine."""
    from reliability_helpers import seed_store

    seed_store(fixture_run)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import h5py, sys, time\nf = h5py.File(sys.argv[1], 'a')\nprint('open', flush=True)\n"
         "time.sleep(60)", str(fixture_run / "results.h5")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        code, _, err = cli("forgetting", "--run", str(fixture_run))
        assert code == 1
        line = one_line(err, "forgetting")
        assert "open for writing in another process" in line and "corrupted" not in line
    finally:
        holder.kill()
        holder.wait()


def test_init_add_never_drops_an_entry_another_verb_wrote_meanwhile(fixture_run, monkeypatch, cli):
    """`init --add` reads the manifest, inspects the new checkpoints, then wrote the manifest back: a `repair` or
    `consolidate` that added its entry in between lost it. Now the write is under the run lock and only if the
    file is still the one read; otherwise one line and nothing written."""
    import aclarena.cli.init as init_mod

    toml = fixture_run / "aclarena.toml"
    real = init_mod._require_present

    def meanwhile(*a, **k):  # another verb adds its entry while init inspects
        if "fix-other" not in toml.read_text():
            toml.write_text(toml.read_text() + '\n[checkpoints.fix-other]\npath = "checkpoints/seq-math"\n'
                            'kind = "consolidated"\nparent = "seq-math"\n')
        return real(*a, **k)

    monkeypatch.setattr(init_mod, "_require_present", meanwhile)
    code, _, err = cli("init", "--run", str(fixture_run), "--add", f"extra={fixture_run / 'checkpoints' / 'base'}")
    assert code == 1, err
    assert "changed by another command" in one_line(err, "init")
    assert "fix-other" in toml.read_text() and "extra" not in toml.read_text()


@pytest.mark.parametrize("verb", ["repair", "consolidate"])
def test_a_folder_another_writer_published_meanwhile_gets_no_record_of_this_run(fixture_run, monkeypatch, cli, verb):
    """Two runs of one --name at once: the one whose folder was replaced after it published must not write its
    manifest entry and record beside the other's weights (checked under the run lock: the folder's marker)."""
    import json

    import aclarena.consolidate.checkpoint_merge as cm
    import aclarena.consolidate.repair as rp
    from aclarena.store import ResultsStore, load_manifest

    real = cm.publish

    def then_another_writer(tmp, out, marker, lock=None):
        real(tmp, out, marker, **({"lock": lock} if lock is not None else {}))
        m = json.loads((out / cm.MARKER).read_text())
        (out / cm.MARKER).write_text(json.dumps(m | {"fingerprint": "0" * 16}))  # another run's output now

    monkeypatch.setattr(cm, "publish", then_another_writer)
    monkeypatch.setattr(rp, "publish", then_another_writer)
    argv = (REPAIR if verb == "repair" else ["consolidate", "--method", "merge-uniform", "--sources",
                                              "seq-math,seq-search"]) + ["--name", "fix", "--run", str(fixture_run)]
    code, _, err = cli(*argv)
    assert code == 1, err
    assert "was replaced by another" in one_line(err, verb)
    assert "fix" not in load_manifest(fixture_run).checkpoints
    assert not ResultsStore(fixture_run).has("consolidate/fix")
