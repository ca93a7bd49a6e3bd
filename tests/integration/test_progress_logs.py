"""Progress in a log (issue 34): `train` with stderr piped prints phase start/end lines and periodic
step/total/rate lines, where a rich bar would print nothing."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from train_helpers import BASE, REPO, cli_env, train_cmd

# the tiny base (4 steps) and one SFT-only math stage (3 steps): two trained phases, nothing downloaded
CONFIG = BASE.format(rl_steps=1) + """
[[stages]]
domain = "math"
phases = ["sft"]
[stages.sft]
n = 8
"""

STEP_LINE = re.compile(r"^\[aclarena \d\d:\d\d:\d\d\] (.+): step (\d+)/(\d+) \(\d+%\), ([0-9.e+-]+) steps/s, elapsed ")


@pytest.mark.slow  # two trained phases in a subprocess: 30 s alone on 2 cores, two minutes on a loaded machine
def test_train_piped_prints_progress_lines(tmp_path):
    config = tmp_path / "small.toml"
    config.write_text(CONFIG, encoding="utf-8")
    env = cli_env()
    env["ACLARENA_PROGRESS_INTERVAL"] = "0.2"
    proc = subprocess.run(train_cmd(config, tmp_path / "run"), cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("[aclarena ")]
    text = "\n".join(lines)
    # one start and one end line per trained phase, and for the whole curriculum
    for phase in ("base (pretrain)", "seq-math (sft)"):
        assert sum(f"] start: {phase}" in ln for ln in lines) == 1, text
        ends = [ln for ln in lines if f"] end: {phase}" in ln]
        assert len(ends) == 1, text
    seq_end = next(ln for ln in lines if "] end: seq-math (sft)" in ln)
    assert re.search(r": 3/3 steps in [0-9.]+s", seq_end), seq_end
    # the curriculum's line counts training steps (issue 42: its rate and ETA are the whole curriculum's): the
    # math phase's 3; the base built here counts none
    assert any("] start: small: 2 phases (3 steps)" in ln for ln in lines), text
    assert any(re.search(r"\] end: small: 2 phases: 3/3 steps in ", ln) for ln in lines), text
    # periodic lines carry step, total and a rate; the phase's last logged loss rides in its description
    steps = [m for ln in lines if (m := STEP_LINE.match(ln))]
    assert steps, text
    assert all(int(m.group(2)) <= int(m.group(3)) and float(m.group(4)) >= 0 for m in steps), text
    # the start of a phase comes before its end, and the curriculum ends last
    order = [ln.split("] ", 1)[1] for ln in lines if "] start: " in ln or "] end: " in ln]
    assert order[0].startswith("start: small") and order[-1].startswith("end: small"), order
    first = {word: next(i for i, s in enumerate(order) if s.startswith(f"{word}: seq-math (sft)"))
             for word in ("start", "end")}
    assert first["start"] < first["end"], order
    # a rerun reads back what finished: those steps leave the count, so its rate and ETA are of what is left
    proc = subprocess.run(train_cmd(config, tmp_path / "run"), cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = [ln for ln in proc.stderr.splitlines() if ln.startswith("[aclarena ")]
    assert any(re.search(r"\] end: small: 2 phases: 0/0 steps in ", ln) for ln in again), "\n".join(again)


def test_vectors_piped_start_and_end_lines(fixture_run, cli, monkeypatch):
    """The same in-process with a cheap verb: each task of a gram pass starts and ends once; --json is quiet."""
    monkeypatch.setenv("ACLARENA_PROGRESS_INTERVAL", "30")
    code, _, err = cli("vectors", "--run", str(fixture_run))
    assert code == 0, err
    lines = [ln.split("] ", 1)[1] for ln in err.splitlines() if ln.startswith("[aclarena ")]
    starts = [ln[len("start: "):] for ln in lines if ln.startswith("start: ")]
    ends = [ln for ln in lines if ln.startswith("end: ")]
    assert any(s.startswith("task vectors: tensors") for s in starts), lines
    assert len(starts) == len(ends) >= 2, lines
    # every task completed: the tensor count in steps, each pass's reading in bytes (issue 49: not as steps)
    assert all(re.search(r": (\d+)/\1 steps in [0-9.]+s \(", ln) or re.search(r": [0-9.]+ [kMG]?B read in ", ln)
               for ln in ends), lines
    assert any(re.search(r"\(([0-9.]+ [kMG]?B) to read\)", s) for s in starts), lines
    code, _, err = cli("vectors", "--run", str(fixture_run), "--json", "--force")
    assert code == 0 and "[aclarena " not in err, err


@pytest.mark.parametrize("chosen", [None, "0"])
def test_a_piped_verb_prints_no_loading_bars_unless_asked(fixture_run, chosen):
    """transformers' per-file "Loading weights" bars stay out of a log; a user's own setting wins."""
    env = cli_env()
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    if chosen is not None:
        env["HF_HUB_DISABLE_PROGRESS_BARS"] = chosen
    proc = subprocess.run([sys.executable, "-m", "aclarena", "eval", "--run", str(fixture_run), "--checkpoints", "base",
                           "--suites", "math/id", "-n", "2", "--samples", "0"], cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("Loading weights" in proc.stderr) == (chosen == "0"), proc.stderr[-2000:]


def test_repair_and_import_say_what_they_are_doing(fixture_run, cli, monkeypatch, tmp_path, tokenizer):
    """Issue 49: `import` was silent for 5.5 of its 6 minutes and `repair` said "running" for 6: each now names
    its phases (import) and counts the tensors written (repair) in a log."""
    monkeypatch.setenv("ACLARENA_PROGRESS_INTERVAL", "30")
    code, _, err = cli("repair", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--method",
                       "dg-hard", "--name", "dg")
    assert code == 0, err
    lines = [ln.split("] ", 1)[1] for ln in err.splitlines() if ln.startswith("[aclarena ")]
    assert any(ln.startswith("start: repair dg: dg-hard of seq-search from seq-math") for ln in lines), lines
    assert any(re.search(r"^end: repair dg: .*: (\d+)/\1 tensors in ", ln) for ln in lines), lines
    pytest.importorskip("gguf")
    from gguf_helpers import write_llama_gguf

    from aclarena.models.tiny import build_model, tiny_config

    src = tmp_path / "src" / "tiny.gguf"
    src.parent.mkdir()
    write_llama_gguf(build_model(tiny_config(tokenizer, arch="llama"), seed=1), tokenizer, src)
    code, _, err = cli("import", str(src), "--out", str(tmp_path / "m"))
    assert code == 0, err
    starts = [ln for ln in err.splitlines() if "] start: import: " in ln]
    # streamed (issue 45): the header, the hash, the config and tokenizer, then the tensors one by one
    assert [s.split("start: import: ", 1)[1].split(" ", 1)[0] for s in starts] == ["reading", "hashing", "reading",
                                                                                   "writing"], err
