"""The store's readers on structurally wrong results.h5 files (issue 15): an element with a
non-numeric or newer version (lazily read ragged arrays included), offsets past the data, datasets of
another type or shape, attributes of the wrong type. Every reader answers or raises AclarenaError
with one line; nothing else. Plus NUL characters in stored text (escaped, read back exactly)."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclarena.errors import AclarenaError
from aclarena.figures.flips import distributions_figure, divergence_figure, recovery_figure
from aclarena.results.capability import load_matrix, read_cell, read_cells, read_items
from aclarena.results.flips import list_flips, read_flips_data
from aclarena.results.probes import ProbeSet, read_probe_set, write_probe_set
from aclarena.store import Json, Ragged, ResultsStore, Table

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


def _build(run: Path) -> None:
    from capability_helpers import write_fixture_matrix

    run.mkdir(parents=True, exist_ok=True)
    probe = ProbeSet(name="p", reference="seq-math", ids=[np.array([1, 2, 3]), np.array([4, 5])],
                     scored=[np.array([False, True, True]), np.array([False, True])], texts=["abc", "de"],
                     token_text=[["a", "b", "c"], ["d", "e"]], sources=[{"prompt": "x"}, {"prompt": "y"}],
                     settings={"source": "prompts"}, vocab=["<0>", "a", "b", "c", "d", "e"])
    write_probe_set(ResultsStore(run), probe)
    write_fixture_matrix(run)
    ResultsStore(run).write("tokens/p/scores/seq-search", {
        "kl": Ragged.from_rows([np.array([0.1, 0.2]), np.array([0.3])], dtype=np.float32),
        "table": Table({"name": ["a", "b"], "x": np.array([1.0, 2.0])}),
        "summary": Json({"kl_mean": 0.2}), "note": "text", "n": 3,
    }, result_type="token-scores", attrs={"settings": {"probe": "p"}})
    from flips_helpers import hand_made_result, write_result

    write_result(run, hand_made_result())
    # a routing report of a real router and an MLE record (what `consolidate --method mle` writes)
    from aclarena.consolidate.contexts import evaluation_contexts
    from aclarena.consolidate.router_eval import evaluate_router
    from aclarena.consolidate.routers import RuleRouter
    from aclarena.results.routing import write_routing

    experts = ("math", "search", "ecom", "if")
    report = evaluate_router(RuleRouter(experts), evaluation_contexts(experts, n=3, seed=1))
    write_routing(run, report.payload(fingerprint="f"))
    routes = {"rule": {"math/id": {"expert": "math", "checkpoint": "mle-math", "reason": "tools"},
                       "if/id": {"expert": None, "checkpoint": "sdft", "reason": "no expert"},
                       "search/id": {"expert": None, "checkpoint": None, "reason": "refused"}}}
    ResultsStore(run).write("consolidate/mle", {"routes": Json(routes), "experts": Json({"math": "mle-math"}),
                                                "backbone": Json("sdft")}, result_type="consolidation",
                            attrs={"method": "mle", "replicate": 0, "seed": 0, "fallback": "backbone"})


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("store-fuzz") / "run"
    _build(run)
    return run / "results.h5"


def _objects(path: Path) -> list[str]:
    names: list[str] = []
    with h5py.File(path, "r") as f:
        f.visit(names.append)
    return sorted(names)


BAD_VERSIONS = ["abc", "9.0.0", "", "1", "0.x.0", "0.2", 7, np.array([1, 2]), b"\xff\xfe", "0.2.0\n", "00000000000000.1.0"]
BAD_TYPES = ["array", "ragged-array", "dict", "json", "table", "string", "string-array", "numeric-scalar", "nope", 5]
BAD_DATA = [np.array([1.5, 2.5]), np.array([-1, 99999]), np.zeros((2, 2)), np.array(7), "x", np.array([], dtype=np.int64),
            np.array([True]), np.array([3, 1, 2])]
BAD_ATTRS = ["[", 7, "abc", "{}", "[1, 2]", -1.5, np.array([1, 2]), "nan", ""]
ATTR_NAMES = ["reference", "settings", "n_items", "n_seeds", "samples", "mean", "std", "column-order", "status",
              "checkpoint", "suite", "domain", "result-type", "digest", "computed_at", "avg_k_mean", "early", "late",
              "relation", "n_items"]

MUTATION = st.one_of(
    st.tuples(st.just("version"), st.integers(0, 10**6), st.sampled_from(range(len(BAD_VERSIONS)))),
    st.tuples(st.just("type"), st.integers(0, 10**6), st.sampled_from(range(len(BAD_TYPES)))),
    st.tuples(st.just("drop-attr"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("data"), st.integers(0, 10**6), st.sampled_from(range(len(BAD_DATA)))),
    st.tuples(st.just("attr"), st.integers(0, 10**6), st.tuples(st.sampled_from(range(len(ATTR_NAMES))),
                                                                st.sampled_from(range(len(BAD_ATTRS))))),
)


def _mutate(path: Path, ops: list, prefix: str = "") -> None:
    with h5py.File(path, "r+") as f:
        for op, i, arg in ops:
            names = []
            f.visit(names.append)
            names = [n for n in names if n.startswith(prefix)]
            if not names:
                return
            name = sorted(names)[i % len(names)]
            obj = f[name]
            if op == "version":
                obj.attrs["encoding-version"] = BAD_VERSIONS[arg]
            elif op == "type":
                obj.attrs["encoding-type"] = BAD_TYPES[arg]
            elif op == "drop-attr":
                if "encoding-type" in obj.attrs:
                    del obj.attrs["encoding-type"]
            elif op == "delete":
                del f[name]
            elif op == "data":
                attrs = {k: obj.attrs[k] for k in ("encoding-type", "encoding-version") if k in obj.attrs}
                del f[name]
                value = BAD_DATA[arg]
                ds = f.create_dataset(name, data=value, dtype=h5py.string_dtype() if isinstance(value, str) else None)
                for k, v in attrs.items():
                    # an earlier mutation's undecodable bytes
                    with contextlib.suppress(UnicodeError, TypeError, ValueError):
                        ds.attrs[k] = v
            else:
                key, val = arg
                obj.attrs[ATTR_NAMES[key]] = BAD_ATTRS[val]


def _read_everything(run: Path) -> None:
    store = ResultsStore(run)
    with store.reader() as r:
        for key in r.results():
            for child in r.keys(key):
                full = f"{key}/{child}"
                r.read(full)
                enc = r.encoding(full)
                if enc[0] == "ragged-array":
                    view = r.ragged(full)
                    for i in range(view.n_rows):
                        view.row(i)
            r.attrs(key)
        cells = read_cells(r)
        for c in cells:
            read_items(r, c)
            read_cell(r, c.key)
        load_matrix(r, None)
        for found in list_flips(r):
            read_flips_data(r, found["key"])
        _read_routing(r, figures=False)
    read_probe_set(store, "p")
    read_probe_set(store, "p", with_text=False)


def _read_routing(r, figures: bool = True) -> None:
    """The Router page's and `export`'s readers (and figures), and `compare`'s MLE routes."""
    from aclarena.figures.consolidation import confusion_heatmap, router_accuracy
    from aclarena.results.comparison import read_mle_routes
    from aclarena.results.routing import read_reports

    reports = read_reports(r)
    if reports and figures:
        router_accuracy(reports)
        for name, rep in reports.items():
            confusion_heatmap(name, rep)
    for rec in read_mle_routes(r).values():
        for suites in rec["routes"].values():
            for route in suites.values():
                assert route["checkpoint"] is None or isinstance(route["checkpoint"], str)  # what compare reads


def test_the_undamaged_store_reads(template, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(template, run / "results.h5")
    _read_everything(run)


@FUZZ
@given(st.lists(MUTATION, min_size=1, max_size=3))
def test_every_reader_answers_or_says_one_line(template, tmp_path_factory, ops):
    run = tmp_path_factory.mktemp("fuzz")
    shutil.copyfile(template, run / "results.h5")
    _mutate(run / "results.h5", ops)
    try:
        _read_everything(run)
    except AclarenaError as e:
        msg = str(e).strip()
        assert msg and "\n" not in msg, msg


@FUZZ
@given(st.lists(MUTATION, min_size=1, max_size=3))
def test_the_flips_reader_answers_or_says_one_line(template, tmp_path_factory, ops):
    """The flips result (issue 17) damaged where it lies: every reader of it, one line or the data."""
    run = tmp_path_factory.mktemp("flips")
    shutil.copyfile(template, run / "results.h5")
    _mutate(run / "results.h5", ops, prefix="flips")
    try:
        with ResultsStore(run).reader() as r:
            for found in list_flips(r):
                d = read_flips_data(r, found["key"])
                assert isinstance(d.settings, dict) and isinstance(d.summary, dict)
                # what passes the reader, the page's and export's figure builders draw
                recovery_figure(d), divergence_figure(d)
                for item in d.items:
                    distributions_figure(item)
                for name in ("forward", "reverse"):
                    c = d.curve(name)
                    assert c is None or all(c[k].shape == (len(c["items"]), len(c["budgets"]))
                                            for k in ("kl", "random", "swaps_kl", "swaps_random"))
    except AclarenaError as e:
        msg = str(e).strip()
        assert msg and "\n" not in msg, msg


@pytest.fixture(scope="module")
def token_template(tmp_path_factory) -> Path:
    """The archived token results (tests/data/archives/results/token-*), the three types in one store."""
    archives = Path(__file__).resolve().parents[1] / "data" / "archives" / "results"
    run = tmp_path_factory.mktemp("token-fuzz") / "run"
    run.mkdir()
    shutil.copyfile(archives / "token-reference-0.1.0" / "results.h5", run / "results.h5")
    with h5py.File(run / "results.h5", "r+") as dst:
        for kind in ("scores", "summary"):
            with h5py.File(archives / f"token-{kind}-0.1.0" / "results.h5", "r") as src:
                src.copy(src[f"tokens/seq-math/{kind}"], dst["tokens/seq-math"], name=kind)
    return run / "results.h5"


@FUZZ
@given(st.lists(MUTATION, min_size=1, max_size=3))
def test_the_token_readers_answer_or_say_one_line(token_template, tmp_path_factory, ops):
    """The token results damaged where they lie: their readers (whole payloads, the summary rows the Tokens page and
    `export` read, the scores' attributes), one line or the data."""
    from aclarena.results import tokens

    run = tmp_path_factory.mktemp("tokens")
    shutil.copyfile(token_template, run / "results.h5")
    _mutate(run / "results.h5", ops, prefix="tokens")
    try:
        with ResultsStore(run).reader() as r:
            for probe in tokens.list_probes(r):
                ref = tokens.read_reference(r, probe)
                assert ref.topk_ids.shape == ref.topk_logprobs.shape and len(ref.offsets) >= 1
                tokens.reference_name(r, probe)
                for ck in tokens.list_checkpoints(r, probe):
                    sc = tokens.read_scores(r, probe, ck)
                    assert all(len(getattr(sc, f)) == int(sc.offsets[-1]) for f in tokens.SCORE_FIELDS)
                    assert isinstance(tokens.read_scores_meta(r, probe, ck).n_nonfinite, int)
                rows = tokens.summary_rows(r, probe, with_flags=True)
                assert all(isinstance(row["curve_x"], list) for row in rows)
    except AclarenaError as e:
        msg = str(e).strip()
        assert msg and "\n" not in msg, msg


@FUZZ
@given(st.sampled_from(["chance", "curves", "cost", "curves/forward", "curves/forward/kl",
                        "curves/forward/kl/share", "chance/forgot", "chance/forgot/share"]),
       st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=3), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.sampled_from(["share", "low", "high", "n", "kl"]), st.integers(), max_size=3)))
def test_the_flips_summary_json_answers_or_says_one_line(template, tmp_path_factory, path, value):
    """The summary JSON damaged inside (a value replaced at a path): the reader refuses it in one line, or
    the figures of the Flips page and `export` draw what it read."""
    run = tmp_path_factory.mktemp("summary")
    shutil.copyfile(template, run / "results.h5")
    with ResultsStore(run).reader() as r:
        key = list_flips(r)[0]["key"]
    with h5py.File(run / "results.h5", "r+") as f:
        summary = json.loads(f[f"{key}/summary"][()])
        *parents, last = path.split("/")
        node = summary
        for part in parents:
            node = node[part]
        node[last] = value
        attrs = dict(f[f"{key}/summary"].attrs)
        del f[f"{key}/summary"]
        f.create_dataset(f"{key}/summary", data=json.dumps(summary), dtype=h5py.string_dtype()).attrs.update(attrs)
    try:
        with ResultsStore(run).reader() as r:
            d = read_flips_data(r, key)
    except AclarenaError as e:
        assert "\n" not in str(e) and "is damaged" in str(e), e
        return
    recovery_figure(d), divergence_figure(d)


@FUZZ
@given(st.sampled_from(["routing", "consolidate"]), st.lists(MUTATION, min_size=1, max_size=3))
def test_the_routing_readers_answer_or_say_one_line(template, tmp_path_factory, prefix, ops):
    """Routing reports and MLE routes damaged where they lie: the readers say one line, or the
    Router page's figures and `compare` read what they returned."""
    run = tmp_path_factory.mktemp("routing")
    shutil.copyfile(template, run / "results.h5")
    _mutate(run / "results.h5", ops, prefix=prefix)
    try:
        with ResultsStore(run).reader() as r:
            _read_routing(r)
    except AclarenaError as e:
        msg = str(e).strip()
        assert msg and "\n" not in msg, msg


ROUTING_DAMAGES = {
    "labels a number": ("routing/rule/labels", "5"),
    "labels fewer than the confusion's rows": ("routing/rule/labels", '["math"]'),
    "confusion 1-d": ("routing/rule/confusion", np.arange(5)),
    "confusion of text": ("routing/rule/confusion", np.array([b"a", b"b"])),
    "mixed a list": ("routing/rule/mixed", "[1]"),
    "routes a list": ("consolidate/mle/routes", "[1]"),
    "routes of a router a list": ("consolidate/mle/routes", '{"rule": [1]}'),
    "route of a suite a string": ("consolidate/mle/routes", '{"rule": {"math/id": "x"}}'),
    "replicate text": ("consolidate/mle", "abc"),
    "replicate a fraction": ("consolidate/mle", 1.5),
}


@pytest.mark.parametrize("what", list(ROUTING_DAMAGES))
def test_routing_results_of_the_wrong_shape(template, tmp_path, what):
    """Each was a traceback in the Router page, `export` or `compare` (TypeError, AttributeError,
    ValueError), or a figure drawn from a confusion matrix that does not fit its labels."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(template, run / "results.h5")
    name, value = ROUTING_DAMAGES[what]
    with h5py.File(run / "results.h5", "r+") as f:
        if name == "consolidate/mle":
            f[name].attrs["replicate"] = value
        else:
            _replace(f, name, value)
    with ResultsStore(run).reader() as r, pytest.raises(AclarenaError, match="is damaged") as e:
        _read_routing(r)
    assert "\n" not in str(e.value) and name.rsplit("/", 1)[0] in str(e.value)


def _replace(f: h5py.File, name: str, value: object) -> None:
    """Put ``value`` where the element ``name`` was, keeping its encoding attributes."""
    attrs = dict(f[name].attrs)
    del f[name]
    kw = {"dtype": h5py.string_dtype()} if isinstance(value, str) else {}
    f.create_dataset(name, data=value, **kw).attrs.update(attrs)


def _edit_summary(fn):
    def apply(f: h5py.File, key: str) -> None:
        summary = json.loads(f[f"{key}/summary"][()])
        fn(summary)
        _replace(f, f"{key}/summary", json.dumps(summary))

    return apply


def _drop_kl_column(f: h5py.File, key: str) -> None:  # a table that decodes, without a column the page reads
    g = f[f"{key}/items"]
    g.attrs["column-order"] = json.dumps([c for c in json.loads(g.attrs["column-order"]) if c != "kl"])
    del g["kl"]


FLIPS_DAMAGE = {
    "settings not JSON": lambda f, k: f[k].attrs.__setitem__("settings", "["),
    "settings a list": lambda f, k: f[k].attrs.__setitem__("settings", "[1]"),
    "settings a number": lambda f, k: f[k].attrs.__setitem__("settings", 5),
    "settings top a string": lambda f, k: f[k].attrs.__setitem__("settings", json.dumps({"top": "0.06"})),
    "top-k not JSON": lambda f, k: _replace(f, f"{k}/items/e_topk", np.array([b"[", b"x", b"y"])),
    "top-k a number": lambda f, k: _replace(f, f"{k}/items/e_topk", np.array([b"5", b"5", b"5"])),
    "offsets past the pieces": lambda f, k: _replace(f, f"{k}/e_offsets", np.array([0, 2, 99, 100], dtype=np.int64)),
    "offsets too few": lambda f, k: _replace(f, f"{k}/e_offsets", np.array([0], dtype=np.int64)),
    "more trajectory items than offsets": lambda f, k: _replace(f, f"{k}/trajectory_items",
                                                                np.array([b"a", b"b", b"c", b"d", b"e"])),
    "budgets of text": lambda f, k: _replace(f, f"{k}/forward/budgets", np.array([b"a", b"b", b"c"])),
    "curve of the wrong shape": lambda f, k: _replace(f, f"{k}/forward/kl", np.zeros((5,), np.int8)),
    "summary a list": lambda f, k: _replace(f, f"{k}/summary", "[1, 2]"),
    "summary curves a list": _edit_summary(lambda d: d.__setitem__("curves", [1])),
    "summary curve of unequal lists": _edit_summary(lambda d: d["curves"]["forward"]["kl"]["share"].append(0.5)),
    "summary chance share a string": _edit_summary(lambda d: d["chance"]["forgot"].__setitem__("share", "0.5")),
    "items without a column": _drop_kl_column,
    "items of an unknown direction": lambda f, k: _replace(f, f"{k}/items/direction",
                                                           np.array([b"forgot", b"sideways", b"gained"])),
}


def _flips_damage(f: h5py.File, key: str, what: str) -> None:
    FLIPS_DAMAGE[what](f, key)


FLIPS_DAMAGES = list(FLIPS_DAMAGE)


@pytest.mark.parametrize("what", FLIPS_DAMAGES)
def test_flips_result_of_the_wrong_shape(template, tmp_path, what):
    """Each was a traceback (JSONDecodeError, IndexError, TypeError) or a silently wrong read."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(template, run / "results.h5")
    with ResultsStore(run).reader() as r:
        key = list_flips(r)[0]["key"]
    with h5py.File(run / "results.h5", "r+") as f:
        _flips_damage(f, key, what)
    with ResultsStore(run).reader() as r, pytest.raises(AclarenaError, match="is damaged") as e:
        read_flips_data(r, key)
    assert "\n" not in str(e.value) and key in str(e.value)


def _set_attr(run: Path, key: str, name: str, value: object) -> None:
    with h5py.File(run / "results.h5", "r+") as f:
        f[key].attrs[name] = value


@pytest.mark.parametrize("version, needle", [("abc", "not MAJOR.MINOR.PATCH"), ("x.1.0", "not MAJOR.MINOR.PATCH"),
                                             ("7.0.0", "newer aclarena")])
@pytest.mark.parametrize("lazy", [False, True], ids=["read", "lazy"])
def test_ragged_array_of_a_bad_or_newer_version(template, tmp_path, version, needle, lazy):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(template, run / "results.h5")
    key = "tokens/p/scores/seq-search/kl"
    _set_attr(run, key, "encoding-version", version)
    with ResultsStore(run).reader() as r, pytest.raises(AclarenaError, match=needle):
        r.ragged(key) if lazy else r.read(key)


@pytest.mark.parametrize("offsets", [[0, 2, 9], [0, 3, 1], [1, 2, 3], [0.0, 2.0, 3.0]],
                         ids=["past the data", "decreasing", "not from 0", "floats"])
@pytest.mark.parametrize("lazy", [False, True], ids=["read", "lazy"])
def test_offsets_that_do_not_fit_the_data(template, tmp_path, offsets, lazy):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(template, run / "results.h5")
    key = "tokens/p/scores/seq-search/kl"
    with h5py.File(run / "results.h5", "r+") as f:
        attrs = dict(f[f"{key}/offsets"].attrs)
        del f[f"{key}/offsets"]
        f[f"{key}/offsets"] = np.asarray(offsets)
        f[f"{key}/offsets"].attrs.update(attrs)
    with ResultsStore(run).reader() as r, pytest.raises(AclarenaError, match="offsets"):
        r.ragged(key).row(1) if lazy else r.read(key)


def test_text_with_nul_characters_is_stored_escaped_and_read_back_exactly(tmp_path):
    import dataclasses

    from aclarena.results.capability import cell_payload, read_cell, write_cells

    texts = ["a\x00b", "back\\slash \\0 and \x00\x00", "plain"]
    cell = cell_payload(checkpoint="m", suite="math/id", domain="math", role="id", source="arena",
                        settings={"n": 3}, greedy=np.array([[1.0, 0.0, 1.0]]), item_ids=["1", "2", "3"],
                        transcripts=texts)
    store = ResultsStore(tmp_path)
    write_cells(store, [dataclasses.replace(cell, error="x\x00y")])
    store.write("misc", {"one": "nul\x00here", "table": Table({"t": ["\x00", "ok"]})}, result_type="misc")
    with store.reader() as r:
        key = r.results("capability")[0]
        assert r.read(f"{key}/transcripts") == texts
        assert r.read("misc/one") == "nul\x00here"
        assert r.read("misc/table").columns["t"] == ["\x00", "ok"]
        assert r.attrs(key)["error"] == "x\u2400y"  # attributes (one-line notes): shown as the NUL symbol
        assert read_cell(r, key).transcripts == texts


def test_a_symlinked_store_is_written_through_and_stays_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    ResultsStore(elsewhere).write("a", {"x": np.arange(3)}, result_type="t")
    (run / "results.h5").symlink_to(elsewhere / "results.h5")
    store = ResultsStore(run)
    store.write("b", {"y": np.arange(4)}, result_type="t")
    assert (run / "results.h5").is_symlink()
    assert list(ResultsStore(elsewhere).read("b/y")) == [0, 1, 2, 3]  # the target holds the new result
    store.delete("a")
    assert (run / "results.h5").is_symlink() and not ResultsStore(elsewhere).has("a")
    assert not [p for p in elsewhere.iterdir() if p.suffix == ".tmp"]  # no temporary file left there
    assert sorted(p.name for p in run.iterdir()) == ["results.h5", "results.h5.lock"]


def test_a_dangling_symlinked_store_is_refused_and_left_alone(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.h5").symlink_to(tmp_path / "gone" / "results.h5")
    store = ResultsStore(run)
    with pytest.raises(AclarenaError, match="symbolic link to .* which does not exist"):
        store.write("b", {"y": np.arange(4)}, result_type="t")
    with pytest.raises(AclarenaError, match="does not exist"), store.reader():
        pass
    assert (run / "results.h5").is_symlink() and not (tmp_path / "gone").exists()


@pytest.mark.parametrize("damage, needle", [("newer", "newer aclarena"), ("version", "not MAJOR.MINOR.PATCH"),
                                            ("column", "damaged")])
def test_monitor_series_of_a_newer_version_or_a_missing_column(tmp_path, damage, needle):
    from aclarena.store.series import SERIES_NAME, SeriesWriter, read_series

    with SeriesWriter(tmp_path, {"monitor/a/train": {"step": "i8", "kl": "f8"}}) as w:
        w.append("monitor/a/train", [{"step": i, "kl": 1.0} for i in range(3)])
    with h5py.File(tmp_path / SERIES_NAME, "r+") as f:
        g = f["series/monitor/a/train"]
        if damage == "newer":
            g.attrs["encoding-version"] = "1.0.0"
        elif damage == "version":
            g.attrs["encoding-version"] = "one"
        else:
            g.attrs["column-order"] = "step,kl,gone"
    with read_series(tmp_path) as r, pytest.raises(AclarenaError, match=needle):
        r.read("monitor/a/train")


def test_result_type_that_is_not_a_string(template, tmp_path):
    """Found by the fuzzing: an array where `result-type` should be a string made every reader that
    compares it (capability cells, flips, routing) fail with numpy's "truth value is ambiguous"."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(template, run / "results.h5")
    with ResultsStore(run).reader() as r:
        key = r.results("capability")[0]
    _set_attr(run, key, "result-type", np.array([1, 2]))
    with ResultsStore(run).reader() as r, pytest.raises(AclarenaError, match="result-type .* not a string"):
        read_cells(r)


@pytest.mark.parametrize("raw", [b"[1, 2]", b"5", b"\"every\"", b"{", b"[" * 3000])
def test_monitor_session_settings_that_are_not_an_object(tmp_path, raw):
    """A session's settings of another JSON shape read as none (was: a list or a number handed to readers
    that call `settings.get`, e.g. `aclarena-diag monitor`)."""
    from aclarena.results.monitor_series import SESSION_COLUMNS, load_monitor
    from aclarena.store.series import SeriesWriter, read_series

    with SeriesWriter(tmp_path, {"monitor/a/sessions": SESSION_COLUMNS}) as w:
        w.append("monitor/a/sessions", [{"session": 0, "step": 0, "time": 1.0, "settings": raw}])
    with read_series(tmp_path) as r:
        view = load_monitor(r, "a")
    assert view.sessions == 1 and view.settings == {}
    assert view.settings.get("every_n_steps", "?") == "?"


@pytest.fixture(scope="module")
def log_template(tmp_path_factory) -> Path:
    """The archived training logs and lead-time result (tests/data/archives/results/train-log-*,
    monitor-lead-time-*), both in one store."""
    archives = Path(__file__).resolve().parents[1] / "data" / "archives" / "results"
    run = tmp_path_factory.mktemp("log-fuzz") / "run"
    run.mkdir()
    shutil.copyfile(archives / "train-log-0.1.0" / "results.h5", run / "results.h5")
    with h5py.File(run / "results.h5", "r+") as dst, \
            h5py.File(archives / "monitor-lead-time-0.1.0" / "results.h5", "r") as src:
        dst.create_group("monitor")
        src.copy(src["monitor/lead-time"], dst["monitor"], name="lead-time")
    return run / "results.h5"


@FUZZ
@given(st.sampled_from(["train", "monitor"]), st.lists(MUTATION, min_size=1, max_size=3))
def test_the_train_log_and_lead_time_readers_answer_or_say_one_line(log_template, tmp_path_factory, prefix, ops):
    """The training logs and the lead-time results damaged where they lie: their readers (the Monitor page's,
    `export`'s, a rerun's), one line or the data."""
    from aclarena.figures.monitor import lead_time_rows
    from aclarena.results import lead_time, train_log

    run = tmp_path_factory.mktemp("logs")
    shutil.copyfile(log_template, run / "results.h5")
    _mutate(run / "results.h5", ops, prefix=prefix)
    try:
        with ResultsStore(run).reader() as r:
            for log in train_log.read_train_logs(r).values():
                assert isinstance(log.settings, dict) and all(len(v) == len(log.log["step"]) for v in log.log.values())
            for result in lead_time.lead_time_results(r).values():
                assert isinstance(lead_time_rows(result), list)
    except AclarenaError as e:
        msg = str(e).strip()
        assert msg and "\n" not in msg, msg
