"""Issue 33, trust second round, one class per section: a name is checked before anything is written;
config.json is checked against the safetensors headers; library errors end in one line; pickles that
torch's weights_only refuses are not loadable; hub ids resolve from the local cache only; stored results
of a newer major version are refused; the dashboard shows a damaged store's line inside the page.

Every test here failed on the code before the change (checked against main at 2f42103 / a7087bc)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from distributed_helpers import file_hash
from reliability_helpers import VERB_ARGV, fill, one_line, seed_store, tree, truncated_store

from aclarena.errors import AclarenaError
from aclarena.store import ResultsStore

# --- 1. one name check before any write --------------------------------------------------------------

SOURCES = ["--sources", "seq-math,seq-search"]
BAD_NAMES = [
    ("merge-uniform ../../escape", ["--method", "merge-uniform", *SOURCES, "--name", "../../escape"], "../../escape"),
    ("merge-uniform absolute --name", ["--method", "merge-uniform", *SOURCES, "--name", "{outside}/abs"], "abs"),
    ("merge-ta ../escape (derives ../escape-l0.5)",
     ["--method", "merge-ta", "--lambdas", "0.5", *SOURCES, "--name", "../escape"], "../escape"),
    ("merge-ties .hidden", ["--method", "merge-ties", *SOURCES, "--name", ".hidden"], ".hidden"),
    ("merge-dare a/b", ["--method", "merge-dare", *SOURCES, "--name", "a/b"], "a/b"),
    ("merge-uniform over a stage checkpoint", ["--method", "merge-uniform", *SOURCES, "--name", "seq-math"],
     "already a stage checkpoint"),
    ("merge-ta derived name over a stage checkpoint's folder",
     ["--method", "merge-ta", "--lambdas", "1", *SOURCES, "--name", "seq"], "is the folder of checkpoint 'seq-math'"),
    ("mmopd ../escape", ["--method", "mmopd", "--name", "../escape"], "../escape"),
    ("sdft ../escape", ["--method", "sdft", "--name", "../escape"], "../escape"),
    ("mle /abs", ["--method", "mle", "--name", "/abs"], "/abs"),
]


@pytest.mark.parametrize("label, argv, needle", BAD_NAMES, ids=[b[0] for b in BAD_NAMES])
def test_consolidate_checks_every_name_before_writing(fixture_run, tmp_path, cli, label, argv, needle):
    run = fixture_run
    if "folder of checkpoint" in needle:  # a checkpoint whose folder is where merge-ta would write NAME-l1
        (run / "checkpoints" / "seq-math").rename(run / "checkpoints" / "seq-l1")
        text = (run / "aclarena.toml").read_text().replace('path = "checkpoints/seq-math"', 'path = "checkpoints/seq-l1"')
        (run / "aclarena.toml").write_text(text)
    seed_store(run)
    outside = tmp_path / "outside"
    outside.mkdir()
    before, around = tree(run), sorted(p.name for p in tmp_path.iterdir())
    code, _, err = cli("consolidate", *[a.format(outside=outside) for a in argv], "--run", str(run))
    assert code == 1, err
    assert needle in one_line(err, "consolidate")
    assert tree(run) == before  # nothing written in the run: no folder, manifest and results.h5 as they were
    assert sorted(p.name for p in tmp_path.iterdir()) == around and not any(outside.iterdir())
    assert not (tmp_path.parent / "escape").exists() and not (tmp_path / "escape").exists()


def test_output_folder_is_the_one_check(tmp_path):
    """The library check (i35's `repair --name` is wired to it too): valid names and derived names pass,
    anything that would land outside RUN/checkpoints, or through a link, is refused."""
    from aclarena.store.manifest import output_folder

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    assert output_folder(run, "merge-ta-l0.5") == run.absolute() / "checkpoints" / "merge-ta-l0.5"
    for bad in ("..", "../x", "/etc", "a/b", ".x", "", "x\n", "~x", None):
        with pytest.raises(AclarenaError, match="not allowed"):
            output_folder(run, bad)
    (run / "checkpoints" / "link").symlink_to(tmp_path)
    with pytest.raises(AclarenaError, match="symbolic link"):
        output_folder(run, "link")


# --- 2. config.json against the safetensors headers --------------------------------------------------

def _set_config(run: Path, checkpoint: str = "seq-math", **fields: object) -> None:
    f = run / "checkpoints" / checkpoint / "config.json"
    f.write_text(json.dumps(json.loads(f.read_text()) | fields))


CONFIG_LIES = [  # (field = value, needle: the field and the tensor)
    ({"num_hidden_layers": 3}, "`num_hidden_layers` is 3 but the weights have no tensor of layer 2"),
    ({"num_hidden_layers": 1}, "`num_hidden_layers` is 1 but the weights hold layer 1 (model.layers.1."),
    ({"hidden_size": 80}, "`hidden_size` is 80 but model.embed_tokens.weight has shape [512, 64]"),
    ({"vocab_size": 600}, "`vocab_size` is 600 but model.embed_tokens.weight has shape [512, 64]"),
    ({"intermediate_size": 100}, "`intermediate_size` is 100 but model.layers.0.mlp."),
    ({"num_attention_heads": 8}, "`num_attention_heads` x `head_dim` is 8 x 16 = 128 but model.layers.0.self_attn."),
    ({"num_key_value_heads": 4}, "`num_key_value_heads` x `head_dim` is 4 x 16 = 64 but model.layers.0.self_attn."),
    ({"tie_word_embeddings": False}, "`tie_word_embeddings` is false but the weights have no lm_head.weight"),
]
LIE_IDS = [next(iter(f.items()))[0] + "=" + str(next(iter(f.values()))) for f, _ in CONFIG_LIES]


def _rows(cli, run: Path, *extra: str) -> dict[str, dict]:
    code, out, err = cli("checkpoints", "--json", "--run", str(run), *extra)
    assert code == 0, err
    return {r["name"]: r for r in json.loads(out)["checkpoints"]}


@pytest.mark.parametrize("fields, needle", CONFIG_LIES, ids=LIE_IDS)
def test_checkpoints_compares_config_with_the_headers(fixture_run, cli, fields, needle):
    _set_config(fixture_run, **fields)
    rows = _rows(cli, fixture_run)
    assert rows["seq-math"]["loadable"] is False and needle in rows["seq-math"]["problem"], rows["seq-math"]
    assert rows["seq-search"]["loadable"] is True


@pytest.mark.parametrize("fields, needle", [CONFIG_LIES[0], CONFIG_LIES[2], CONFIG_LIES[3]], ids=LIE_IDS[:1] + LIE_IDS[2:4])
def test_tokens_refuses_a_lying_config_in_one_line(fixture_run, tmp_path, cli, fields, needle):
    """Before: `tokens` exit 3 (StrictDataclassClassValidationError) or a 9-19 line LOAD REPORT first."""
    seed_store(fixture_run)
    _set_config(fixture_run, **fields)
    before = file_hash(fixture_run / "results.h5")
    code, out, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    assert needle in one_line(err, "tokens") and "LOAD REPORT" not in out + err
    assert file_hash(fixture_run / "results.h5") == before


def test_sharded_checkpoint_and_adapter_on_a_lying_base(fixture_run, cli):
    """The check reads every shard an index names; an adapter on a base whose config lies is not loadable."""
    folder = fixture_run / "checkpoints" / "seq-search"
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    header = json.loads((folder / "model-00001-of-00001.safetensors").read_bytes()[8:8 + int.from_bytes(
        (folder / "model-00001-of-00001.safetensors").read_bytes()[:8], "little")])
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: "model-00001-of-00001.safetensors" for k in header if k != "__metadata__"}}))
    assert _rows(cli, fixture_run)["seq-search"]["loadable"] is True  # a healthy sharded folder stays loadable
    _set_config(fixture_run, "seq-search", hidden_size=96)
    rows = _rows(cli, fixture_run)
    assert rows["seq-search"]["loadable"] is False and "`hidden_size` is 96" in rows["seq-search"]["problem"]
    assert rows["lora-ecom"]["loadable"] is False and "its base 'seq-search'" in rows["lora-ecom"]["problem"]


def test_untied_and_llama_checkpoints_stay_loadable(llama_run, cli):
    rows = _rows(cli, llama_run)
    assert all(r["loadable"] for r in rows.values()), rows


# --- 3. one loader error path -------------------------------------------------------------------------

def test_a_library_error_is_one_line(fixture_run, tmp_path, cli):
    """A config transformers' own validation refuses (layer_types longer than num_hidden_layers): was exit 3
    with StrictDataclassClassValidationError over two lines."""
    seed_store(fixture_run)
    _set_config(fixture_run, layer_types=["full_attention"] * 3)
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    line = one_line(err, "tokens")
    assert "'seq-math' cannot be loaded" in line and "layer_types" in line, line


def _unsafe_pickle(run: Path) -> None:
    import torch
    from safetensors.torch import load_file

    f = run / "checkpoints" / "seq-math" / "model.safetensors"
    state = load_file(f)
    state["note"] = Path("x")  # a class: torch's weights_only loader refuses it (and the payload never runs)
    torch.save(state, f.parent / "pytorch_model.bin")
    f.unlink()


def test_pickle_weights_only_refuses_is_not_loadable(fixture_run, tmp_path, cli):
    seed_store(fixture_run)
    _unsafe_pickle(fixture_run)
    row = _rows(cli, fixture_run, "--allow-pickle")["seq-math"]
    assert row["loadable"] is False and "weights_only" in row["problem"] and "PosixPath" in row["problem"], row
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path), "--allow-pickle")
    assert code == 1, err
    assert "weights_only" in one_line(err, "tokens")
    assert file_hash(fixture_run / "results.h5") == before


# --- 5. hub ids: the local cache only -----------------------------------------------------------------

def _as_hub_id(run: Path, hub_id: str = "someorg/somemodel") -> None:
    text = (run / "aclarena.toml").read_text().replace('path = "checkpoints/seq-math"', f'path = "{hub_id}"')
    (run / "aclarena.toml").write_text(text)


@pytest.fixture()
def hf_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache this test controls, and no network (HF_HUB_OFFLINE=1)."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_a_hub_id_not_in_the_cache_fails_at_once(fixture_run, tmp_path, cli, hf_cache):
    """Before: `checkpoints` said loadable, and a verb retried for 30 s with 23 retry lines."""
    seed_store(fixture_run)
    _as_hub_id(fixture_run)
    row = _rows(cli, fixture_run)["seq-math"]
    assert row["loadable"] is False and "not in the local Hugging Face cache" in row["problem"], row
    t0 = time.perf_counter()
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    assert "hf download someorg/somemodel" in one_line(err, "tokens")
    assert time.perf_counter() - t0 < 20


def test_a_cached_hub_id_is_inspected_and_loads(fixture_run, cli, hf_cache):
    """Real users' cached ids still work: the snapshot is inspected like a folder (a lying config in it is
    refused) and the model loads from the cache with no network."""
    import shutil

    from aclarena.models.loading import load_model
    from aclarena.store.manifest import load_manifest

    rev = "0123456789abcdef0123456789abcdef01234567"
    repo = hf_cache / "models--someorg--somemodel"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    shutil.copytree(fixture_run / "checkpoints" / "seq-math", repo / "snapshots" / rev)
    _as_hub_id(fixture_run)
    row = _rows(cli, fixture_run)["seq-math"]
    assert row["loadable"] is True and row["source"] == "hub" and row["parameters"] == 131456, row
    model = load_model("seq-math", load_manifest(fixture_run), fixture_run)
    assert sum(p.numel() for p in model.parameters()) > 0
    cfg = repo / "snapshots" / rev / "config.json"
    cfg.write_text(json.dumps(json.loads(cfg.read_text()) | {"vocab_size": 600}))
    row = _rows(cli, fixture_run)["seq-math"]
    assert row["loadable"] is False and "`vocab_size` is 600" in row["problem"], row


# --- 6. stored result versions ------------------------------------------------------------------------

def _mark_version(run: Path, key: str, version: str) -> None:
    import h5py

    with h5py.File(run / "results.h5", "r+") as f:
        f[key].attrs["result-version"] = version


def test_a_probe_set_of_a_newer_major_version_is_refused(fixture_run, tmp_path, cli):
    """Before: `tokens` scored a probe set whose layout it does not know, silently."""
    from aclarena.store.token_keys import probe_key

    code, _, err = cli(*fill(VERB_ARGV["probe"], fixture_run, tmp_path))
    assert code == 0, err
    _mark_version(fixture_run, probe_key("seq-math"), "1.0.0")
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    line = one_line(err, "tokens")
    assert "written by a newer aclarena" in line and "1.0.0" in line and "upgrade aclarena" in line, line
    assert file_hash(fixture_run / "results.h5") == before


def test_every_stored_result_is_read_by_its_version(fixture_run):
    """The check sits in the store's reader, so it holds for every result type: reads, attributes, slices,
    lazy rows and child keys of a newer major are refused; a newer minor is read; listing still works."""
    store = ResultsStore(fixture_run)
    store.write("any/result", {"x": np.arange(4), "nested": {"y": np.ones(2)}}, result_type="anything",
                result_version="0.1.0")
    _mark_version(fixture_run, "any/result", "0.9.0")
    assert store.read("any/result/x").tolist() == [0, 1, 2, 3]
    _mark_version(fixture_run, "any/result", "3.0.0")
    with store.reader() as r:
        assert r.results() == ["any/result"] and r.has("any/result/x")
        for read in (lambda: r.read("any/result/x"), lambda: r.attrs("any/result"), lambda: r.read("any/result"),
                     lambda: r.slice("any/result/x", slice(0, 2)), lambda: r.read("any/result/nested/y"),
                     lambda: r.keys("any/result")):
            with pytest.raises(AclarenaError, match=r"any/result was written by a newer aclarena \(anything result "
                                                    r"version 3.0.0, this one reads 0.x\); upgrade aclarena"):
                read()
    with pytest.raises(AclarenaError, match="newer than this aclarena reads"):
        store.write("any/other", {"x": np.arange(2)}, result_type="anything", result_version="1.0.0")


# --- 4. the dashboard on a damaged results.h5 ---------------------------------------------------------

def _post(client, output: str, inputs: list[dict], changed: str) -> dict:
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in output.strip(".").split("...")]
    r = client.post("/_dash-update-component", json={"output": output, "outputs": outputs if len(outputs) > 1 else
                                                     outputs[0], "inputs": inputs, "changedPropIds": [changed],
                                                     "state": []})
    assert r.status_code == 200, (output, r.status_code, r.get_data(as_text=True)[:300])
    return json.loads(r.get_data(as_text=True))


ERROR_ID = "store-error"  # the page's error line (aclarena.dashboard.app.ERROR_ID), spelled out so that the test
# fails on the old code by its HTTP 500, not by an import


def test_every_dashboard_page_shows_the_store_error(fixture_run):
    """Each page's layout, the navigation and a page callback answer with the store's one line in the page
    (before: HTTP 500 and a traceback per request). Callbacks are called through Dash's own endpoint."""
    import dash

    from aclarena.dashboard import create_app
    from aclarena.dashboard.app import PAGES

    seed_store(fixture_run)
    truncated_store(fixture_run)
    app = create_app(fixture_run)
    client = app.server.test_client()
    line = "results.h5 is truncated or corrupted and cannot be opened"
    pages = {p["module"].rsplit(".", 1)[-1]: p["path"] for p in dash.page_registry.values()}
    shown = {}
    for name in PAGES:
        out = _post(client, ".._pages_content.children..._pages_store.data..",
                    [{"id": "_pages_location", "property": "pathname", "value": pages[name]},
                     {"id": "_pages_location", "property": "search", "value": ""}], "_pages_location.pathname")
        shown[name] = line in json.dumps(out)
    assert shown == dict.fromkeys(PAGES, True), shown
    nav = next(cb for cb in app.callback_map if "nav-run.className" in cb)
    out = _post(client, nav, [{"id": "_pages_location", "property": "pathname", "value": "/"}],
                "_pages_location.pathname")
    assert out["response"][ERROR_ID]["hidden"] is True  # a new page starts without the last page's line
    # a page callback that reads the store: a click on a lineage node of Home
    out = _post(client, "home-lineage-links.children",
                [{"id": "home-lineage", "property": "clickData",
                  "value": {"points": [{"customdata": [0, 0, 0, "seq-math"]}]}}], "home-lineage.clickData")
    assert line in out["sideUpdate"][ERROR_ID]["children"] and out["sideUpdate"][ERROR_ID]["hidden"] is False, out
