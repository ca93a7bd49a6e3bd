"""`aclarena-diag import` (issue 32): a GGUF the test writes with the `gguf` package (a tiny Llama, GQA,
tied embeddings, one tensor kind quantized to Q8_0) becomes an HF folder whose weights equal the
source tensors, with its tokenizer and chat template, the source's SHA-256 and quantization recorded."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest
import torch

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory, tokenizer):
    from gguf_helpers import write_llama_gguf

    from aclarena.models.tiny import build_model, tiny_config

    model = build_model(tiny_config(tokenizer, arch="llama", num_heads=4, num_kv_heads=2), seed=3)
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.Q8_0.gguf"
    written = write_llama_gguf(model, tokenizer, path, quantize=("ffn_up", "ffn_down"))
    return path, model, written


def test_import_writes_the_source_tensors(gguf_file, tmp_path, cli, tokenizer):
    from gguf_helpers import llama_cpp_permute
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, model, written = gguf_file
    out = tmp_path / "imported"
    code, stdout, err = cli("import", str(path.parent), "--out", str(out), "--json")
    assert code == 0, err
    rec = json.loads(stdout)
    assert rec["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert rec["quantization"] == "Q8_0" and rec["tensor_types"]["Q8_0"] == 4 and rec["dtype"] == "float32"
    assert json.loads((out / "aclarena-import.json").read_text()) == rec
    got = load_file(out / "model.safetensors")
    cfg = model.config
    for i in range(cfg.num_hidden_layers):
        # F32 tensors: exactly the source's, llama.cpp's Q/K permutation undone
        q = got[f"model.layers.{i}.self_attn.q_proj.weight"].numpy()
        assert (llama_cpp_permute(q, cfg.num_attention_heads) == written[f"blk.{i}.attn_q.weight"]).all()
        k = got[f"model.layers.{i}.self_attn.k_proj.weight"].numpy()
        assert (llama_cpp_permute(k, cfg.num_key_value_heads) == written[f"blk.{i}.attn_k.weight"]).all()
        # Q8_0 tensors: the gguf package's dequantization of the stored blocks, bit for bit
        assert (got[f"model.layers.{i}.mlp.up_proj.weight"].numpy() == written[f"blk.{i}.ffn_up.weight"]).all()
        up = model.state_dict()[f"model.layers.{i}.mlp.up_proj.weight"]
        assert 0 < (got[f"model.layers.{i}.mlp.up_proj.weight"] - up).abs().max() < 0.01  # quantized, not the float
    torch.testing.assert_close(got["model.embed_tokens.weight"], model.state_dict()["model.embed_tokens.weight"],
                               rtol=0, atol=0)
    # the folder loads with plain transformers: same logits as the source model where no tensor was quantized
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template == tokenizer.chat_template
    assert tok("12 + 3 = 15")["input_ids"] == tokenizer("12 + 3 = 15")["input_ids"]
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert loaded.config.tie_word_embeddings and loaded.config.num_key_value_heads == 2
    assert not hasattr(loaded.config, "quantization_config")


def test_import_refuses_and_checkpoints_shows_the_quantization(gguf_file, tmp_path, cli):
    path, _, _ = gguf_file
    out = tmp_path / "m"
    code, _, err = cli("import", str(path), "--out", str(out), "--dtype", "bfloat16")
    assert code == 0, err
    code, _, err = cli("import", str(path), "--out", str(out))
    assert code == 1 and "already exists" in err and "--force" in err
    code, _, err = cli("import", str(tmp_path / "none.gguf"), "--out", str(tmp_path / "x"))
    assert code == 1 and "does not exist" in err and not (tmp_path / "x").exists()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF not really")
    code, _, err = cli("import", str(bad), "--out", str(tmp_path / "y"))
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "y").exists() and not list(tmp_path.glob(".y.import-*"))
    run = tmp_path / "run"
    code, _, err = cli("init", "--run", str(run), f"base={out}")
    assert code == 0, err
    code, stdout, err = cli("checkpoints", "--run", str(run), "--json", "--strict")
    assert code == 0, err
    (row,) = json.loads(stdout)["checkpoints"]
    assert row["quantization"] == "Q8_0" and row["dtype"] == "bfloat16" and row["loadable"]
    assert row["imported_from"] == f"gguf sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    code, stdout, _ = cli("checkpoints", "--run", str(run))
    assert "quantization" in stdout and "Q8_0" in stdout


# --- issue 45 item 3: streamed tensor by tensor ------------------------------------------------------------


def _weights(folder):
    from safetensors.torch import load_file

    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_streamed_import_equals_the_transformers_import_and_shards(gguf_file, tmp_path, dtype):
    """The same tensors, bit for bit, as loading the whole model with transformers (the previous implementation),
    in shards when asked; the sharded folder loads with plain transformers and gives the same logits."""
    from transformers import AutoModelForCausalLM

    from aclarena.models.gguf_import import import_gguf

    path, _, _ = gguf_file
    old = import_gguf(path, tmp_path / "whole", dtype=dtype, streaming=False)
    new = import_gguf(path, tmp_path / "streamed", dtype=dtype, max_shard_bytes=200_000)
    assert new.parameters == old.parameters and new.to_dict() | {"out": ""} == old.to_dict() | {"out": ""}
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "streamed")
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name
    assert len(list((tmp_path / "streamed").glob("model-*.safetensors"))) > 1
    assert (tmp_path / "streamed" / "model.safetensors.index.json").is_file()
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    m1 = AutoModelForCausalLM.from_pretrained(tmp_path / "whole", dtype=torch.float32)
    m2 = AutoModelForCausalLM.from_pretrained(tmp_path / "streamed", dtype=torch.float32)
    assert m2.config.tie_word_embeddings and m2.config.num_key_value_heads == 2
    with torch.no_grad():
        assert torch.equal(m1(ids).logits, m2(ids).logits)


def test_streamed_import_never_loads_the_whole_model(gguf_file, tmp_path, cli, monkeypatch):
    """Streaming reads the file tensor by tensor: transformers' whole-model GGUF loading is never called."""
    import transformers
    from transformers import modeling_gguf_pytorch_utils as mg

    def refuse(*args, **kwargs):
        raise AssertionError("the whole model was loaded")

    real = mg.load_gguf_checkpoint

    def metadata_only(path, return_tensors=False, **kwargs):
        if return_tensors:
            refuse()
        return real(path, return_tensors=False, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(mg, "load_gguf_checkpoint", metadata_only)
    path, _, _ = gguf_file
    code, _, err = cli("import", str(path), "--out", str(tmp_path / "m"), "--json")
    assert code == 0, err


def test_import_in_a_log_prints_progress_lines(gguf_file, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("ACLARENA_PROGRESS_INTERVAL", "30")
    path, _, _ = gguf_file
    code, _, err = cli("import", str(path), "--out", str(tmp_path / "m"))
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("[aclarena ")]
    assert any(f"start: import {path.name}" in ln for ln in lines), err
    assert any(f"end: import {path.name}" in ln and "MB/s" not in ln for ln in lines), err
    assert "\r" not in err  # no bar redrawn into the pipe


def test_a_type_gguf_cannot_dequantize_is_one_line_and_writes_nothing(tmp_path, cli, tokenizer):
    from gguf_helpers import write_llama_gguf

    from aclarena.models.tiny import build_model, tiny_config

    model = build_model(tiny_config(tokenizer, arch="llama", num_heads=4, num_kv_heads=2), seed=3)
    src = tmp_path / "src"
    src.mkdir()
    path = src / "odd.gguf"
    write_llama_gguf(model, tokenizer, path, raw=("blk.1.ffn_up",), raw_type="Q8_1")
    out = tmp_path / "m"
    code, stdout, err = cli("import", str(path), "--out", str(out))
    assert code == 1 and stdout == ""
    assert "blk.1.ffn_up.weight is Q8_1" in err and "cannot dequantize" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no output, no staging folder


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                                   "Q6_K", "IQ4_NL", "F16", "F32"])
def test_dequantize_in_row_blocks_is_the_gguf_package_bit_for_bit(qtype):
    import gguf
    import numpy as np

    from aclarena.models.gguf_import import dequantize

    kind = gguf.GGMLQuantizationType[qtype]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 512)).astype(np.float32)
    try:
        data = gguf.quants.quantize(x, kind)
    except NotImplementedError:  # K-quants: the package cannot write them; any bytes are blocks to read
        data = rng.integers(0, 256, size=gguf.quants.quant_shape_to_byte_shape(x.shape, kind), dtype=np.uint8)
    want = gguf.quants.dequantize(data, kind)
    for max_elements in (1 << 22, 1000, 1):  # one block, several rows per block, one row per block
        got = dequantize(data, kind, max_elements=max_elements)
        assert got.dtype == np.float32 and got.shape == want.shape == x.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_file_that_cannot_be_streamed_is_imported_whole_with_a_note(gguf_file, tmp_path, cli, monkeypatch):
    """Files whose tensors transformers splits or stacks itself (MoE experts) fall back to the whole-model path."""
    from aclarena.models import gguf_import

    def not_streamable(*args, **kwargs):
        raise gguf_import.NotStreamable("the file's tensors are not one-to-one with the model's (missing [...])")

    monkeypatch.setattr(gguf_import, "GgufStream", not_streamable)
    path, _, _ = gguf_file
    code, _, err = cli("import", str(path), "--out", str(tmp_path / "m"), "--json")
    assert code == 0, err
    assert "note: the file's tensors are not one-to-one" in err and "whole-model GGUF loading instead" in err
    assert (tmp_path / "m" / "model.safetensors").is_file()


def test_import_adds_the_template_end_of_turn_to_the_generation_config(tmp_path, cli):
    """Issue 49: a Gemma-style GGUF names `<eos>` only while its template ends a turn with `<end_of_turn>`;
    the imported folder's generation config stops there too, and the command says so."""
    from gemma_helpers import gemma_style_tokenizer
    from gguf_helpers import write_llama_gguf

    from aclarena.models.tiny import build_model, tiny_config

    tok = gemma_style_tokenizer()
    eos, eot = tok.convert_tokens_to_ids("<eos>"), tok.convert_tokens_to_ids("<end_of_turn>")
    path = tmp_path / "src" / "gemma-style.gguf"
    path.parent.mkdir()
    write_llama_gguf(build_model(tiny_config(tok, arch="llama"), seed=4), tok, path, eos="<eos>")
    out = tmp_path / "imported"
    mask = os.umask(0o022)
    try:
        code, stdout, err = cli("import", str(path), "--out", str(out))
    finally:
        os.umask(mask)
    assert code == 0, err
    assert "<end_of_turn>" in stdout and "added" in stdout
    assert stat.S_IMODE(out.stat().st_mode) == 0o755  # as a plain mkdir makes it, not mkdtemp's 0700
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [eos, eot]
    rec = json.loads((out / "aclarena-import.json").read_text())
    assert rec["end_of_turn_id"] == eot and rec["end_of_turn_added"] and rec["eos_token_ids"] == [eos, eot]
