"""Every file the toolkit reads, valid JSON (or a valid safetensors frame) of the wrong shape or with
contradicting fields (issue 15): `checkpoints` lists the checkpoint as not loadable with the reason;
the verbs that load it end in one line naming the file, exit 1, results.h5 unchanged (eval: the
documented error cell of an unloadable checkpoint, issue 5)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from distributed_helpers import file_hash
from reliability_helpers import VERB_ARGV, fill, seed_store

CKPT = ("checkpoints", "seq-math")


def _folder(run: Path) -> Path:
    return run.joinpath(*CKPT)


def _read(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _write(path: Path, header: object, data: bytes) -> None:
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def _edit_header(fn: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        f = _folder(run) / "model.safetensors"
        header, data = _read(f)
        _write(f, fn(header), data)

    return apply


def _first_tensor(h: dict) -> str:
    return next(k for k in h if k != "__metadata__")


def _set(field: str, value: object) -> Callable[[dict], dict]:
    def fn(h: dict) -> dict:
        h[_first_tensor(h)][field] = value
        return h

    return fn


def _drop_offsets(h: dict) -> dict:
    del h[_first_tensor(h)]["data_offsets"]
    return h


def _wrong_shape(h: dict) -> dict:
    t = h[_first_tensor(h)]
    t["shape"] = [t["shape"][0] + 1, *t["shape"][1:]]  # more entries than its bytes hold
    return h


def _wrong_dtype(h: dict) -> dict:
    t = h[_first_tensor(h)]
    assert t["dtype"] == "F32"
    t["dtype"] = "F64"
    return h


def _past_end(h: dict) -> dict:
    last = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][1])
    t = h[last]
    n = 1
    for d in t["shape"]:
        n *= d
    t["shape"] = [n * 2]
    t["data_offsets"] = [t["data_offsets"][0], t["data_offsets"][0] + 8 * n]
    return h


def _overlap(h: dict) -> dict:
    names = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
    a, b = h[names[0]], h[names[1]]
    if a["dtype"] == b["dtype"] and a["shape"] == b["shape"]:
        b["data_offsets"] = list(a["data_offsets"])
    else:  # make b a copy of a at a's bytes
        h[names[1]] = dict(a)
    return h


def _sharded(weight_map: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        folder = _folder(run)
        header, _ = _read(folder / "model.safetensors")
        (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
        wm = {k: "model-00001-of-00001.safetensors" for k in header if k != "__metadata__"}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map(wm)}))

    return apply


def _tokenizer(fn: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        f = _folder(run) / "tokenizer.json"
        f.write_text(json.dumps(fn(json.loads(f.read_text()))))

    return apply


def _tok_added_id_str(d: dict) -> dict:
    d["added_tokens"][0]["id"] = "zero"
    return d


def _tok_vocab_list_of_ints(d: dict) -> dict:
    d["model"]["vocab"] = [1, 2, 3]
    return d


def _tok_merges_numbers(d: dict) -> dict:
    d["model"]["merges"] = [1, 2]
    return d


def _config(**fields: object) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        f = _folder(run) / "config.json"
        f.write_text(json.dumps(json.loads(f.read_text()) | fields))

    return apply


def _adapter_config(**fields: object) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        f = run / "checkpoints" / "lora-ecom" / "adapter_config.json"
        f.write_text(json.dumps(json.loads(f.read_text()) | fields))

    return apply


# (id, damage, needle in the one-line error and in `checkpoints`' reason)
BAD_FILES = [
    ("header is a list", _edit_header(lambda h: [h]), "not an object"),
    ("header tensor is a string", _edit_header(lambda h: h | {_first_tensor(h): "x"}), "not an object"),
    ("header without data_offsets", _edit_header(_drop_offsets), "data_offsets"),
    ("header data_offsets of strings", _edit_header(_set("data_offsets", ["0", "4"])), "data_offsets"),
    ("header shape of strings", _edit_header(_set("shape", ["2"])), "shape"),
    ("header unknown dtype", _edit_header(_set("dtype", "F31")), "dtype"),
    ("header shape contradicts bytes", _edit_header(_wrong_shape), "needs"),
    ("header dtype contradicts bytes", _edit_header(_wrong_dtype), "needs"),
    ("header offsets past the data", _edit_header(_past_end), "truncated"),
    ("header tensors overlap", _edit_header(_overlap), "overlap"),
    ("header __metadata__ a list", _edit_header(lambda h: h | {"__metadata__": ["pt"]}), "__metadata__"),
    ("index weight_map is a list", _sharded(lambda wm: list(wm)), "weight_map"),
    ("index maps to a number", _sharded(lambda wm: dict.fromkeys(wm, 1)), "not a shard file"),
    ("index maps outside the folder", _sharded(lambda wm: dict.fromkeys(wm, "../seq-search/model.safetensors")),
     "not a shard file"),
    ("index is a list", _sharded(lambda wm: wm), None),  # replaced below: the whole index a list
    ("index names a tensor its shard lacks", _sharded(lambda wm: wm | {"model.extra.weight": next(iter(wm.values()))}),
     "does not hold"),
    ("tokenizer.json is a list", _tokenizer(lambda d: [d]), "tokenizer"),
    ("tokenizer.json added token id a string", _tokenizer(_tok_added_id_str), "added_tokens"),
    ("tokenizer.json vocab a list of numbers", _tokenizer(_tok_vocab_list_of_ints), "vocab"),
    ("tokenizer.json merges of numbers", _tokenizer(_tok_merges_numbers), "merges"),
    ("config.json architectures a string", _config(architectures="Qwen3ForCausalLM"), "architectures"),
    ("config.json vocab_size a string", _config(vocab_size="1000"), "vocab_size"),
]


def _index_list(run: Path) -> None:
    _sharded(lambda wm: wm)(run)
    f = _folder(run) / "model.safetensors.index.json"
    f.write_text(json.dumps([json.loads(f.read_text())]))


def _side(name: str, fn: Callable[[object], object]) -> Callable[[Path], None]:
    """Damage (or create) one of the small JSON files transformers reads beside the weights."""
    def apply(run: Path) -> None:
        f = _folder(run) / name
        f.write_text(json.dumps(fn(json.loads(f.read_text()) if f.is_file() else {})))

    return apply


BAD_FILES[14] = ("index is a list", _index_list, "weight_map")
# the side files transformers reads (each was an AttributeError / TypeError in transformers, exit 3, or silently
# no stop token)
BAD_FILES += [
    ("tokenizer_config.json is a list", _side("tokenizer_config.json", lambda d: [d]), "not a JSON object"),
    ("tokenizer_config.json chat_template a number", _side("tokenizer_config.json", lambda d: d | {"chat_template": 5}),
     "chat_template"),
    ("tokenizer_config.json eos_token a number", _side("tokenizer_config.json", lambda d: d | {"eos_token": 3}),
     "eos_token"),
    ("special_tokens_map.json is a list", _side("special_tokens_map.json", lambda d: [1]), "not a JSON object"),
    ("generation_config.json is a list", _side("generation_config.json", lambda d: [d]), "not a JSON object"),
    ("generation_config.json eos_token_id a string", _side("generation_config.json", lambda d: d | {"eos_token_id": "x"}),
     "eos_token_id"),
    ("generation_config.json eos_token_id of strings",
     _side("generation_config.json", lambda d: d | {"eos_token_id": ["a"]}), "eos_token_id"),
    ("chat_template.json is a list", _side("chat_template.json", lambda d: [1]), "not a JSON object"),
]
IDS = [b[0] for b in BAD_FILES]


@pytest.mark.parametrize("label, damage, needle", BAD_FILES, ids=IDS)
def test_checkpoints_lists_it_as_not_loadable_with_the_reason(fixture_run, cli, label, damage, needle):
    damage(fixture_run)
    code, out, err = cli("checkpoints", "--json", "--run", str(fixture_run))
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["checkpoints"]}
    assert rows["seq-math"]["loadable"] is False, rows["seq-math"]
    assert needle in rows["seq-math"]["problem"], rows["seq-math"]["problem"]
    assert rows["seq-search"]["loadable"] is True  # the others are untouched


# the verbs that load seq-math, on a few of the classes (each class is one check in models/files.py, tokenizer_files.py, config_checks.py)
VERB_CASES = ["header is a list", "header shape contradicts bytes", "index maps to a number",
              "tokenizer.json is a list", "tokenizer_config.json is a list", "generation_config.json eos_token_id a string"]


@pytest.mark.parametrize("verb", ["probe", "tokens", "vectors"])
@pytest.mark.parametrize("label", VERB_CASES)
def test_verbs_refuse_it_in_one_line(fixture_run, tmp_path, cli, verb, label):
    damage, needle = next((d, n) for lab, d, n in BAD_FILES if lab == label)
    seed_store(fixture_run)
    damage(fixture_run)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(VERB_ARGV[verb], fixture_run, tmp_path))
    assert code == 1, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and lines[0].startswith(f"aclarena-diag {verb}: error: "), err
    assert "seq-math" in lines[0] and needle in lines[0], lines[0]
    assert file_hash(fixture_run / "results.h5") == before


@pytest.mark.parametrize("fields, needle", [({"r": "8"}, "`r`"), ({"lora_alpha": [16]}, "lora_alpha"),
                                            ({"alpha_pattern": ["q_proj"]}, "alpha_pattern")],
                         ids=["r a string", "lora_alpha a list", "alpha_pattern a list"])
def test_adapter_config_of_the_wrong_shape(fixture_run, cli, fields, needle):
    _adapter_config(**fields)(fixture_run)
    code, out, err = cli("checkpoints", "--json", "--run", str(fixture_run))
    assert code == 0, err
    row = {r["name"]: r for r in json.loads(out)["checkpoints"]}["lora-ecom"]
    assert row["loadable"] is False and needle in row["problem"], row


@pytest.mark.parametrize("label", ["tokenizer_config.json is a list", "special_tokens_map.json is a list",
                                   "tokenizer_config.json eos_token a number"])
def test_load_tokenizer_checks_the_side_files(fixture_run, label):
    """load_tokenizer reads files past `inspect`'s verdict (adapters borrow their base's tokenizer):
    it checks them too, instead of transformers' AttributeError."""
    from aclarena.errors import CheckpointError
    from aclarena.models.loading import load_tokenizer
    from aclarena.store.manifest import load_manifest

    damage = next(d for lab, d, _ in BAD_FILES if lab == label)
    m = load_manifest(fixture_run)
    load_tokenizer("seq-math", m, fixture_run)
    damage(fixture_run)
    with pytest.raises(CheckpointError, match="tokenizer of 'seq-math': .*json") as e:
        load_tokenizer("seq-math", m, fixture_run)
    assert "\n" not in str(e.value)
