"""The Monitor page rereads series.h5 only when it changed, and knows from /proc/locks whether a writer holds it."""

import fcntl
import os

from aclarena.dashboard.pages import monitor


def test_version_follows_the_file_and_the_lock_table(tmp_path):
    assert monitor.series_version(tmp_path) is None
    f = tmp_path / "series.h5"
    f.write_bytes(b"x")
    v1 = monitor.series_version(tmp_path)
    os.utime(f, ns=(1, 2))
    assert monitor.series_version(tmp_path) != v1
    assert monitor.writer_active(tmp_path) is False  # no lock file: nobody writes
    lock = tmp_path / "series.h5.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        if os.path.exists("/proc/locks"):
            assert monitor.writer_active(tmp_path) is False  # the file exists, nobody holds it
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            assert monitor.writer_active(tmp_path) is True
            fcntl.flock(fd, fcntl.LOCK_UN)
            assert monitor.writer_active(tmp_path) is False
        assert monitor.writer_active(tmp_path, locks=str(tmp_path / "missing")) is None
    finally:
        os.close(fd)


def test_a_timer_tick_reads_nothing_when_the_file_is_unchanged(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(monitor, "refresh", lambda run, label: calls.append(label) or ({}, [], "s", [], label))
    (tmp_path / "series.h5").write_bytes(b"x")
    seen = monitor.series_version(tmp_path)
    out = monitor.tick(tmp_path, "a", seen, from_timer=True)
    assert calls == [] and out[6] is True  # unchanged, and no writer: stop polling
    out = monitor.tick(tmp_path, "a", "older", from_timer=True)
    assert calls == ["a"] and out[5] == seen
    monitor.tick(tmp_path, "b", seen, from_timer=False)  # a phase change always rereads
    assert calls == ["a", "b"]
