"""config.json is checked against the safetensors headers: by `checkpoints`, and by `tokens` before it loads a
model (one line, store unchanged); sharded folders and an adapter on a lying base too, while healthy untied and
Llama checkpoints stay loadable.

Each test failed on the code before its fix (issue 33, checked against main at 2f42103 / a7087bc) unless its name
says it guards a healthy case."""

from __future__ import annotations

import json

import pytest
from distributed_helpers import file_hash
from reliability_helpers import VERB_ARGV, checkpoint_rows, fill, one_line, seed_store, set_config

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


@pytest.mark.parametrize("fields, needle", CONFIG_LIES, ids=LIE_IDS)
def test_checkpoints_compares_config_with_the_headers(fixture_run, cli, fields, needle):
    set_config(fixture_run, **fields)
    rows = checkpoint_rows(cli, fixture_run)
    assert rows["seq-math"]["loadable"] is False and needle in rows["seq-math"]["problem"], rows["seq-math"]
    assert rows["seq-search"]["loadable"] is True


@pytest.mark.parametrize("fields, needle", [CONFIG_LIES[0], CONFIG_LIES[2], CONFIG_LIES[3]], ids=LIE_IDS[:1] + LIE_IDS[2:4])
def test_tokens_refuses_a_lying_config_in_one_line(fixture_run, tmp_path, cli, fields, needle):
    """Before: `tokens` exit 3 (StrictDataclassClassValidationError) or a 9-19 line LOAD REPORT first."""
    seed_store(fixture_run)
    set_config(fixture_run, **fields)
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
    assert checkpoint_rows(cli, fixture_run)["seq-search"]["loadable"] is True  # a healthy sharded folder stays loadable
    set_config(fixture_run, "seq-search", hidden_size=96)
    rows = checkpoint_rows(cli, fixture_run)
    assert rows["seq-search"]["loadable"] is False and "`hidden_size` is 96" in rows["seq-search"]["problem"]
    assert rows["lora-ecom"]["loadable"] is False and "its base 'seq-search'" in rows["lora-ecom"]["problem"]


def test_untied_and_llama_checkpoints_stay_loadable(llama_run, cli):
    rows = checkpoint_rows(cli, llama_run)
    assert all(r["loadable"] for r in rows.values()), rows
