"""The [monitor] section on the tiny curriculum's later stage, through `aclarena-diag train` and `monitor --follow`."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_helpers import REPO, cli_env, run_train, small_config

from aclarena.results.monitor_series import load_monitor
from aclarena.store import SeriesReader, SeriesWriter

pytestmark = pytest.mark.slow

# The search stage's SFT phase, forced to drift: a large learning rate from the first step.
SEARCH_SFT = """
[stages.sft.trl]
max_steps = {steps}
learning_rate = 0.05
warmup_steps = 0
"""


def config(tmp: Path, monitor: str, *, steps: int = 12) -> Path:
    text = small_config(("math", "search"))
    head, tail = text.split('[[stages]]\ndomain = "search"')
    tail = tail.replace("[stages.sft]\nn = 8\n", "[stages.sft]\nn = 8\n" + SEARCH_SFT.format(steps=steps), 1)
    path = tmp / "cfg.toml"
    path.write_text(head + '[[stages]]\ndomain = "search"' + tail + "\n" + monitor, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def math_run(tmp_path_factory) -> Path:
    """A tiny run with the base and the math stage trained (the search stage is what the tests train)."""
    root = tmp_path_factory.mktemp("monitor-math")
    cfg = root / "math.toml"
    cfg.write_text(small_config(("math",)), encoding="utf-8")
    out = root / "run"
    proc = run_train(cfg, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture()
def run(math_run, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(math_run, dst)
    return dst


def test_follow_sees_checks_while_training_and_warning_fires(run, tmp_path):
    cfg = config(tmp_path, "[monitor]\nevery_n_steps = 2\nprobe_n = 4\nprobe_max_new_tokens = 16\n", steps=24)
    follow = subprocess.Popen([sys.executable, "-m", "aclarena", "monitor", "--run", str(run), "--follow", "--json",
                               "--interval", "0.2", "--label", "seq-search-sft"],
                              cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              # as in a terminal's foreground: a suite started in the background
                              # (nohup, `&`) ignores SIGINT, and children inherit that
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[tuple[float, dict]] = []
    import threading

    def read() -> None:
        for line in follow.stdout:
            lines.append((time.monotonic(), json.loads(line)))

    errors: list[str] = []

    def drain() -> None:  # a pipe nobody reads fills at 64 kB and blocks the follower (even its exit)
        errors.extend(follow.stderr)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    threading.Thread(target=drain, daemon=True).start()
    proc = run_train(cfg, run)
    trained_at = time.monotonic()
    assert proc.returncode == 0, proc.stderr[-3000:]
    deadline = time.time() + 60
    while time.time() < deadline and not any(d["type"] == "check" and d["step"] == 24 for _, d in lines):
        time.sleep(0.2)
    follow.send_signal(signal.SIGINT)
    try:
        code = follow.wait(timeout=30)
    except subprocess.TimeoutExpired:
        follow.kill()
        raise AssertionError(f"monitor --follow did not end on Ctrl-C; its stderr: {''.join(errors)[-2000:]}") from None
    assert code == 0  # Ctrl-C ends it cleanly
    time.sleep(0.2)
    assert "Traceback" not in "".join(errors)
    checks = [d for _, d in lines if d["type"] == "check"]
    assert sorted({d["step"] for d in checks}) == list(range(0, 25, 2))
    # the earlier domain's probe, and RL's Razor's: the stage start's answers to the search stage's own prompts
    assert {d["probe"] for d in checks} == {"monitor-math", "razor-search"}
    # the reader process saw checks land during training, not all at the end
    early = [t for t, d in lines if d["type"] == "check" and d["step"] <= 12]
    assert early and min(early) < trained_at - 2
    warnings = [d for _, d in lines if d["type"] == "warning"]
    assert warnings and warnings[0]["action"] == "log"
    with SeriesReader(run) as r:
        v = load_monitor(r, "seq-search-sft")
    assert v.probes["monitor-math"]["step"].tolist() == list(range(0, 25, 2))
    assert v.settings["references"]["monitor-math"].endswith("checkpoints/seq-math")
    assert v.settings["references"]["razor-search"].endswith("checkpoints/seq-math")  # π_0: the stage start
    assert v.probes["razor-search"]["fkl"][0] == 0.0  # the forward KL to the stage start is 0 at the start
    assert v.settings["stage_start"].endswith("checkpoints/seq-math")  # the search stage starts from seq-math
    assert [e["step"] for e in v.events] == [w["step"] for w in warnings]
    # the RL phase of the stage is monitored too, against the same stage start
    assert load_monitor(SeriesReader(run), "seq-search").settings["stage_start"].endswith("checkpoints/seq-math")
    # the monitor's scalars are in the phase's train log in results.h5
    from aclarena.store import ResultsStore

    cols = ResultsStore(run).read("train/seq-search-sft/log").columns
    assert "monitor.monitor-math.kl_high" in cols
    code = subprocess.run([sys.executable, "-m", "aclarena", "monitor", "--run", str(run)], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert code.returncode == 0 and "seq-search-sft" in code.stdout and "warnings" in code.stdout


def test_stop_on_warning_stops_the_curriculum_at_the_warning(run, tmp_path):
    cfg = config(tmp_path, "[monitor]\nevery_n_steps = 2\nprobe_n = 4\nprobe_max_new_tokens = 16\n"
                           "[monitor.thresholds]\nfkl = 0.001\n", steps=24)
    proc = run_train(cfg, run, "--stop-on-warning")
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = [line for line in proc.stderr.splitlines() if line.startswith("aclarena-diag train: error:")]
    assert len(err) == 1 and "stopped by the drift monitor at step" in err[0], proc.stderr[-2000:]
    with SeriesReader(run) as r:
        v = load_monitor(r, "seq-search-sft")
    stops = [e for e in v.events if e["action"] == "stop"]
    assert stops, v.events
    step = stops[0]["step"]
    assert f"at step {step}:" in err[0] and 0 < step < 24 and step % 2 == 0
    assert v.probes["monitor-math"]["step"].tolist()[-1] == step  # no check after the stop
    # the phase is not finished; its trainer checkpoint at the warning is kept for a rerun to resume from
    assert not (run / "checkpoints" / "seq-search-sft" / ".aclarena-phase.json").exists()
    assert (run / "work" / "seq-search-sft" / f"checkpoint-{step}").is_dir()
    assert "seq-search-sft" not in (run / "aclarena.toml").read_text()


def test_bad_monitor_input_through_train(run, tmp_path):
    from fixtures import make_tokenizer
    from monitor_helpers import make_probe

    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
    from aclarena.results.probes import write_probe_set
    from aclarena.store import ResultsStore

    # a probe set made with another tokenizer than the run's
    tok = make_tokenizer()
    other = build_model(tiny_config(tok), seed=3)
    folder = save_checkpoint(other, tok, tmp_path / "other")
    write_probe_set(ResultsStore(run), make_probe(other, tok, name="alien", folder=folder))
    cfg = config(tmp_path, '[monitor]\ndomains = []\nprobes = ["alien"]\n', steps=2)
    proc = run_train(cfg, run)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and "another tokenizer" in lines[0], proc.stderr[-2000:]
    assert not (run / "series.h5").exists()
    # a store locked by another writer: a clear error, the store unchanged
    cfg = config(tmp_path, "[monitor]\nprobe_n = 2\nprobe_max_new_tokens = 8\n", steps=2)
    with SeriesWriter(run, {"other/x": {"step": "i8"}}):
        proc = run_train(cfg, run)
        assert proc.returncode == 1
        lines = [line for line in proc.stderr.splitlines() if "error" in line]
        assert len(lines) == 1 and "locked by another writer" in lines[0] and "on_store_error" in lines[0]
        with SeriesReader(run) as r:
            assert r.names() == ["other/x"]
        # asked to go on without the monitor: it warns and trains
        cfg = config(tmp_path, '[monitor]\nprobe_n = 2\nprobe_max_new_tokens = 8\non_store_error = "continue"\n'
                               "every_n_steps = 100\n", steps=2)
        proc = run_train(cfg, run)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "training goes on without the monitor" in proc.stderr
    with SeriesReader(run) as r:
        assert r.names() == ["other/x"]
    assert (run / "checkpoints" / "seq-search" / ".aclarena-phase.json").is_file()


def test_interval_larger_than_the_phase_is_warned(run, tmp_path):
    cfg = config(tmp_path, "[monitor]\nevery_n_steps = 100\nprobe_n = 2\nprobe_max_new_tokens = 8\n", steps=3)
    proc = run_train(cfg, run)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "every_n_steps = 100 is larger than the run's 3 steps" in proc.stderr
    with SeriesReader(run) as r:
        assert load_monitor(r, "seq-search-sft").probes["monitor-math"]["step"].tolist() == [0, 3]
