"""Issue 43, trust third round, one class per section: `--force` never deletes what the verb did not make and
never replaces a good result with a failure; one write lock per run over the manifest and publishing, with
staging folders of unique names; bounded readers of user files; inputs fingerprinted where results depend on
them; file modes kept on rewrite.

Every test here fails on the code before the change (issue-43 branch at 3c35d94) unless its docstring says
it guards against refusing something healthy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from reliability_helpers import VERB_ARGV, fill, no_weights, one_line, tree


def _dead_pid() -> int:
    """The id of a process that has ended (what a killed writer leaves in its temporary names)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# --- 1. --force never deletes what the verb did not make; a failed rerun never replaces a good result -------

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


# --- 2. one write lock per run; staging folders of unique names; publishing checked under the lock ---------

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


# --- 5. rewrites keep file modes -------------------------------------------------------------------------

def test_rewrites_keep_the_files_modes(fixture_run, cli):
    from reliability_helpers import seed_store

    from aclarena.store import ResultsStore, load_manifest, write_manifest

    seed_store(fixture_run)
    store, toml = fixture_run / "results.h5", fixture_run / "aclarena.toml"
    store.chmod(0o600)
    toml.chmod(0o644)
    ResultsStore(fixture_run).write("another/result", {"x": [1]}, result_type="sentinel")
    write_manifest(load_manifest(fixture_run), fixture_run)
    assert (store.stat().st_mode & 0o777, toml.stat().st_mode & 0o777) == (0o600, 0o644)


# --- 3. every reader of user files bounded, each failure one line ----------------------------------------

DEEP = "[" * 20000 + "]" * 20000


def test_a_deeply_nested_manifest_is_one_line(fixture_run, cli):
    toml = fixture_run / "aclarena.toml"
    toml.write_text(toml.read_text().replace("[run]\n", f"[run]\ndeep = {DEEP}\n", 1))
    code, _, err = cli("checkpoints", "--run", str(fixture_run))
    assert code == 1 and "too deeply" in one_line(err, "checkpoints")


def test_a_deeply_nested_training_config_is_one_line(tmp_path):
    from train_helpers import TINY

    from aclarena.errors import AclarenaError
    from aclarena.train.config import parse_config

    text = TINY.read_text().replace("[run]\n", f"[run]\ndeep = {DEEP}\n", 1)
    with pytest.raises(AclarenaError, match="too deeply"):
        parse_config(text, "deep.toml")


def test_a_byte_order_mark_in_the_manifest_is_accepted(fixture_run, cli):
    """Before: "Invalid statement (line 1, column 1)" for a manifest a Windows editor saved."""
    toml = fixture_run / "aclarena.toml"
    toml.write_text("\ufeff" + toml.read_text(), encoding="utf-8")
    code, _, err = cli("checkpoints", "--run", str(fixture_run))
    assert code == 0, err


LONG_INT = "1" + "0" * 5000  # JSON allows it; Python refuses to convert integers over 4,300 digits


def test_json_integers_over_4300_digits_are_one_line(fixture_run, tmp_path, cli):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "what is 3 + 4?"}\n{"prompt": "x", "n": ' + LONG_INT + "}\n")
    code, _, err = cli("probe", "--ref", "seq-math", "--prompts", str(prompts), "--run", str(fixture_run))
    assert code == 1
    line = one_line(err, "probe")
    assert "line 2" in line and "too long" in line
    suite = tmp_path / "s.jsonl"
    suite.write_text('{"prompt": "q", "answer": "1", "n": ' + LONG_INT + "}\n")
    code, _, err = cli("init", "--run", str(tmp_path / "new"), f"base={fixture_run / 'checkpoints' / 'base'}",
                       "--suite", f"mine={suite}", "--suite-domain", "mine=math")
    assert code == 1 and "line 1" in one_line(err, "init") and not (tmp_path / "new" / "aclarena.toml").exists()


def test_a_suite_path_that_is_a_folder_is_named_a_folder(fixture_run, tmp_path, cli):
    folder = tmp_path / "suite"
    folder.mkdir()
    code, _, err = cli("init", "--run", str(tmp_path / "new"), f"base={fixture_run / 'checkpoints' / 'base'}",
                       "--suite", f"mine={folder}", "--suite-domain", "mine=math")
    assert code == 1 and "is a folder" in one_line(err, "init")


def test_a_numeric_answer_too_large_for_a_float_is_one_line(tmp_path):
    from aclarena.envs.custom import read_items
    from aclarena.errors import AclarenaError
    from aclarena.store.manifest import SuiteSpec

    f = tmp_path / "t.jsonl"
    f.write_text('{"prompt": "q", "answer": 4}\n{"prompt": "q2", "answer": ' + "9" * 400 + "}\n")
    with pytest.raises(AclarenaError, match="line 2: .*not a number a float can hold"):
        read_items(f, SuiteSpec(name="s", path=str(f), domain="d", scorer="numeric"))


@pytest.mark.parametrize("source, needle", [
    ("def score(reply, answer, item):\n    return 1 +\n", "SyntaxError"),
    ("raise RuntimeError('no config here')\n", "RuntimeError: no config here"),
    ("import tests_not_installed_dependency_xyz\n", "ModuleNotFoundError"),
], ids=["SyntaxError", "an exception at import", "a missing dependency of the module"])
def test_a_scorer_module_that_fails_to_import_names_the_users_file(tmp_path, monkeypatch, source, needle):
    from aclarena.envs.custom import make_scorer
    from aclarena.errors import AclarenaError
    from aclarena.store.manifest import SuiteSpec

    name = f"tests_broken_scorer_{abs(hash(source)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = SuiteSpec(name="s", path="t.jsonl", domain="d", scorer=f"{name}:score")
    with pytest.raises(AclarenaError) as e:
        make_scorer(spec, allow_code=True)
    msg = str(e.value)
    assert needle in msg and f"{name}.py line " in msg and "\n" not in msg


@pytest.mark.timeout(90)
def test_a_catastrophically_backtracking_answer_is_bounded(tmp_path, monkeypatch):
    """`(a|aa)+$` against 40 a's and a '!': re backtracks through ~10^8 paths (eval hung with no output); now the
    search stops after its time bound with one line naming the pattern."""
    import time

    import aclarena.envs.custom as custom
    from aclarena.envs.custom import make_scorer
    from aclarena.errors import AclarenaError
    from aclarena.store.manifest import SuiteSpec

    monkeypatch.setattr(custom, "REGEX_TIMEOUT_S", 0.5, raising=False)  # the bound itself (2 s) is not the point
    score = make_scorer(SuiteSpec(name="s", path="t.jsonl", domain="d", scorer="regex"))
    assert score("it jumped", r"\bjump(s|ed)?\b", {"id": "ok"}) == 1.0
    t0 = time.monotonic()
    with pytest.raises(AclarenaError, match=r"\(a\|aa\)\+\$.*backtracking"):
        score("a" * 40 + "!", "(a|aa)+$", {"id": "q1"})
    assert time.monotonic() - t0 < 30


def test_a_gguf_whose_metadata_contradicts_its_tensors_is_one_line(tmp_path, tokenizer, cli):
    pytest.importorskip("gguf")
    from gguf_helpers import write_llama_gguf

    from aclarena.models.tiny import build_model, tiny_config

    model = build_model(tiny_config(tokenizer, arch="llama", num_heads=4, num_kv_heads=2), seed=3)
    model.config.intermediate_size += 16  # the metadata says so; the tensors keep their shapes
    path = tmp_path / "lying.gguf"
    write_llama_gguf(model, tokenizer, path)
    code, _, err = cli("import", str(path), "--out", str(tmp_path / "m"))
    assert code == 1, err
    assert "cannot read" in one_line(err, "import") or "does not fit" in one_line(err, "import")
    assert not (tmp_path / "m").exists() and not list(tmp_path.glob(".m.*"))


# --- 4. inputs fingerprinted where results depend on them, checked before reuse ---------------------------

def test_flips_refuses_cells_of_an_edited_suite_file(fixture_run, tmp_path, cli):
    """The cells record the custom suite file's SHA-256; before, `flips` replayed today's tasks against the
    outcomes of the file as it was."""
    import json

    from flips_helpers import CELL_SETTINGS, OUTCOMES

    from aclarena.envs import sample_tasks
    from aclarena.envs.custom import register_suites
    from aclarena.envs.evaluation import suite_settings
    from aclarena.results.capability import cell_payload, write_cells
    from aclarena.store import Manifest, load_manifest

    tasks = tmp_path / "mine.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": f"say {i}", "answer": str(i)}) + "\n" for i in range(4)))
    code, _, err = cli("init", "--run", str(fixture_run), "--add", "--suite", f"mine={tasks}",
                       "--suite-domain", "mine=math", "--suite-scorer", "mine=exact")
    assert code == 0, err
    try:
        register_suites(load_manifest(fixture_run), fixture_run)
        settings = suite_settings(CELL_SETTINGS, "mine")
        ids = [t.id for t in sample_tasks("mine", 4, seed=0)]
        items = []
        for ck, o in OUTCOMES.items():
            items.append(cell_payload(checkpoint=ck, suite="mine", domain="math", role="id", source="arena",
                                      settings=settings, greedy=np.array([o], dtype=float), item_ids=ids))
        write_cells(fixture_run, items)
    finally:
        register_suites(Manifest(name="none"), ".")
    tasks.write_text(tasks.read_text().replace('"say 1"', '"say one hundred"'))  # same ids, other tasks
    code, _, err = cli("flips", "--from", "seq-math", "--to", "seq-search", "--suite", "mine", "--no-swap",
                       "--run", str(fixture_run))
    register_suites(Manifest(name="none"), ".")
    assert code == 1, err
    line = one_line(err, "flips")
    assert "task file has changed" in line and "eval --suites mine" in line


PROMPTS = '{"prompt": "what is 3 + 4?"}\n{"prompt": "the total is"}\n'


def _probe(run: Path, tmp_path: Path, cli) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(PROMPTS)
    code, _, err = cli("probe", "--ref", "seq-math", "--prompts", str(prompts), "--max-new-tokens", "4",
                       "--run", str(run))
    assert code == 0, err


def test_tokens_refuses_a_probe_set_whose_reference_weights_changed(fixture_run, tmp_path, cli):
    """Before, `tokens` rescored every checkpoint on generations the reference's current weights never made."""
    from fixtures import perturb
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aclarena.models.tiny import save_checkpoint

    _probe(fixture_run, tmp_path, cli)
    folder = fixture_run / "checkpoints" / "seq-math"
    tok = AutoTokenizer.from_pretrained(folder)
    save_checkpoint(perturb(AutoModelForCausalLM.from_pretrained(folder), 0.05, seed=5), tok, folder)
    code, _, err = cli("tokens", "--ref", "seq-math", "--against", "seq-search", "--run", str(fixture_run))
    assert code == 1, err
    line = one_line(err, "tokens")
    assert "have changed since" in line and "probe --ref seq-math --force" in line


def test_tokens_names_a_later_checkpoint_without_tokenizer_files(fixture_run, tmp_path, cli):
    _probe(fixture_run, tmp_path, cli)
    for f in (fixture_run / "checkpoints" / "seq-search").iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template")):
            f.unlink()
    code, _, err = cli("tokens", "--ref", "seq-math", "--against", "seq-search", "--run", str(fixture_run))
    assert code == 0, err
    assert "'seq-search' has no tokenizer files" in err


def test_vectors_notes_a_zero_update(fixture_run, cli):
    from tokens_helpers import copy_checkpoint

    copy_checkpoint(fixture_run, "seq-math", "seq-math-again", parent="seq-math")
    code, out, err = cli("vectors", "--run", str(fixture_run))
    assert code == 0, err
    assert "seq-math-again - seq-math is a zero update" in out and "nan" in out


# --- 6. conventions stated: the paper's chance-corrected forgetting under its own name ---------------------

def test_forgetting_reports_the_papers_estimator_beside_aclarenas(fixture_run, cli):
    """arXiv 2510.17776's code computes max(0, p10 - (1-a0)(1-a1)/(k-1)); aclarena's F_true is another number.
    Both are reported, each under its own name (20 items, 6 forgotten, 2 gained, 8 wrong twice, k = 4)."""
    import json

    from consolidation_helpers import write_cells

    before = [1.0] * 10 + [0.0] * 10
    after = [0.0] * 6 + [1.0] * 4 + [1.0] * 2 + [0.0] * 8
    write_cells(fixture_run, {"base": {"math/id": [0, 0, 0, 0], "general": before},
                              "seq-math": {"math/id": [1, 1, 0, 0], "general": before},
                              "seq-search": {"math/id": [1, 0, 0, 0], "general": after}})
    code, out, err = cli("forgetting", "--run", str(fixture_run), "--json")
    assert code == 0, err
    general = next(s for s in json.loads(out)["along_chain"] if s["suite"] == "general")
    last = general["transitions"][-1]
    assert last["sample_forgetting_2510_17776"] == pytest.approx(max(0.0, 0.3 - 0.5 * 0.7 / 3))
    assert last["sample_forgetting_chance_adjusted"] == pytest.approx((0.3 * 0.75 - 0.25 * 0.4) / 0.75**2)


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


def test_export_html_report_gets_a_plain_files_mode(fixture_run, tmp_path, cli):
    """Written through mkstemp, the report was 0600 (unreadable to a web server or a colleague)."""
    from reliability_helpers import seed_store

    seed_store(fixture_run)
    old = os.umask(0o022)
    try:
        code, _, err = cli("export", "--format", "html", "--out", str(tmp_path / "figs"), "--run", str(fixture_run))
    finally:
        os.umask(old)
    assert code == 0, err
    (report,) = (tmp_path / "figs").glob("*.html")
    assert report.stat().st_mode & 0o777 == 0o644


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
