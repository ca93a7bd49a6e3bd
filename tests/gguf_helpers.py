"""Write a GGUF file the way llama.cpp's convert_hf_to_gguf.py does, from a tiny HF Llama model and the
test tokenizer: the `gguf` package's writer, Q/K rows permuted for llama.cpp's rotary layout, the
tokenizer as a byte-level BPE ("gpt2") with its merges and chat template. Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's `LlamaModel.permute`: HF's half-split rotary rows to interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(model: Any, tokenizer: Any, path: Path, *, quantize: tuple[str, ...] = (),
                     eos: str = "<|im_end|>", qtype: str = "Q8_0", raw: tuple[str, ...] = (),
                     raw_type: str = "Q8_1") -> dict[str, Any]:
    """Write ``model`` (a LlamaForCausalLM) to ``path``; tensors whose GGUF name contains one of
    ``quantize`` are stored as ``qtype`` (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: what the gguf package quantizes);
    those containing one of ``raw`` as zero bytes of ``raw_type`` (a type the package may not dequantize).
    Returns {GGUF name: the array written (F32), or its quantized values as the package dequantizes them}."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama-test")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None)
                         else float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType[f"MOSTLY_{qtype}"] if quantize else gguf.LlamaFileType.ALL_F32)
    bpe = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = set(tokenizer.all_special_tokens) | {t.content for t in tokenizer.added_tokens_decoder.values()}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t in special else 1 for t, _ in vocab])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]])
    w.add_eos_token_id(tokenizer.convert_tokens_to_ids(eos))
    if tokenizer.pad_token_id is not None:
        w.add_pad_token_id(tokenizer.pad_token_id)
    w.add_chat_template(tokenizer.chat_template)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not cfg.tie_word_embeddings:
        names["lm_head.weight"] = "output.weight"
    parts = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for i in range(cfg.num_hidden_layers):
        for hf, gg in parts.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    written: dict[str, Any] = {}
    for hf, gg in names.items():
        arr = sd[hf]
        if hf.endswith("q_proj.weight"):
            arr = llama_cpp_permute(arr, cfg.num_attention_heads)
        elif hf.endswith("k_proj.weight"):
            arr = llama_cpp_permute(arr, cfg.num_key_value_heads)
        if arr.ndim == 2 and any(r in gg for r in raw):
            kind = gguf.GGMLQuantizationType[raw_type]
            nbytes = gguf.quants.quant_shape_to_byte_shape(arr.shape, kind)
            w.add_tensor(gg, np.zeros(nbytes, dtype=np.uint8), raw_dtype=kind)
            written[gg] = None
        elif arr.ndim == 2 and any(q in gg for q in quantize):
            kind = gguf.GGMLQuantizationType[qtype]
            q = gguf.quants.quantize(arr, kind)
            w.add_tensor(gg, q, raw_dtype=kind)
            written[gg] = gguf.quants.dequantize(q, kind)
        else:
            w.add_tensor(gg, np.ascontiguousarray(arr, dtype=np.float32))
            written[gg] = arr
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written
