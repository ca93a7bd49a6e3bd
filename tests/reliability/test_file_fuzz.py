"""Fuzzing every reader of a checkpoint or input file with structurally wrong JSON (issue 15): the
safetensors header, the sharded index, tokenizer.json, config.json, adapter_config.json (through
`inspect`, which `checkpoints` and every verb use), lm-eval results files and JSONL prompt / trace
files. Each answers, or raises AclarenaError with one line; never anything else."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aclarena.errors import AclarenaError
from aclarena.models.checkpoint import inspect
from aclarena.models.files import read_safetensors_header
from aclarena.models.tokenizer_files import tokenizer_fingerprint
from aclarena.probes.probe_set import read_prompts, read_traces
from aclarena.results.lm_eval import read_results
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
@example(rows=[{"\n": None}])  # found by this test: the error named the keys as they were
def test_prompt_and_trace_files(tmp_path_factory, rows):
    f = tmp_path_factory.mktemp("j") / "rows.jsonl"
    f.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    for reader in (read_prompts, read_traces):
        try:
            reader(f)
        except AclarenaError as e:
            _one_line(e)


# --- LoRA adapters (issue 15 follow-up): adapter_config.json, its weights, the base it names -------

LORA_TENSORS = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": ([4, 16], 0),
                "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": ([16, 4], 256)}
VALID_ADAPTER_CONFIG = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
                        "base_model_name_or_path": None, "use_rslora": False, "rank_pattern": {},
                        "alpha_pattern": {}, "modules_to_save": None, "task_type": "CAUSAL_LM"}


def _adapter_folder(tmp: Path, cfg, header=None, values: bytes | None = None) -> Path:
    folder = tmp / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    if header is None:
        header = {n: {"dtype": "F32", "shape": s, "data_offsets": [o, o + 256]} for n, (s, o) in LORA_TENSORS.items()}
    raw = json.dumps(header).encode()
    (folder / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw
                                                       + (values if values is not None else b"\0" * 512))
    return folder


ADAPTER_KEYS = st.sampled_from(list(VALID_ADAPTER_CONFIG) + ["use_dora", "fan_in_fan_out", "inference_mode"])
ADAPTER_VALUES = st.one_of(JSON, st.sampled_from([0, -1, 4, 8, "4", "q_proj", "q_proj(", ".*", "all-linear",
                                                  ["k_proj"], {"q_proj": 2}, {"q_proj": "2"}, "false", True,
                                                  "/nonexistent/base", "org/other-model"]))


@FUZZ
@given(st.one_of(JSON, mutated(VALID_ADAPTER_CONFIG),
                 st.dictionaries(ADAPTER_KEYS, ADAPTER_VALUES, max_size=5).map(lambda d: VALID_ADAPTER_CONFIG | d)),
       st.one_of(st.none(), st.just("org/base-model"), st.just("/nonexistent/base")))
def test_adapter_readers(tmp_path_factory, cfg, base):
    """Every reader of an adapter folder: the shape check, the check against the weights and the
    named base, serving's settings and merging's check. Each answers or says one line."""
    from aclarena.consolidate.lora_merge import check_cat_mergeable
    from aclarena.consolidate.serving import adapter_settings, expert_parameters
    from aclarena.models.adapter_files import check_adapter_folder, read_adapter_config

    folder = _adapter_folder(tmp_path_factory.mktemp("a"), cfg)
    for reader in (read_adapter_config, adapter_settings, lambda f: check_adapter_folder(f, base=base),
                   lambda f: check_cat_mergeable([f], base=base), expert_parameters):
        try:
            reader(folder)
        except AclarenaError as e:
            _one_line(e)
    try:
        ok = check_adapter_folder(folder, base=base)
    except AclarenaError:
        return
    # what passes is what peft and aclarena read: a dict with a positive rank equal to the weights'
    assert isinstance(ok, dict)
    assert ok.get("r") in (None, 4) or (ok.get("rank_pattern") or {}).get("q_proj") == 4
    assert ok.get("target_modules") is None or isinstance(ok["target_modules"], str | list)


@FUZZ
@given(st.one_of(JSON, mutated({n: {"dtype": "F32", "shape": s, "data_offsets": [o, o + 256]}
                                for n, (s, o) in LORA_TENSORS.items()})))
def test_adapter_weights_header(tmp_path_factory, header):
    from aclarena.consolidate.serving import PeftExpertServer, expert_parameters
    from aclarena.models.adapter_files import check_adapter_folder

    folder = _adapter_folder(tmp_path_factory.mktemp("w"), VALID_ADAPTER_CONFIG, header=header)
    for reader in (check_adapter_folder, expert_parameters):
        try:
            reader(folder)
        except AclarenaError as e:
            _one_line(e)
    try:  # the server checks its experts before peft reads a byte (no model is needed to get there)
        PeftExpertServer(_Backbone(), None, {"x": folder}, _NoRouter())
    except AclarenaError as e:
        _one_line(e)
    except _Reached:
        check_adapter_folder(folder)  # only a folder that passes every check reaches peft


class _Reached(Exception):
    pass


class _NoRouter:
    experts = ()


class _Backbone:
    """Stands in for a model: peft's first use of it says the checks let the adapter through."""

    def __getattr__(self, name):
        if name == "name_or_path":
            raise AttributeError(name)
        raise _Reached


FLOATS = st.sampled_from(["F32", "F16", "BF16", "F64"])


@FUZZ
@given(FLOATS, st.lists(st.one_of(st.floats(width=16), st.sampled_from([0.0, 1.0, -2.5, 65504.0])), min_size=1,
                        max_size=40), st.integers(1, 7))
def test_check_finite_safetensors_finds_every_nonfinite_entry(tmp_path_factory, dtype, values, chunk):
    """Refuses exactly the files holding a NaN or an infinity, in any float dtype and chunking."""
    import math

    import torch
    from safetensors.torch import save_file

    from aclarena.models.checkpoint import NonFiniteWeightsError
    from aclarena.models.tensors import TORCH_DTYPES, check_finite_safetensors

    f = tmp_path_factory.mktemp("f") / "model.safetensors"
    t = torch.tensor(values, dtype=torch.float64).to(TORCH_DTYPES[dtype])
    save_file({"w": t, "ids": torch.arange(3)}, f)
    bad = not all(math.isfinite(v) for v in t.double().tolist())
    try:
        check_finite_safetensors([f], "c", chunk=chunk)
    except NonFiniteWeightsError as e:
        _one_line(e)
        assert bad, e
    else:
        assert not bad


# --- the training and merging bookkeeping files (phase markers, logs, trainer state, merge markers) ---

VALID_MARKER = {"fingerprint": "abc", "steps": 10, "time_s": 1.5, "resumed_from_step": None, "finished_at": 1.0,
                "meta": {"name": "seq-math"}, "environment": {"torch": "2.13.0"}}
VALID_LOG = [{"loss": 1.0, "step": 1.0}, {"loss": 0.5, "step": 2.0}]


def _text_or_json(doc) -> str:
    return doc if isinstance(doc, str) else json.dumps(doc)


RAW = st.one_of(st.just("{"), st.just(""), st.just("[" * 2000), st.text(max_size=8))


@FUZZ
@given(st.one_of(JSON, mutated(VALID_MARKER), RAW), st.one_of(JSON, mutated(VALID_LOG), RAW))
@example({**VALID_MARKER, "steps": None, "time_s": None, "meta": None}, VALID_LOG)  # found by CI: int(None)
def test_phase_marker_and_log_through_finished(tmp_path_factory, marker, log):
    """A finished phase's marker and log: the phase reads as finished with values of their types, or one
    line naming the file (never "not finished", which would retrain over the folder's checkpoint)."""
    from aclarena.train.phase_record import LOG_FILE, MARKER, finished

    folder = tmp_path_factory.mktemp("p")
    (folder / "model.safetensors").write_bytes(b"")
    (folder / MARKER).write_text(_text_or_json(marker))
    (folder / LOG_FILE).write_text(_text_or_json(log))
    try:
        res = finished(folder)
    except AclarenaError as e:
        _one_line(e)
        return
    assert res is not None
    assert isinstance(res.steps, int) and isinstance(res.time_s, float) and isinstance(res.meta, dict)
    assert isinstance(res.log_history, list) and all(isinstance(r, dict) for r in res.log_history)


@FUZZ
@given(st.one_of(JSON, RAW), st.one_of(JSON, RAW))
def test_trainer_work_state_and_trainer_checkpoints(tmp_path_factory, state, trainer_state):
    """The work folder's state and a trainer checkpoint's trainer_state.json: kept when they are this
    phase's and well formed, discarded otherwise; never an exception."""
    from aclarena.train.phases import WORK_STATE, _prepare_work, last_checkpoint

    work = tmp_path_factory.mktemp("w") / "work"
    (work / "checkpoint-5").mkdir(parents=True)
    (work / WORK_STATE).write_text(_text_or_json(state))
    (work / "checkpoint-5" / "trainer_state.json").write_text(_text_or_json(trainer_state))
    found = last_checkpoint(work)
    assert found is None or isinstance(json.loads((work / "checkpoint-5" / "trainer_state.json").read_text()), dict)
    _prepare_work(work, "fp")
    kept = (work / "checkpoint-5").exists()
    assert kept == (isinstance(state, dict) and state.get("fingerprint") == "fp" and found is not None)


@FUZZ
@given(st.one_of(JSON, RAW, mutated({"fingerprint": "f", "n_tensors": 3, "bytes": 12, "updates_from": ["a"]})))
def test_merge_marker(tmp_path_factory, marker):
    """A merge's marker: reused only when of its shape (its counts are ints), else the merge is redone."""
    from aclarena.consolidate.checkpoint_merge import MARKER, read_marker

    folder = tmp_path_factory.mktemp("m")
    (folder / MARKER).write_text(_text_or_json(marker))
    got = read_marker(folder)
    if got is not None:
        assert isinstance(got["fingerprint"], str)
        int(got.get("n_tensors", 0)), int(got.get("bytes", 0))  # what the reuse path reads


@FUZZ
@given(st.one_of(JSON, mutated(VALID_CONFIG), RAW))
def test_context_length_of_a_training_start(tmp_path_factory, config):
    """The context length a curriculum reads from a start's config.json: a positive int, or None."""
    from aclarena.train.curriculum import _positions

    folder = tmp_path_factory.mktemp("c")
    (folder / "config.json").write_text(_text_or_json(config))
    got = _positions(str(folder))
    assert got is None or (type(got) is int and got > 0)


VALID_SIDE = {
    "tokenizer_config.json": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                              "chat_template": "{{ messages }}", "model_max_length": 1024, "padding_side": "left",
                              "added_tokens_decoder": {"0": {"content": "<s>", "special": True}}},
    "special_tokens_map.json": {"eos_token": "<|im_end|>", "additional_special_tokens": ["<a>", {"content": "<b>"}]},
    "generation_config.json": {"eos_token_id": [2, 3], "pad_token_id": 0, "do_sample": True, "temperature": 0.7,
                               "top_k": 20, "max_new_tokens": 64},
    "chat_template.json": {"chat_template": "{{ messages }}"},
}


@FUZZ
@given(st.sampled_from(sorted(VALID_SIDE)).flatmap(lambda n: st.tuples(st.just(n), st.one_of(JSON, mutated(VALID_SIDE[n])))))
def test_side_files_through_inspect(tmp_path_factory, named):
    """tokenizer_config.json, special_tokens_map.json, generation_config.json, chat_template.json: the
    checkpoint is listed as loadable with fields of their types, or not loadable with one line."""
    from aclarena.models.tokenizer_files import check_side_files

    name, doc = named
    folder = _folder(tmp_path_factory.mktemp("s"), VALID_CONFIG, VALID_TOKENIZER)
    (folder / name).write_text(json.dumps(doc))
    info = _inspect(folder)
    assert info.problem is None or (info.problem.strip() and "\n" not in info.problem)
    if info.problem is None:
        check_side_files(folder)
        if name == "generation_config.json" and isinstance(doc.get("eos_token_id"), list):
            assert all(type(i) is int for i in doc["eos_token_id"])  # what stop_token_ids turns into ints
