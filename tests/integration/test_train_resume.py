"""Resumability and bad input of `train`: a SIGKILL in the middle of an RL phase, a full disk, an
unwritable output folder, a base without a chat template, a parent whose weights are gone."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest
from train_helpers import REPO, cli_env, marker_mtimes, run_train, small_config, train_cmd

from aclarena.results.train_log import read_train_logs
from aclarena.store import ResultsStore, load_manifest


@pytest.mark.slow
def _complete(checkpoint: Path) -> bool:
    try:
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        return True
    except (OSError, ValueError):
        return False


@pytest.mark.slow
def test_sigkill_in_the_middle_of_rl_then_rerun_finishes(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(small_config(("math",), rl_steps=6))
    out = tmp_path / "run"
    proc = subprocess.Popen(train_cmd(config, out), cwd=REPO, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    rl_work = out / "work" / "seq-math"
    deadline = time.monotonic() + 480
    try:
        # kill once the RL phase has saved a *complete* trainer checkpoint past its first steps (a
        # checkpoint-N folder appears before its files are written: CI saw the kill land then)
        while time.monotonic() < deadline and proc.poll() is None:
            if any(int(p.name.split("-")[1]) >= 2 and _complete(p) for p in rl_work.glob("checkpoint-*")):
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"train ended before it could be killed: {proc.communicate()[1][-2000:]}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    # the newest *complete* checkpoint (its trainer_state.json is written last): the kill may land
    # while a later one is being saved, and that one is discarded on resume
    saved = max(int(p.name.split("-")[1]) for p in rl_work.glob("checkpoint-*") if _complete(p))
    assert not (out / "checkpoints" / "seq-math" / ".aclarena-phase.json").exists()
    finished_before = marker_mtimes(out)
    assert set(finished_before) == {"base", "seq-math-sft"}
    assert {s.name for s in load_manifest(out)} == {"base", "seq-math-sft"}

    done = run_train(config, out, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["name"]: r for r in json.loads(done.stdout)["phases"]}
    assert rows["base"]["status"] == rows["seq-math-sft"]["status"] == "finished"
    assert rows["seq-math"]["status"] == "trained"
    assert rows["seq-math"]["resumed_from_step"] == saved >= 2
    assert rows["seq-math"]["steps"] == 6
    after = marker_mtimes(out)
    assert {k: after[k] for k in finished_before} == finished_before  # finished phases were not redone
    assert "seq-math" in after
    with ResultsStore(out).reader() as r:
        log = read_train_logs(r)["seq-math"]
    assert log.resumed_from_step == saved
    assert max(log.log["step"]) == 6
    assert {s.name for s in load_manifest(out)} == {"base", "seq-math-sft", "seq-math"}

    again = run_train(config, out, "--json")
    assert again.returncode == 0
    assert {r["status"] for r in json.loads(again.stdout)["phases"]} == {"finished"}
    assert marker_mtimes(out) == after


@pytest.mark.slow
def test_full_disk_leaves_earlier_checkpoints_intact(tmp_path):
    out = tmp_path / "run"
    first = tmp_path / "first.toml"
    first.write_text(small_config(("math",)))
    ok = run_train(first, out)
    assert ok.returncode == 0, ok.stderr[-2000:]
    before = marker_mtimes(out)
    manifest_before = (out / "aclarena.toml").read_text()

    more = tmp_path / "more.toml"
    more.write_text(small_config(("math", "search")))
    size = (out / "checkpoints" / "seq-math" / "model.safetensors").stat().st_size
    limit = size // 4  # every new checkpoint file is larger than this: the first save of the new phase fails

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    full = run_train(more, out, preexec_fn=small_files)
    assert full.returncode == 1, (full.returncode, full.stderr[-2000:])
    lines = [ln for ln in full.stderr.strip().splitlines() if "error" in ln]
    assert len(lines) == 1, full.stderr[-2000:]
    assert "cannot write" in lines[0] and "File too large" in lines[0] and "rerun" in lines[0]
    assert "Traceback" not in full.stderr
    assert marker_mtimes(out) == before
    assert (out / "aclarena.toml").read_text() == manifest_before
    assert {s.name for s in load_manifest(out)} == {"base", "seq-math-sft", "seq-math"}

    # with room again the rerun finishes the rest
    again = run_train(more, out, "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    rows = {r["name"]: r["status"] for r in json.loads(again.stdout)["phases"]}
    assert rows == {"base": "finished", "seq-math-sft": "finished", "seq-math": "finished",
                    "seq-search-sft": "trained", "seq-search": "trained"}


def test_unwritable_output_folder(tmp_path, cli):
    config = tmp_path / "c.toml"
    config.write_text(small_config(("math",)))
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = cli("train", "--config", str(config), "--out", str(blocker / "run"))
    assert code == 1
    assert "cannot write in" in err and "--out" in err and len(err.strip().splitlines()) == 1

    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:  # root writes through permissions; an immutable folder stops it too
        if subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode != 0:
            pytest.skip("running as root on a filesystem without chattr +i: no folder is unwritable to root")
        undo = ["chattr", "-i", str(ro)]
        reason = "Operation not permitted"
    else:
        ro.chmod(0o555)
        undo = ["chmod", "755", str(ro)]
        reason = "Permission denied"
    try:
        code, _, err = cli("train", "--config", str(config), "--out", str(ro / "run"))
    finally:
        subprocess.run(undo, check=True)
    assert code == 1
    assert "cannot write in" in err and reason in err and len(err.strip().splitlines()) == 1


def test_base_without_chat_template(tmp_path, cli, tokenizer):
    from aclarena.models.tiny import build_model, tiny_config

    folder = tmp_path / "plain-base"
    build_model(tiny_config(tokenizer), seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    # strip the template wherever transformers keeps it
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    (folder / "chat_template.json").unlink(missing_ok=True)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    config = tmp_path / "c.toml"
    config.write_text(small_config(("math",)).replace('preset = "tiny"', f'model = "{folder}"')
                      .replace("chat_examples = 40\nmc_examples = 40\ntool_examples = 20\narithmetic_examples = 10\n", ""))
    code, _, err = cli("train", "--config", str(config), "--out", str(tmp_path / "run"))
    assert code == 1
    assert "no chat template" in err and str(folder) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "aclarena.toml").exists()


@pytest.mark.slow
def test_parent_with_missing_weights(tmp_path, cli):
    out = tmp_path / "run"
    first = tmp_path / "first.toml"
    first.write_text(small_config(("math",), rl_steps=1))
    assert run_train(first, out).returncode == 0
    (out / "checkpoints" / "seq-math" / "model.safetensors").unlink()
    more = tmp_path / "more.toml"
    more.write_text(small_config(("math", "search"), rl_steps=1))
    code, _, err = cli("train", "--config", str(more), "--out", str(out))
    assert code == 1
    assert "seq-math" in err and "weights are missing" in err and "delete the folder" in err
    assert len(err.strip().splitlines()) == 1
