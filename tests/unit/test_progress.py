"""aclarena.progress: log lines where stderr is not a terminal, rich bars where it is (issue 34)."""

from __future__ import annotations

import io
import re
import time

import pytest

from aclarena import progress as pg
from aclarena.errors import AclarenaError


def _lines(buf: io.StringIO) -> list[str]:
    return [ln.split("] ", 1)[1] for ln in buf.getvalue().splitlines()]


def test_log_progress_start_periodic_end():
    buf = io.StringIO()
    with pg.LogProgress(interval=0.05, stream=buf) as p:
        t = p.add_task("phase", total=4)
        p.advance(t)
        time.sleep(0.2)  # several intervals with the task at 1/4
        p.update(t, completed=4)
    lines = _lines(buf)
    assert lines[0] == "start: phase (4 steps)"
    periodic = [ln for ln in lines if ln.startswith("phase: step 1/4 (25%), ")]
    assert len(periodic) >= 2, lines
    assert all(re.search(r"[0-9.e+-]+ steps/s, elapsed [0-9.]+s, eta ", ln) for ln in periodic), lines
    assert re.fullmatch(r"end: phase: 4/4 steps in [0-9.]+s \([0-9.e+-]+ steps/s\)", lines[-1]), lines
    assert sum(ln.startswith("end: ") for ln in lines) == 1


def test_log_progress_restart_and_unfinished_tasks():
    buf = io.StringIO()
    with pg.LogProgress(interval=60, stream=buf) as p:
        t = p.add_task("reference x", total=3)
        p.advance(t, 3)
        p.update(t, description="scoring y", completed=0, total=2)  # tokens' reuse of one task
        p.advance(t)
        other = p.add_task("no total")
        p.update(other, advance=2)
    lines = _lines(buf)
    assert lines[0] == "start: reference x (3 steps)"
    assert lines[1].startswith("end: reference x: 3/3 steps in ")
    assert lines[2] == "start: scoring y (2 steps)"
    assert lines[3] == "start: no total"
    # left unfinished at exit: each ends once, with what it reached
    assert lines[4].startswith("end: scoring y: 1/2 steps in ")
    assert lines[5].startswith("end: no total: 2 steps in ")
    assert len(lines) == 6


def test_log_progress_failure_says_stopped():
    buf = io.StringIO()
    with pytest.raises(RuntimeError), pg.LogProgress(interval=60, stream=buf) as p:
        p.add_task("eval", total=5)
        raise RuntimeError("boom")
    assert _lines(buf)[-1].startswith("stopped: eval: 0/5 steps in ")


def test_status_in_a_log(monkeypatch, capsys):
    monkeypatch.setenv(pg.INTERVAL_ENV, "0.05")
    with pg.status("demo: evaluating"):
        time.sleep(0.15)
    lines = [ln.split("] ", 1)[1] for ln in capsys.readouterr().err.splitlines()]
    assert lines[0] == "start: demo: evaluating"
    assert "demo: evaluating: running, elapsed " in lines[1]
    assert re.fullmatch(r"end: demo: evaluating \([0-9.]+s\)", lines[-1]), lines


def test_progress_picks_by_terminal_and_settings(monkeypatch, capsys):
    from rich.progress import Progress

    monkeypatch.setenv(pg.INTERVAL_ENV, "30")
    monkeypatch.setattr(pg, "stderr_is_terminal", lambda: False)
    with pg.progress(True) as p:
        assert isinstance(p, pg.LogProgress) and p.interval == 30
    with pg.progress(False) as p:  # --json: nothing at all
        assert isinstance(p, Progress) and p.disable
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pg.progress(True) as p:  # another rank of a launch: the main rank writes the log
        assert isinstance(p, Progress) and p.disable
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv(pg.INTERVAL_ENV, "0")
    with pg.progress(True) as p:
        assert isinstance(p, Progress) and p.disable
    monkeypatch.setattr(pg, "stderr_is_terminal", lambda: True)
    with pg.progress(True) as p:  # a terminal: the rich bar, as before
        assert isinstance(p, Progress) and not p.disable
    assert "[aclarena " not in capsys.readouterr().err


@pytest.mark.parametrize("text", ["-1", "soon", "inf"])
def test_bad_interval_names_the_variable(monkeypatch, text):
    monkeypatch.setenv(pg.INTERVAL_ENV, text)
    with pytest.raises(AclarenaError, match=pg.INTERVAL_ENV):
        pg.log_interval()


def test_lines_go_to_the_stderr_of_the_start_even_when_it_is_redirected(monkeypatch, capsys):
    """The demo redirects stderr while each step runs (to read its error line); its status lines must not land there."""
    import contextlib

    monkeypatch.setenv(pg.INTERVAL_ENV, "0.03")
    captured = io.StringIO()
    with pg.status("demo: a step"), contextlib.redirect_stderr(captured):
        time.sleep(0.12)
    assert captured.getvalue() == ""
    err = capsys.readouterr().err
    assert "start: demo: a step" in err and "demo: a step: running" in err and "end: demo: a step" in err


def test_log_progress_counts_bytes_as_sizes_not_steps():
    """Issue 49: a tensor pass's task counted bytes as steps (`start: sft-math (1072392704 steps)`)."""
    buf = io.StringIO()
    with pg.LogProgress(interval=0.05, stream=buf) as p:
        t = p.add_task("sft-math", total=1_072_392_704, unit="bytes")
        p.advance(t, 536_196_352)
        time.sleep(0.15)
        p.advance(t, 536_196_352)
    lines = _lines(buf)
    assert lines[0] == "start: sft-math (1.07 GB to read)"
    periodic = [ln for ln in lines if ln.startswith("sft-math: 536 MB of 1.07 GB read (50%), ")]
    assert periodic and all(re.search(r" [0-9.]+ [kMG]?B/s, elapsed ", ln) for ln in periodic), lines
    assert re.fullmatch(r"end: sft-math: 1\.07 GB read in [0-9.]+s \([0-9.]+ [kMG]?B/s\)", lines[-1]), lines
    assert not any("steps" in ln for ln in lines), lines
