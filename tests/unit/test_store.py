import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from fixtures import assert_equal_data

from aclarena.errors import StoreError
from aclarena.store import Json, Ragged, ResultsStore, SeriesReader, SeriesWriter, Table

ROOT = Path(__file__).resolve().parents[2]


def sample_data():
    rng = np.random.default_rng(0)
    return {
        "entropy": Ragged.from_rows([rng.random(5, dtype=np.float32), rng.random(0, dtype=np.float32),
                                     rng.random(3, dtype=np.float32)]),
        "topk": Ragged.from_rows([np.arange(10).reshape(5, 2), np.zeros((0, 2), int), np.ones((3, 2), int)]),
        "matrix": rng.random((3, 4)),
        "flags": np.array([True, False, True]),
        "names": ["a", "b", "c"],
        "title": "hello",
        "n": 7,
        "x": 0.5,
        "settings": Json({"q": 0.06, "against": ["a", "b"]}),
        "summary": Table({"checkpoint": ["a", "b"], "kl": [0.1, 0.2], "ok": [True, False]}),
        "nested": {"inner": np.arange(3)},
    }


def test_round_trip(tmp_path):
    store = ResultsStore(tmp_path)
    data = sample_data()
    store.write("tokens/ref/ckpt", data, result_type="token-scores", attrs={"settings": {"q": 0.06}}, manifest_text="[run]\n")
    got = store.read("tokens/ref/ckpt")
    assert_equal_data(got, data)
    attrs = store.attrs("tokens/ref/ckpt")
    assert attrs["result-type"] == "token-scores" and attrs["encoding-type"] == "dict"
    with store.reader() as r:
        assert r.root_attrs["encoding-type"] == "aclarena-results"
        assert r.root_attrs["manifest"] == "[run]\n"
        assert r.results() == ["tokens/ref/ckpt"]
        view = r.ragged("tokens/ref/ckpt/entropy")
        np.testing.assert_array_equal(view.row(2), data["entropy"].row(2))
        # every element carries its encoding
        with h5py.File(store.path, "r") as f:
            def check(name, obj):
                assert "encoding-type" in obj.attrs and "encoding-version" in obj.attrs, name
            f.visititems(check)


def test_existing_key_needs_overwrite(tmp_path):
    store = ResultsStore(tmp_path)
    store.write("a", {"x": np.arange(3)}, result_type="t")
    with pytest.raises(StoreError, match="already exists"):
        store.write("a", {"x": np.arange(4)}, result_type="t")
    store.write("a", {"x": np.arange(4)}, result_type="t", overwrite=True)
    np.testing.assert_array_equal(store.read("a/x"), np.arange(4))


def test_failed_write_leaves_store_unchanged(tmp_path):
    store = ResultsStore(tmp_path)
    store.write("a", {"x": np.arange(3)}, result_type="t")
    before = store.path.read_bytes()
    with pytest.raises(TypeError):
        store.write("b", {"ok": np.arange(3), "bad": object()}, result_type="t")
    assert store.path.read_bytes() == before
    assert not store.has("b")
    assert not list(tmp_path.glob(".results.h5.*.tmp"))


WRITER = r"""
import sys, numpy as np
sys.path.insert(0, {root!r})
from aclarena.store import ResultsStore
store = ResultsStore({run!r})
store.write("first", {{"x": np.arange(10)}}, result_type="t")
print("ready", flush=True)
big = {{f"d{{i}}": np.random.default_rng(i).random(200_000) for i in range(400)}}
while True:
    store.write("second", big, result_type="t", overwrite=True)
"""


def test_sigkill_mid_group_leaves_earlier_groups(tmp_path):
    script = WRITER.format(root=str(ROOT), run=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.5)  # well inside the big group's write
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = ResultsStore(tmp_path)
    np.testing.assert_array_equal(store.read("first/x"), np.arange(10))
    keys = store.keys()
    if "second" in keys:  # a complete earlier copy landed before the kill: it must be whole
        assert len(store.keys("second")) == 400
    # the next writer cleans the killed writer's temporary file and works
    store.write("third", {"y": np.arange(2)}, result_type="t")
    assert not list(tmp_path.glob(".results.h5.*.tmp"))
    np.testing.assert_array_equal(store.read("third/y"), np.arange(2))


def test_newer_major_version_refused(tmp_path):
    store = ResultsStore(tmp_path)
    store.write("a", {"x": np.arange(3)}, result_type="t")
    with h5py.File(store.path, "r+") as f:
        f.attrs["encoding-version"] = "2.0.0"
    with pytest.raises(StoreError, match="written by a newer aclarena.*upgrade"):
        store.read("a")
    before = store.path.read_bytes()
    with pytest.raises(StoreError, match="newer aclarena"):
        store.write("b", {"x": np.arange(3)}, result_type="t")
    assert store.path.read_bytes() == before


def test_newer_element_version_refused_with_key(tmp_path):
    store = ResultsStore(tmp_path)
    store.write("a", {"x": Ragged.from_rows([np.arange(2)])}, result_type="t")
    with h5py.File(store.path, "r+") as f:
        f["a/x"].attrs["encoding-version"] = "3.0.0"
    with pytest.raises(StoreError, match=r"/a/x: ragged-array version 3.0.0 was written by a newer aclarena"):
        store.read("a")


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupted_store(tmp_path, damage):
    store = ResultsStore(tmp_path)
    store.write("a", {"x": np.arange(1000)}, result_type="t")
    raw = store.path.read_bytes()
    store.path.write_bytes(raw[: len(raw) // 3] if damage == "truncate" else b"\x00garbage" * 100)
    before = store.path.read_bytes()
    with pytest.raises(StoreError, match="truncated or corrupted"):
        store.read("a")
    with pytest.raises(StoreError, match="truncated or corrupted"):
        store.write("b", {"x": np.arange(3)}, result_type="t")
    assert store.path.read_bytes() == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_folder_non_root(tmp_path):
    store = ResultsStore(tmp_path)
    store.write("a", {"x": np.arange(3)}, result_type="t")
    os.chmod(tmp_path, 0o555)
    try:
        with pytest.raises(StoreError, match="read-only"):
            store.write("b", {"x": np.arange(3)}, result_type="t")
    finally:
        os.chmod(tmp_path, 0o755)


def test_read_only_folder(tmp_path):
    """A read-only mount (simulated for root, whom chmod does not stop) gives a clean error."""
    store = ResultsStore(tmp_path)
    store.write("a", {"x": np.arange(3)}, result_type="t")
    before = store.path.read_bytes()
    import errno
    from unittest import mock

    def ro(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    with mock.patch("aclarena.store.results.shutil.copyfile", ro), pytest.raises(StoreError, match="read-only"):
        store.write("b", {"x": np.arange(3)}, result_type="t")
    assert store.path.read_bytes() == before


def test_disk_full_is_clean(tmp_path):
    """A file-size limit (what a full disk looks like to the writer) mid-write: clean error, store intact."""
    script = f"""
import resource, sys, numpy as np
sys.path.insert(0, {str(ROOT)!r})
from aclarena.store import ResultsStore
from aclarena.errors import StoreError
store = ResultsStore({str(tmp_path)!r})
store.write("small", {{"x": np.arange(100)}}, result_type="t")
import signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000))
try:
    store.write("big", {{"x": np.random.default_rng(0).random(1_000_000)}}, result_type="t")
except StoreError as e:
    print("ERR", e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "ERR no space left" in out.stdout, out.stdout + out.stderr
    store = ResultsStore(tmp_path)
    np.testing.assert_array_equal(store.read("small/x"), np.arange(100))
    assert not store.has("big")


SERIES_WRITER = r"""
import sys, time
sys.path.insert(0, {root!r})
from aclarena.store import SeriesWriter
w = SeriesWriter({run!r}, {{"monitor/kl": {{"step": "i8", "kl": "f8"}}}})
for i in range(60):
    w.append("monitor/kl", {{"step": i, "kl": i / 10}})
    if i == 5:
        print("ready", flush=True)
    time.sleep(0.05)
w.close()
"""


def test_swmr_reader_sees_rows_live(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SERIES_WRITER.format(root=str(ROOT), run=str(tmp_path))],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    r = SeriesReader(tmp_path)
    seen = []
    deadline = time.time() + 30
    while time.time() < deadline and (not seen or seen[-1] < 60):
        seen.append(len(r.read("monitor/kl")["step"]))
        time.sleep(0.1)
    proc.wait(timeout=30)
    assert proc.returncode == 0
    assert len(set(seen)) >= 3, seen  # the reader saw the series grow while the writer ran
    data = r.read("monitor/kl")
    r.close()
    np.testing.assert_array_equal(data["step"], np.arange(60))
    np.testing.assert_allclose(data["kl"], np.arange(60) / 10)


def test_series_killed_writer_then_resume(tmp_path):
    script = SERIES_WRITER.format(root=str(ROOT), run=str(tmp_path)).replace("range(60)", "range(10**6)")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with SeriesReader(tmp_path) as r:
        n = len(r.read("monitor/kl")["step"])
    assert n >= 6
    with SeriesWriter(tmp_path, {"monitor/kl": {"step": "i8", "kl": "f8"}}) as w:
        w.append("monitor/kl", {"step": -1, "kl": 0.0})
    with SeriesReader(tmp_path) as r:
        steps = r.read("monitor/kl")["step"]
    assert len(steps) == n + 1 and steps[-1] == -1 and list(steps[:n]) == list(range(n))


def test_second_series_writer_refused(tmp_path):
    with SeriesWriter(tmp_path, {"s": {"step": "i8"}}):
        with pytest.raises(StoreError, match="locked by another writer"):
            SeriesWriter(tmp_path, {"s": {"step": "i8"}})


def test_series_column_mismatch(tmp_path):
    with SeriesWriter(tmp_path, {"s": {"step": "i8"}}) as w:
        w.append("s", {"step": 1})
    with pytest.raises(StoreError, match="has columns"):
        SeriesWriter(tmp_path, {"s": {"step": "i8", "x": "f4"}})


def test_series_group_attributes_are_written_once_when_the_group_is_created(tmp_path):
    with SeriesWriter(tmp_path, {"m/a/x": {"step": "i8"}}, group_attrs={"m/a": {"kind": "one"}}) as w:
        w.append("m/a/x", {"step": 1})
    with SeriesWriter(tmp_path, {"m/a/y": {"step": "i8"}, "m/b/x": {"step": "i8"}},
                      group_attrs={"m/a": {"kind": "two"}, "m/b": {"kind": "two"}}):
        pass  # a new series below m/a, and a new group m/b
    with SeriesReader(tmp_path) as r:
        assert r.attrs("m/a") == {"kind": "one"} and r.attrs("m/b") == {"kind": "two"}
        assert r.names() == ["m/a/x", "m/a/y", "m/b/x"] and r.read("m/a/x")["step"].tolist() == [1]


@pytest.mark.parametrize(("name", "what"), [("results.h5", "the analysis"), ("series.h5", "the training")])
def test_damage_line_names_the_file_to_move_aside(tmp_path, name, what):
    from aclarena.store.results import damaged

    with pytest.raises(StoreError) as e, damaged(tmp_path / name, "monitor/seq-ecom-sft"):
        raise KeyError("step")
    line = str(e.value)
    assert len(line.splitlines()) == 1 and f"move {name} aside and rerun {what} that wrote it" in line
