"""Issue 32's defects of `init` and `checkpoints`: an adapter's parent is its `on`, a missing folder is
refused, guessed domains are named, and `checkpoints --strict` exits 1 on a row that cannot be loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from aclarena.store.manifest import load_manifest


def _point_adapter_at(adapter, base_folder) -> None:
    cfg_path = adapter / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = str(base_folder)
    cfg_path.write_text(json.dumps(cfg))


def test_adapter_parent_defaults_to_its_base_not_the_previous_stage(fixture_run, tmp_path, cli):
    ck = fixture_run / "checkpoints"
    adapter = tmp_path / "adapter-on-math"
    shutil.copytree(ck / "lora-ecom", adapter)
    _point_adapter_at(adapter, ck / "seq-math")
    run = tmp_path / "mine"
    code, _, err = cli("init", "--run", str(run), f"base={ck / 'base'}", f"seq-math={ck / 'seq-math'}",
                       f"seq-search={ck / 'seq-search'}")
    assert code == 0, err
    code, _, err = cli("init", "--run", str(run), "--add", f"lora={adapter}")
    assert code == 0, err
    spec = load_manifest(run).resolve("lora")
    assert spec.on == "seq-math" and spec.parent == "seq-math"  # before: parent seq-search, the stage before


def test_adapter_parent_that_disagrees_with_its_base_is_refused(fixture_run, tmp_path, cli):
    ck = fixture_run / "checkpoints"
    run = tmp_path / "mine"
    code, _, err = cli("init", "--run", str(run), f"base={ck / 'base'}", f"seq-search={ck / 'seq-search'}",
                       f"lora={ck / 'lora-ecom'}", "--on", "lora=seq-search", "--parent", "lora=base")
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and "disagrees with the adapter's base 'seq-search'" in lines[0], err
    assert not (run / "aclarena.toml").exists()
    code, _, err = cli("init", "--run", str(run), f"base={ck / 'base'}", f"seq-search={ck / 'seq-search'}",
                       f"lora={ck / 'lora-ecom'}", "--on", "lora=seq-search", "--parent", "lora=seq-search")
    assert code == 0, err


def test_init_refuses_a_missing_folder_unless_allowed(fixture_run, tmp_path, cli):
    run = tmp_path / "mine"
    for path in (str(tmp_path / "nowhere"), "./nowhere", "checkpoints/seq-mth"):  # the last: a typo in a real folder
        code, _, err = cli("init", "--run", str(fixture_run), "--add", f"x={path}")
        assert code == 1 and "does not exist" in err and "--allow-missing" in err and "Traceback" not in err, err
    assert "x" not in load_manifest(fixture_run)
    code, _, err = cli("init", "--run", str(run), "base=./models/nowhere", "--allow-missing")
    assert code == 0, err
    # read from the current folder like every init path (issue 49), written absolute: it lies outside the run
    assert load_manifest(run).resolve("base").path == str(Path("models/nowhere").resolve())
    # a hub id is no local folder and is accepted as it is, with a note
    code, _, err = cli("init", "--run", str(tmp_path / "hub"), "base=Qwen/Qwen3-8B-Base")
    assert code == 0 and "taken as a hub id" in err, err
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    code, _, err = cli("init", "--run", str(tmp_path / "g"), f"base={gguf}")
    assert code == 1 and "aclarena-diag import" in err


def test_guessed_domain_is_named_and_explicit_domain_wins(fixture_run, tmp_path, cli):
    ck = fixture_run / "checkpoints"
    run = tmp_path / "mine"
    code, _, err = cli("init", "--run", str(run), f"base={ck / 'base'}", f"seq-a={ck / 'seq-math'}",
                       f"seq-b={ck / 'seq-search'}", "--domain", "seq-b=search")
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if "note:" in ln]
    assert notes == ["aclarena-diag init: note: seq-a: domain 'a' guessed from the name; set it with "
                     "--domain seq-a=DOMAIN"], err
    m = load_manifest(run)
    assert m.resolve("seq-a").domain == "a" and m.resolve("seq-b").domain == "search"


def test_checkpoints_strict_exits_1_on_a_row_that_cannot_be_loaded(fixture_run, cli):
    code, _, err = cli("checkpoints", "--run", str(fixture_run), "--strict")
    assert code == 0 and "cannot be loaded" not in err, err
    shutil.rmtree(fixture_run / "checkpoints" / "oracle-math")
    code, out, err = cli("checkpoints", "--run", str(fixture_run), "--json")
    assert code == 0 and "warning: 1 of 5 checkpoint(s) cannot be loaded, e.g. oracle-math" in err, err
    assert not {r["name"]: r for r in json.loads(out)["checkpoints"]}["oracle-math"]["loadable"]
    code, out, err = cli("checkpoints", "--run", str(fixture_run), "--strict")
    assert code == 1 and "oracle-math" in out  # the table is printed first
    assert "error: 1 of 5 checkpoint(s) cannot be loaded" in err and "Traceback" not in err


def test_init_paths_are_read_from_the_current_folder(fixture_run, tmp_path, cli, monkeypatch):
    """Issue 49: `init --run runs/real base=models/smollm2` (the docs' own line) read the path from the run
    folder, found nothing there and named a hub id `models/smollm2`; paths are read from the current folder."""
    work = tmp_path / "work"
    shutil.copytree(fixture_run / "checkpoints" / "base", work / "models" / "smollm2")
    monkeypatch.chdir(work)
    code, out, err = cli("init", "--run", "runs/real", "base=models/smollm2", "--json")
    assert code == 0, err
    assert "hub id" not in err
    spec = load_manifest(work / "runs" / "real").resolve("base")
    assert spec.path == str((work / "models" / "smollm2").resolve())
    code, out, err = cli("checkpoints", "--run", "runs/real", "--json", "--strict")
    assert code == 0, err
    assert json.loads(out)["checkpoints"][0]["source"] == "folder"
    # inside the run folder: written relative to it; a path that exists only under the run folder: told which to give
    shutil.copytree(fixture_run / "checkpoints" / "seq-math", work / "runs" / "real" / "ck" / "seq-math")
    code, _, err = cli("init", "--run", "runs/real", "--add", "seq-math=ck/seq-math")
    assert code == 1 and "read from the current folder" in err and "seq-math=runs/real/ck/seq-math" in err, err
    code, _, err = cli("init", "--run", "runs/real", "--add", "seq-math=runs/real/ck/seq-math")
    assert code == 0, err
    assert load_manifest(work / "runs" / "real").resolve("seq-math").path == "ck/seq-math"


def test_from_folder_entries_are_not_resolved_twice(fixture_run, tmp_path, cli, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(fixture_run / "checkpoints", work / "runs" / "r" / "ck")
    monkeypatch.chdir(work)
    code, _, err = cli("init", "--run", "runs/r", "--from-folder", "runs/r/ck")
    assert code == 0, err
    m = load_manifest(work / "runs" / "r")
    assert m.resolve("base").path == "ck/base"
    code, _, err = cli("checkpoints", "--run", "runs/r", "--strict")
    assert code == 0, err
