"""`monitor --follow` ends on Ctrl-C even when the interrupt lands inside a callback that swallows exceptions.

CI saw the follower run on after SIGINT: its KeyboardInterrupt was raised inside a weakref callback
("Exception ignored in: <function WeakValueDictionary...remove>") and lost. Here a __del__ sends the
signal to the process and keeps running bytecode, so Python delivers the interrupt inside it."""

from __future__ import annotations

import argparse
import os
import signal
from types import SimpleNamespace

import pytest

import aclarena.results.monitor_series as monitor_series
import aclarena.store.series as series
from aclarena.cli.monitor import follow


class _SignalsInDel:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100_000):  # the handler runs here, inside __del__, where an exception is only printed
            pass


class _Reader:
    calls = 0

    def __init__(self, run) -> None:
        pass

    def stale(self) -> bool:
        return False

    def refresh(self) -> None:
        _Reader.calls += 1
        if _Reader.calls > 20:
            raise AssertionError("monitor --follow ran on after Ctrl-C")
        _SignalsInDel()  # made and collected at once

    def close(self) -> None:
        pass


def test_follow_ends_on_an_interrupt_delivered_inside_del(tmp_path, monkeypatch, capsys):
    _fake_store(tmp_path, monkeypatch)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a suite run with `&` ignores it)
    assert follow(_args(tmp_path)) == 0
    assert _Reader.calls <= 2  # the interrupt of the first read ends it
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handler is back
    assert "KeyboardInterrupt" not in capsys.readouterr().err


def test_an_ignored_interrupt_stays_ignored(tmp_path, monkeypatch):
    """A follower started in the background (SIGINT ignored) is not ended by the terminal's Ctrl-C."""
    _fake_store(tmp_path, monkeypatch)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with pytest.raises(AssertionError, match="ran on"):
        follow(_args(tmp_path))
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def _args(run) -> argparse.Namespace:
    return argparse.Namespace(run=str(run), json=True, label=None, interval=0.01)


def _fake_store(tmp_path, monkeypatch) -> None:
    (tmp_path / series.SERIES_NAME).write_bytes(b"")
    monkeypatch.setattr(series, "SeriesReader", _Reader)
    monkeypatch.setattr(monitor_series, "monitor_labels", lambda reader: ["seq-search-sft"])
    monkeypatch.setattr(monitor_series, "load_monitor",
                        lambda reader, label: SimpleNamespace(label=label, probes={}, events=[]))


@pytest.fixture(autouse=True)
def _reset():
    _Reader.calls = 0
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)
