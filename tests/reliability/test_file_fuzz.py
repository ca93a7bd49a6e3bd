"""Fuzzing every reader of a checkpoint or input file with structurally wrong JSON (issue 15): the
safetensors header, the sharded index, tokenizer.json, config.json, adapter_config.json (through
`inspect`, which `checkpoints` and every verb use), lm-eval results files and JSONL prompt / trace
files. Each answers, or raises AclarenaError with one line; never anything else."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclarena.errors import AclarenaError
from aclarena.models.checkpoint import inspect, read_safetensors_header, tokenizer_fingerprint
from aclarena.probes.probe_set import read_prompts, read_traces
from aclarena.store.lm_eval import read_results
from aclarena.store.manifest import CheckpointSpec, Manifest

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**40), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=6), st.sampled_from(["F32", "BF16", "I64", "weight_map", "model.safetensors",
                                                          "../x", "", "\u2028", "BPE"]))
JSON = st.recursive(SCALARS, lambda c: st.lists(c, max_size=4) | st.dictionaries(
    st.one_of(st.text(max_size=5), st.sampled_from(["dtype", "shape", "data_offsets", "__metadata__", "model",
                                                    "vocab", "merges", "added_tokens", "id", "content", "weight_map",
                                                    "architectures", "vocab_size", "r", "lora_alpha", "results",
                                                    "alpha_pattern", "peft_type", "messages", "prompt", "role"])),
    c, max_size=4), max_leaves=12)


def _one_line(e: AclarenaError) -> None:
    msg = str(e).strip()
    assert msg and "\n" not in msg, msg


def _replace_at(doc, path: list, value):
    """``doc`` with the value at ``path`` (keys / indexes, taken modulo) replaced by ``value``."""
    if not path or not isinstance(doc, dict | list) or not doc:
        return value
    keys = list(doc) if isinstance(doc, dict) else list(range(len(doc)))
    k = keys[path[0] % len(keys)]
    out = dict(doc) if isinstance(doc, dict) else list(doc)
    out[k] = _replace_at(doc[k], path[1:], value)
    return out


def mutated(valid) -> st.SearchStrategy:
    return st.tuples(st.lists(st.integers(0, 50), max_size=4), JSON).map(lambda pv: _replace_at(valid, *pv))


def _header_file(tmp: Path, header, data: bytes = b"\0" * 64) -> Path:
    raw = json.dumps(header).encode()
    f = tmp / "model.safetensors"
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return f


VALID_HEADER = {"__metadata__": {"format": "pt"}, "a.weight": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]},
                "b.weight": {"dtype": "BF16", "shape": [16], "data_offsets": [32, 64]}}


@FUZZ
@given(st.one_of(JSON, mutated(VALID_HEADER)))
def test_safetensors_header(tmp_path_factory, header):
    f = _header_file(tmp_path_factory.mktemp("h"), header)
    try:
        meta = read_safetensors_header(f)
    except AclarenaError as e:
        _one_line(e)
        return
    for name, v in meta.items():  # a header that passes describes bytes that exist, without overlap
        if name != "__metadata__":
            assert 0 <= v["data_offsets"][0] <= v["data_offsets"][1] <= 64


def _folder(tmp: Path, config, tokenizer, index=None, adapter=None) -> Path:
    folder = tmp / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    if index is None:
        _header_file(folder, VALID_HEADER)
    else:
        _header_file(folder, VALID_HEADER).rename(folder / "model-00001-of-00001.safetensors")
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


VALID_CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 16,
                "tie_word_embeddings": True, "max_position_embeddings": 64}
VALID_TOKENIZER = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]},
                   "added_tokens": [{"id": 2, "content": "<s>", "special": True}]}
VALID_INDEX = {"metadata": {}, "weight_map": {"a.weight": "model-00001-of-00001.safetensors",
                                              "b.weight": "model-00001-of-00001.safetensors"}}


def _inspect(folder: Path):
    m = Manifest(name="f")
    m.add(CheckpointSpec(name="c", path=str(folder), kind="base"))
    return inspect(m.resolve("c"), m, folder.parent)


@FUZZ
@given(st.one_of(JSON, mutated(VALID_CONFIG)), st.one_of(JSON, mutated(VALID_TOKENIZER)))
def test_config_and_tokenizer_through_inspect(tmp_path_factory, config, tokenizer):
    folder = _folder(tmp_path_factory.mktemp("c"), config, tokenizer)
    info = _inspect(folder)  # problems are reported, not raised
    assert info.problem is None or (info.problem.strip() and "\n" not in info.problem)
    if info.problem is None:
        assert isinstance(info.tokenizer_fingerprint, str)
        info.architecture, info.dtype, info.n_parameters  # noqa: B018 - the table's fields read without error


@FUZZ
@given(st.one_of(JSON, mutated(VALID_INDEX)))
def test_sharded_index_through_inspect(tmp_path_factory, index):
    folder = _folder(tmp_path_factory.mktemp("i"), VALID_CONFIG, VALID_TOKENIZER, index=index)
    info = _inspect(folder)
    assert info.problem is None or (info.problem.strip() and "\n" not in info.problem)
    if info.problem is None:
        assert set(info.tensors) == {"a.weight", "b.weight"}


@FUZZ
@given(st.one_of(JSON, mutated(VALID_TOKENIZER)))
def test_tokenizer_fingerprint(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("t")
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    try:
        tokenizer_fingerprint(folder)
    except AclarenaError as e:
        _one_line(e)


VALID_LM_EVAL = {"results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.5,
                                       "exact_match_stderr,strict-match": 0.01}},
                 "versions": {"gsm8k": 3}, "n-samples": {"gsm8k": {"original": 10, "effective": 10}}}


@FUZZ
@given(st.one_of(JSON, mutated(VALID_LM_EVAL)))
def test_lm_eval_results(tmp_path_factory, doc):
    f = tmp_path_factory.mktemp("l") / "results.json"
    f.write_text(json.dumps(doc))
    try:
        read_results(f)
    except AclarenaError as e:
        _one_line(e)


VALID_TRACE = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


@FUZZ
@given(st.lists(st.one_of(JSON, mutated(VALID_TRACE), mutated({"prompt": "x"})), min_size=1, max_size=4))
def test_prompt_and_trace_files(tmp_path_factory, rows):
    f = tmp_path_factory.mktemp("j") / "rows.jsonl"
    f.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    for reader in (read_prompts, read_traces):
        try:
            reader(f)
        except AclarenaError as e:
            _one_line(e)
