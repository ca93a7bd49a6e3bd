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
