"""models/arch.context_length: the one rule for a model's context length, over configs of several families
(transformers' config classes, built locally; nothing is downloaded) and config.json dicts."""

from __future__ import annotations

import pytest
import transformers

from aclarena.models.arch import context_length


@pytest.mark.parametrize("cls, kwargs, want", [
    ("LlamaConfig", {"max_position_embeddings": 4096}, 4096),
    ("Qwen3Config", {"max_position_embeddings": 1024}, 1024),
    ("GPT2Config", {"n_positions": 512}, 512),  # n_positions (attribute_map'd to max_position_embeddings)
    ("GPTJConfig", {"n_positions": 1536}, 1536),
    ("MptConfig", {"max_seq_len": 777}, 777),  # MPT names it max_seq_len
    ("MistralConfig", {"max_position_embeddings": 32768, "sliding_window": 4096}, 32768),  # a window is no length
    ("Gemma2Config", {"max_position_embeddings": 8192, "sliding_window": 2048}, 8192),
    ("BloomConfig", {}, None),  # ALiBi: no limit in the config
    ("T5Config", {}, None),  # relative positions
])
def test_context_length_of_config_classes(cls, kwargs, want):
    config = getattr(transformers, cls)(**kwargs)
    assert context_length(config) == want
    assert context_length(config.to_dict()) == want  # the same rule on its config.json


def test_context_length_of_a_multimodal_config_is_its_text_models():
    config = transformers.LlavaConfig(text_config={"model_type": "llama", "max_position_embeddings": 3000})
    assert context_length(config) == 3000
    assert context_length({"model_type": "llava", "text_config": {"max_position_embeddings": 3000}}) == 3000


@pytest.mark.parametrize("d, want", [
    ({"max_position_embeddings": 2048, "n_positions": 99}, 2048),  # the first key wins
    ({"max_position_embeddings": 0, "n_positions": 99}, 99),  # 0 is no length
    ({"max_position_embeddings": True}, None),
    ({"max_position_embeddings": "2048"}, None),
    ({"max_position_embeddings": 2048.0}, None),
    ({"seq_length": 8192}, 8192),
    ({"max_sequence_length": 300}, 300),
    ({}, None),
])
def test_context_length_reads_only_positive_integers(d, want):
    assert context_length(d) == want
