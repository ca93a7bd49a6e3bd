import json
import shutil

import pytest
import torch

from aclarena.errors import CheckpointError
from aclarena.models.checkpoint import inspect, inspect_all, require_same_tokenizer
from aclarena.models.loading import LoadOptions, load_model, load_tokenizer
from aclarena.models.tokenizer_files import tokenizer_fingerprint
from aclarena.store.manifest import CheckpointSpec, load_manifest, write_manifest


def test_checkpoints_table_and_json(fixture_run, cli):
    code, out, err = cli("checkpoints", "--run", str(fixture_run), "--json")
    assert code == 0, err
    data = json.loads(out)
    rows = {r["name"]: r for r in data["checkpoints"]}
    assert set(rows) == {"base", "seq-math", "seq-search", "oracle-math", "lora-ecom"}
    assert all(r["loadable"] for r in rows.values()), rows
    assert rows["seq-math"]["parent"] == "base" and rows["seq-math"]["phase"] == "rl"
    assert rows["base"]["dtype"] == "float32"
    assert rows["base"]["parameters"] > 10_000
    assert rows["lora-ecom"]["parameters"] < rows["base"]["parameters"] / 5
    fps = {r["tokenizer"] for r in rows.values()}
    assert len(fps) == 1 and None not in fps
    code, out, _ = cli("checkpoints", "--run", str(fixture_run))
    assert code == 0 and "seq-search" in out and "ok" in out


def test_init_from_pairs_then_checkpoints(fixture_run, tmp_path, cli):
    run = tmp_path / "mine"
    ck = fixture_run / "checkpoints"
    code, out, err = cli("init", "--run", str(run), f"base={ck/'base'}", f"seq-math={ck/'seq-math'}",
                         f"seq-search={ck/'seq-search'}", f"oracle-math={ck/'oracle-math'}",
                         "--phase", "seq-math=rl", "--phase", "seq-search=sft", "--json")
    assert code == 0, err
    m = load_manifest(run)
    assert m.base == "base"
    assert m.resolve("seq-search").parent == "seq-math" and m.resolve("seq-search").domain == "search"
    assert m.resolve("oracle-math").kind == "oracle" and m.resolve("oracle-math").parent == "base"
    assert m.resolve("seq-math").phase == "rl"
    code, _, err = cli("init", "--run", str(run), f"x={ck/'base'}")
    assert code == 1 and "already exists" in err
    code, _, err = cli("init", "--run", str(run), "--add", f"lora={ck/'lora-ecom'}", "--on", "lora=seq-search",
                       "--kind", "lora=consolidated")
    assert code == 0, err
    assert load_manifest(run).resolve("lora").on == "seq-search"
    code, out, err = cli("checkpoints", "--run", str(run), "--json")
    assert code == 0 and all(r["loadable"] for r in json.loads(out)["checkpoints"])


def test_init_from_folder(fixture_run, tmp_path, cli):
    run = tmp_path / "fromfolder"
    code, out, err = cli("init", "--run", str(run), "--from-folder", str(fixture_run / "checkpoints"), "--json")
    assert code == 0, err
    m = load_manifest(run)
    assert set(m.checkpoints) == {"base", "seq-math", "seq-search", "oracle-math", "lora-ecom"}
    assert m.resolve("lora-ecom").on is not None
    code, out, _ = cli("checkpoints", "--run", str(run), "--json")
    assert all(r["loadable"] for r in json.loads(out)["checkpoints"])


def test_init_duplicate_and_bad_pairs(tmp_path, cli):
    code, _, err = cli("init", "--run", str(tmp_path), "a=x", "a=y")
    assert code == 1 and "given twice" in err and "Traceback" not in err
    code, _, err = cli("init", "--run", str(tmp_path), "ax")
    assert code == 1 and "NAME=VALUE" in err


def test_load_models_and_adapter(fixture_run, llama_run):
    m = load_manifest(fixture_run)
    tok = load_tokenizer("base", m, fixture_run)
    ids = tok("the answer is 12", return_tensors="pt").input_ids
    base = load_model("seq-search", m, fixture_run)
    lora = load_model("lora-ecom", m, fixture_run)
    lora_merged = load_model("lora-ecom", m, fixture_run, LoadOptions(merge_adapter=True))
    with torch.no_grad():
        a, b, c = base(ids).logits, lora(ids).logits, lora_merged(ids).logits
    assert (a - b).abs().max() > 1e-4  # the adapter changes outputs
    torch.testing.assert_close(b, c, atol=1e-5, rtol=1e-5)
    lm = load_manifest(llama_run)
    llama = load_model("seq-math", lm, llama_run)
    assert type(llama).__name__.startswith("Llama")
    assert type(base).__name__.startswith("Qwen3")


def test_missing_folder_and_no_weights(fixture_run, cli):
    m = load_manifest(fixture_run)
    shutil.rmtree(fixture_run / "checkpoints" / "oracle-math")
    (fixture_run / "checkpoints" / "empty").mkdir()
    (fixture_run / "checkpoints" / "empty" / "config.json").write_text("{}")
    m.add(CheckpointSpec("empty", "checkpoints/empty", kind="stage", parent="base"))
    write_manifest(m, fixture_run)
    code, out, err = cli("checkpoints", "--run", str(fixture_run), "--json")
    rows = {r["name"]: r for r in json.loads(out)["checkpoints"]}
    assert "does not exist" in rows["oracle-math"]["problem"]
    assert "holds no weights" in rows["empty"]["problem"]
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model("oracle-math", m, fixture_run)


def test_pickle_refused_unless_allowed(fixture_run, cli):
    m = load_manifest(fixture_run)
    folder = fixture_run / "checkpoints" / "seq-math"
    model = load_model("seq-math", m, fixture_run)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="only pickle weights.*--allow-pickle"):
        load_model("seq-math", m, fixture_run)
    loaded = load_model("seq-math", m, fixture_run, LoadOptions(allow_pickle=True))
    sd = loaded.state_dict()
    torch.testing.assert_close(sd["model.layers.0.mlp.up_proj.weight"], model.state_dict()["model.layers.0.mlp.up_proj.weight"])
    code, out, _ = cli("checkpoints", "--run", str(fixture_run), "--json")
    row = next(r for r in json.loads(out)["checkpoints"] if r["name"] == "seq-math")
    assert not row["loadable"] and "pickle" in row["problem"]
    code, out, _ = cli("checkpoints", "--run", str(fixture_run), "--json", "--allow-pickle")
    row = next(r for r in json.loads(out)["checkpoints"] if r["name"] == "seq-math")
    assert row["loadable"]


def test_adapter_on_wrong_base(fixture_run, tmp_path, tokenizer):
    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config

    other = build_model(tiny_config(tokenizer, hidden_size=32, num_heads=2, num_kv_heads=1), seed=9)
    save_checkpoint(other, tokenizer, fixture_run / "checkpoints" / "small")
    m = load_manifest(fixture_run)
    m.add(CheckpointSpec("small", "checkpoints/small", kind="base"))
    m.add(CheckpointSpec("lora-wrong", "checkpoints/lora-ecom", kind="consolidated", on="small"))
    write_manifest(m, fixture_run)
    info = inspect(m.resolve("lora-wrong"), m, fixture_run)
    assert not info.loadable and "q_proj" in info.problem and "shape" in info.problem
    with pytest.raises(CheckpointError, match=r"lora-wrong.*shape"):
        load_model("lora-wrong", m, fixture_run)


def test_tokenizer_mismatch(fixture_run, tokenizer):
    from fixtures import corpus

    from aclarena.models.tiny import train_tokenizer

    other = train_tokenizer(corpus(seed=5)[:50], vocab_size=300)
    other.save_pretrained(fixture_run / "checkpoints" / "oracle-math")
    m = load_manifest(fixture_run)
    infos = inspect_all(m, fixture_run)
    assert tokenizer_fingerprint(fixture_run / "checkpoints" / "base") != tokenizer_fingerprint(
        fixture_run / "checkpoints" / "oracle-math")
    with pytest.raises(CheckpointError, match=r"tokenizers differ: 'base' .* 'oracle-math'"):
        require_same_tokenizer(infos)
    assert require_same_tokenizer([i for i in infos if i.name != "oracle-math"]) is not None


def test_hub_id_is_resolved_from_the_local_cache_only(tmp_path, monkeypatch):
    """A hub id not in the local Hugging Face cache is not loadable, said at once with the command that
    downloads it (issue 33: was loadable, then 30 s of retries offline); tests/reliability/test_hub_ids_offline.py
    covers a cached one."""
    import huggingface_hub.constants

    from aclarena.store.manifest import Manifest

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    m = Manifest(name="hub")
    m.add(CheckpointSpec("base", "Qwen/Qwen3-8B-Base", kind="base"))
    info = inspect(m.resolve("base"), m, tmp_path)
    assert not info.loadable and "`hf download Qwen/Qwen3-8B-Base`" in info.problem, info.problem


def test_chat_template_column_and_eval_fails_before_loading_the_model(fixture_run, cli, monkeypatch):
    """Issue 49: `checkpoints` had no chat-template column, and `eval` loaded a model whose tokenizer has no
    template before failing each of its cells. Issue 45: such a checkpoint is prompted as plain text; the chat
    format asked for it is refused before any model is loaded."""
    import aclarena.models.loading as loading

    ck = fixture_run / "checkpoints" / "seq-math"
    (ck / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((ck / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (ck / "tokenizer_config.json").write_text(json.dumps(cfg))
    code, out, err = cli("checkpoints", "--run", str(fixture_run), "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["checkpoints"]}
    assert rows["seq-math"]["chat_template"] is False and rows["base"]["chat_template"] is True
    assert rows["lora-ecom"]["chat_template"] is True  # an adapter without a tokenizer: its base's
    code, out, _ = cli("checkpoints", "--run", str(fixture_run))
    assert "template" in out and "no" in out.split("seq-math", 1)[1].splitlines()[0]
    loaded = []
    real = loading.load_model

    def spy(spec, *a, **k):
        loaded.append(getattr(spec, "name", spec))
        return real(spec, *a, **k)

    monkeypatch.setattr(loading, "load_model", spy)
    # issue 45: a checkpoint without a template is prompted as plain text (said in one note), not an error cell
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "seq-math", "--suites", "math/id",
                         "-n", "2", "--samples", "0", "--json")
    assert code == 0, err
    (cell,) = json.loads(out)["cells"]
    assert cell["status"] == "ok" and cell["prompt_format"] == "plain" and "no chat template" in err
    # the chat format asked for it is refused in one line, before the weights are read
    loaded.clear()
    toml = fixture_run / "aclarena.toml"
    toml.write_text(toml.read_text().replace('phase = "rl"\n', 'phase = "rl"\nprompt_format = "chat"\n', 1))
    code, out, err = cli("eval", "--run", str(fixture_run), "--checkpoints", "seq-math", "--suites", "math/id",
                         "-n", "2", "--samples", "0", "--json", "--force")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "no chat template" in err, err
    assert loaded == []  # refused on its tokenizer, before the weights were read
