"""Files written by each released store format version, and each archived result type's file, must keep
reading back equal."""

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from aclarena.errors import StoreError
from aclarena.results import flips, monitor_series, read, registered, registry, write
from aclarena.store import RESULTS_NAME, SERIES_NAME, ResultsStore, SeriesReader
from aclarena.store.results import RESULT_MAJORS

ARCHIVES = Path(__file__).resolve().parents[1] / "data" / "archives"
RESULTS = ARCHIVES / "results"
sys.path.insert(0, str(ARCHIVES))
sys.path.insert(0, str(RESULTS))
from fixtures import assert_equal_data  # noqa: E402
from make_archive import expected  # noqa: E402
from make_flips import plain  # noqa: E402

# one real file per (result type, version) under tests/data/archives/results/<type>-<version>/ (its README
# says how each was made); an archived type or version is one line here
ARCHIVED = [
    ("capability-cell", "0.1.0"),
    ("flips", "0.1.0"),
    ("order-study", "0.1.0"),
    ("token-reference", "0.1.0"),
    ("token-scores", "0.1.0"),
    ("token-summary", "0.1.0"),
]
ARCHIVED += [
    ("drift-signature", "0.1.0"),
    ("routing", "0.1.0"),
    ("task-vector-gram", "0.1.0"),
    ("task-vector-summary", "0.1.0"),
    ("task-vector-pairs", "0.1.0"),
    ("displacement-stats", "0.1.0"),
    ("displacement-summary", "0.1.0"),
    ("consolidation", "0.1.0"),
    ("probe-set", "0.1.0"),
    ("train-log", "0.1.0"),
    ("monitor-lead-time", "0.1.0"),
    ("demo-summary", "0.1.0"),
    ("monitor-series", "0.1.0"),  # series.h5 as written before the type's attributes (unversioned: 0.1.0)
]
# the types kept in series.h5 (rows appended while training runs, not written whole), with their payloads
SERIES_TYPES = {monitor_series.RESULT_TYPE: monitor_series.MonitorView}


@pytest.mark.parametrize("version", sorted(p.name for p in ARCHIVES.iterdir() if p.is_dir() and p.name[0] == "v"))
def test_archive_reads_back(version, tmp_path):
    run = tmp_path / version
    shutil.copytree(ARCHIVES / version, run)
    store = ResultsStore(run)
    assert_equal_data(store.read("examples/all"), expected())
    assert store.attrs("examples/all")["result-type"] == "example"
    with SeriesReader(run) as r:
        np.testing.assert_allclose(r.read("monitor/demo")["kl"], np.arange(4) / 4)
    # an old store accepts new results
    store.write("more", {"x": np.arange(2)}, result_type="t")
    assert_equal_data(store.read("examples/all"), expected())


def _as_json(payload: object) -> str:
    return json.dumps(plain(payload), sort_keys=True)  # NaN reads as NaN on both sides


def _archived(rtype: str, version: str, tmp_path: Path) -> tuple[Path, dict]:
    folder = RESULTS / f"{rtype}-{version}"
    run = tmp_path / folder.name
    shutil.copytree(folder, run)
    return run, json.loads((folder / "expected.json").read_text())


def _read_all(run: Path, rtype: str, version: str) -> dict[str, object]:
    """Every result of ``rtype`` in the archived folder ``run`` by key (by label in series.h5), each stored at
    ``version``."""
    if rtype in SERIES_TYPES:
        ms = monitor_series
        with SeriesReader(run) as r:
            labels = ms.monitor_labels(r)
            assert all(r.attrs(ms.monitor_key(lab)).get("result-version", ms.FIRST_VERSION) == version for lab in labels)
            return {lab: ms.load_monitor(r, lab) for lab in labels}
    with ResultsStore(run).reader() as r:
        keys = [k for k in r.results() if r.attrs(k)["result-type"] == rtype]
        assert all(r.attrs(k)["result-version"] == version for k in keys)
        return {k: read(r, k, rtype) for k in keys}


@pytest.mark.parametrize("rtype,version", ARCHIVED)
def test_archived_result_reads_back(rtype, version, tmp_path):
    run, want = _archived(rtype, version, tmp_path)
    got = _read_all(run, rtype, version)
    assert sorted(got) == sorted(want) and got
    for k, payload in got.items():
        assert isinstance(payload, SERIES_TYPES.get(rtype) or registry.get(rtype).payload)
        assert _as_json(payload) == json.dumps(want[k], sort_keys=True)
    if rtype in SERIES_TYPES:
        return  # appended by a training run, never written whole: test_an_archived_series_file_takes_a_new_run
    # what it reads, the current version writes, and reads back the same
    kind, store = registry.get(rtype), ResultsStore(run)
    for k, payload in got.items():
        write(store, rtype, k, payload)
        assert store.attrs(k)["result-version"] == kind.version
        with store.reader() as r:
            assert _as_json(read(r, k, rtype)) == _as_json(payload)


def test_every_result_type_has_an_archived_file():
    archived = {t for t, _ in ARCHIVED}
    assert {t.name for t in registered()} | set(SERIES_TYPES) <= archived
    assert all((RESULTS / f"{t}-{v}" / (SERIES_NAME if t in SERIES_TYPES else RESULTS_NAME)).is_file()
               for t, v in ARCHIVED)


# --- the monitor's series: an unversioned file, a new run beside it, versions newer and older ----------------


def test_an_archived_series_file_takes_a_new_run_and_stamps_only_its_group(tmp_path):
    ms = monitor_series
    run, want = _archived(ms.RESULT_TYPE, "0.1.0", tmp_path)
    old = sorted(want)[0]
    store = ms.MonitorStore(run)
    for label in (old, "seq-new-sft"):  # a resumed run of an old label, and a new one
        names = ms.series_names(label, [])
        store.declare_label(label)
        store.declare(names["sessions"], ms.SESSION_COLUMNS)
        store.declare(names["train"], ms.TRAIN_COLUMNS)
    assert store.acquire()
    store.append(ms.series_names("seq-new-sft", [])["train"], {"session": 0, "step": 3, "time": 1.0, "loss": 0.5})
    store.release()
    with SeriesReader(run) as r:
        assert r.attrs(ms.monitor_key("seq-new-sft")) == {"result-type": ms.RESULT_TYPE,
                                                          "result-version": ms.RESULT_VERSION}
        assert r.attrs(ms.monitor_key(old)) == {}  # a group already in the file is left as written
        assert ms.load_monitor(r, "seq-new-sft").train["loss"].tolist() == [0.5]
        got = {lab: ms.load_monitor(r, lab) for lab in want}
    assert all(_as_json(got[lab]) == json.dumps(want[lab], sort_keys=True) for lab in want)


def test_the_archived_series_file_reads_through_an_upgrade_and_a_newer_major_is_one_line(tmp_path, monkeypatch):
    import h5py

    ms = monitor_series
    run, want = _archived(ms.RESULT_TYPE, "0.1.0", tmp_path)
    label = sorted(want)[0]
    seen: list[str] = []

    def up(s: registry.Stored) -> registry.Stored:
        seen.append(s.key)
        return s.upgraded("0.2.0")

    monkeypatch.setattr(ms, "RESULT_VERSION", "0.2.0")
    monkeypatch.setattr(ms, "UPGRADES", {})
    with SeriesReader(run) as r, pytest.raises(StoreError, match="monitor-series result version 0.1.0 cannot be read.*rerun the monitored training"):
        ms.load_monitor(r, label)
    monkeypatch.setattr(ms, "UPGRADES", {"0.1.0": up})
    with SeriesReader(run) as r:
        assert _as_json(ms.load_monitor(r, label)) == json.dumps(want[label], sort_keys=True)
    assert seen == [ms.monitor_key(label)]
    with h5py.File(run / SERIES_NAME, "r+") as f:
        f[f"series/{ms.monitor_key(label)}"].attrs.update({"result-type": ms.RESULT_TYPE, "result-version": "1.0.0"})
    with SeriesReader(run) as r, pytest.raises(StoreError, match="written by a newer aclarena") as e:
        ms.load_monitor(r, label)
    assert "\n" not in str(e.value) and f"series/{ms.monitor_key(label)}" in str(e.value)


# --- adding a field: a test-local flips 0.2.0 with one more attribute and its upgrade from 0.1.0 -------------


@dataclasses.dataclass(frozen=True)
class FlipsWithReviewer(flips.FlipsData):
    reviewer: str = ""


def _encode_v2(p: FlipsWithReviewer) -> tuple[dict, dict]:
    data, attrs = flips.encode(p)
    return data, attrs | {"reviewer": p.reviewer}


def _decode_v2(s: registry.Stored) -> FlipsWithReviewer:
    base = flips.decode(s)
    return FlipsWithReviewer(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                             reviewer=str(s.attrs["reviewer"]))


def _v2(upgrades: dict) -> registry.ResultType:
    return registry.ResultType(name="flips", version="0.2.0", payload=FlipsWithReviewer, encode=_encode_v2,
                               decode=_decode_v2, upgrades=upgrades)


FROM_0_1 = {"0.1.0": lambda s: s.upgraded("0.2.0", attrs={"reviewer": "nobody (written before 0.2.0)"})}
KEY = "flips/seq-math/seq-search/math-id"


def test_a_new_field_reads_the_archived_older_file_through_its_upgrade(tmp_path, monkeypatch):
    run, want = _archived("flips", "0.1.0", tmp_path)
    monkeypatch.setitem(registry._REGISTRY, "flips", _v2(FROM_0_1))
    with ResultsStore(run).reader() as r:
        got = flips.read_flips_data(r, KEY)  # the readers of the figures, the page and export
    assert isinstance(got, FlipsWithReviewer) and got.reviewer == "nobody (written before 0.2.0)"
    old = plain(got)
    assert old.pop("reviewer") == got.reviewer
    assert json.dumps(old, sort_keys=True) == json.dumps(want[KEY], sort_keys=True)
    # the new version writes the field and reads it back
    flips.write_flips(run, dataclasses.replace(got, reviewer="ada"))
    store = ResultsStore(run)
    assert store.attrs(KEY)["result-version"] == "0.2.0" and store.attrs(KEY)["reviewer"] == "ada"
    with store.reader() as r:
        assert flips.read_flips_data(r, KEY).reviewer == "ada"
    # and the 0.1.0 reader still reads a 0.2.0 result (a newer minor only adds)
    monkeypatch.setitem(registry._REGISTRY, "flips", flips.FLIPS)
    with store.reader() as r:
        back = flips.read_flips_data(r, KEY)
    assert type(back) is flips.FlipsData and _as_json(back) == json.dumps(want[KEY], sort_keys=True)


def test_a_new_field_without_an_upgrade_is_one_line(tmp_path, monkeypatch):
    run, _ = _archived("flips", "0.1.0", tmp_path)
    monkeypatch.setitem(registry._REGISTRY, "flips", _v2({}))
    with ResultsStore(run).reader() as r, pytest.raises(StoreError, match="result version 0.1.0 cannot be read") as e:
        flips.read_flips_data(r, KEY)
    assert "\n" not in str(e.value) and f"{run / 'results.h5'}:{KEY}" in str(e.value) and "damaged" not in str(e.value)


def test_a_new_major_version_is_written_once_registered_and_refused_by_the_old_reader(tmp_path, monkeypatch):
    run, want = _archived("flips", "0.1.0", tmp_path)
    monkeypatch.setitem(registry._REGISTRY, "flips", flips.FLIPS)  # both restored after the test
    monkeypatch.setitem(RESULT_MAJORS, "flips", 0)
    v1 = registry.ResultType(name="flips", version="1.0.0", payload=FlipsWithReviewer, encode=_encode_v2,
                             decode=_decode_v2, upgrades={**FROM_0_1, "0.2.0": lambda s: s.upgraded("1.0.0")})
    registry.register(v1)
    assert RESULT_MAJORS["flips"] == 1
    with ResultsStore(run).reader() as r:
        got = flips.read_flips_data(r, KEY)  # 0.1.0 -> 0.2.0 -> 1.0.0
    assert isinstance(got, FlipsWithReviewer) and got.reviewer.startswith("nobody")
    flips.write_flips(run, got)
    assert ResultsStore(run).attrs(KEY)["result-version"] == "1.0.0"
    registry.register(flips.FLIPS)  # an aclarena that reads flips 0.x
    RESULT_MAJORS["flips"] = 0
    with ResultsStore(run).reader() as r, pytest.raises(StoreError, match="written by a newer aclarena"):
        flips.read_flips_data(r, KEY)


def test_an_upgrade_must_come_from_an_older_version():
    with pytest.raises(ValueError, match="not from an older version"):
        _v2({"0.2.0": FROM_0_1["0.1.0"]})


# --- reading one part of a large result: one summary view of the archived task vectors ------------------------


def test_one_view_read_alone_is_that_view_of_the_whole(tmp_path):
    from aclarena.results import vectors

    run, want = _archived("task-vector-summary", "0.1.0", tmp_path)
    with ResultsStore(run).reader() as r:
        whole = vectors.read_vectors_summary(r)
        alone = {view: vectors.read_vectors_view(r, view) for view in vectors.VIEWS}
        part = registry.read_part(r, vectors.SUMMARY_KEY, vectors.SUMMARY_TYPE, ["no-embeddings"])
    assert whole is not None and set(whole.views) == set(vectors.VIEWS)
    assert all(_as_json(alone[v]) == _as_json(whole.views[v]) for v in vectors.VIEWS)
    assert list(part.views) == ["no-embeddings"] and part.fingerprint == whole.fingerprint
    assert _as_json(whole) == json.dumps(want[vectors.SUMMARY_KEY], sort_keys=True)
    with ResultsStore(run).reader() as r, pytest.raises(StoreError, match="holds a 'task-vector-summary' result"):
        registry.read_part(r, vectors.SUMMARY_KEY, vectors.GRAM_TYPE, ["all"])


def test_a_displacement_summary_written_before_ratio_excluded_reads_and_writes_back_without_it(tmp_path):
    """docs/store-format.md: ``ratio_excluded`` MAY be absent (summaries written before 2026-12-01)."""
    import h5py

    from aclarena.results import displacement

    run, want = _archived("displacement-summary", "0.1.0", tmp_path)
    with h5py.File(run / "results.h5", "r+") as f:
        for view in displacement.VIEWS:
            del f[f"{displacement.SUMMARY_KEY}/{view}/ratio_excluded"]
    with ResultsStore(run).reader() as r:
        got = displacement.read_displacement_summary(r)
        alone = displacement.read_displacement_view(r, "no-embeddings")
    assert got is not None and alone is not None and alone.ratio_excluded is None
    assert all(v.ratio_excluded is None for v in got.views.values())
    read_back, archived = plain(got.views["all"]), dict(want[displacement.SUMMARY_KEY]["views"]["all"])
    assert read_back.pop("ratio_excluded") is None and archived.pop("ratio_excluded")
    assert json.dumps(read_back, sort_keys=True) == json.dumps(archived, sort_keys=True)
    displacement.write_displacement_summary(run, got)
    with ResultsStore(run).reader() as r:
        assert not r.has(f"{displacement.SUMMARY_KEY}/all/ratio_excluded")
        assert _as_json(displacement.read_displacement_summary(r)) == _as_json(got)


def test_each_kind_of_consolidation_record_reads_back_as_its_kind(tmp_path):
    from aclarena.results import consolidation as c

    run, _ = _archived("consolidation", "0.1.0", tmp_path)
    with ResultsStore(run).reader() as r:
        kinds = {p.name: type(p) for p in c.list_consolidations(r)}
        sdft, mle = c.read_consolidation(r, "sdft"), c.read_consolidation(r, "mle")
        expert = c.read_consolidation(r, "mle-math")
    assert kinds == {"sdft": c.CheckpointRecord, "merge-uniform": c.CheckpointRecord, "fix": c.RepairRecord,
                     "mle": c.MleRecord, **{f"mle-{d}": c.CheckpointRecord for d in ("math", "search", "ecom", "if")}}
    assert isinstance(expert, c.CheckpointRecord) and expert.log is not None
    assert expert.log["step"].dtype == np.int64 and expert.log["loss"].dtype == np.float64 and expert.summary is None
    assert isinstance(sdft, c.CheckpointRecord) and isinstance(sdft.summary, dict) and "kept" in sdft.summary
    assert isinstance(mle, c.MleRecord) and mle.backbone == "sdft"
    assert set(mle.experts) == {"math", "search", "ecom", "if"}
