"""Streaming merges of whole checkpoints and peft LoRA merges, checked against the formulas."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from aclarena.consolidate import merging as M
from aclarena.consolidate.checkpoint_merge import MergeSpec, merge_checkpoints
from aclarena.errors import AclarenaError, CheckpointError
from aclarena.models.checkpoint import inspect
from aclarena.store import load_manifest


def _infos(run):
    m = load_manifest(run)
    return m, {s.name: inspect(s, m, run) for s in m}


def _weights(run, name):
    folder = run / "checkpoints" / name
    return load_file(str(folder / "model.safetensors"))


def _load_merged(folder):
    out = {}
    index = folder / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    for f in files:
        out |= load_file(str(folder / f))
    return out


@pytest.mark.parametrize("spec", [
    MergeSpec("uniform"),
    MergeSpec("task_arithmetic", lam=0.6),
    MergeSpec("ties", density=0.3, lam=0.9),
    MergeSpec("dare", p=0.5, lam=0.5, seed=3),
])
def test_merged_weights_equal_the_formula(fixture_run, spec, tmp_path):
    _, infos = _infos(fixture_run)
    names = ["seq-math", "seq-search", "oracle-math"]
    base = _weights(fixture_run, "base")
    models = [_weights(fixture_run, n) for n in names]
    out = tmp_path / "merged"
    # a small shard size and block size: several shards, tensors written in row blocks
    res = merge_checkpoints([infos[n] for n in names], spec, out, base=infos["base"], max_shard_bytes=20_000,
                            block_elements=97)
    assert not res.reused and res.n_tensors == len(base)
    got = _load_merged(out)
    assert (out / "model.safetensors.index.json").is_file()
    assert set(got) == set(base)
    for name in base:
        ts = [m[name] for m in models]
        if spec.method == "uniform":
            want = M.uniform(ts)
        elif spec.method == "task_arithmetic":
            want = base[name].float() + spec.lam * sum(t.float() - base[name].float() for t in ts)
        elif spec.method == "ties":
            want = M.ties(base[name], ts, density=spec.density, lam=spec.lam)
        else:
            want = M.dare(base[name], ts, p=spec.p, lam=spec.lam, seed=spec.seed, tensor=name)
        torch.testing.assert_close(got[name], want, rtol=1e-6, atol=1e-6, msg=name)
    # an ordinary HF folder: config and tokenizer beside the weights, loads and generates
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template
    sd = model.state_dict()
    torch.testing.assert_close(sd["model.layers.0.mlp.up_proj.weight"], got["model.layers.0.mlp.up_proj.weight"])
    # a rerun with the same inputs reuses the folder
    again = merge_checkpoints([infos[n] for n in names], spec, out, base=infos["base"])
    assert again.reused


def test_uniform_merge_does_not_need_a_base_and_dare_is_repeatable(fixture_run, tmp_path):
    _, infos = _infos(fixture_run)
    a = merge_checkpoints([infos["seq-math"], infos["seq-search"]], MergeSpec("uniform"), tmp_path / "u")
    assert a.base is None
    d1 = merge_checkpoints([infos["seq-math"]], MergeSpec("dare", p=0.5, seed=1), tmp_path / "d1", base=infos["base"])
    d2 = merge_checkpoints([infos["seq-math"]], MergeSpec("dare", p=0.5, seed=1), tmp_path / "d2", base=infos["base"])
    assert _load_merged(d1.folder).keys() == _load_merged(d2.folder).keys()
    for k, v in _load_merged(d1.folder).items():
        assert torch.equal(v, _load_merged(d2.folder)[k])


def test_different_architectures_are_refused(fixture_run, llama_run, tmp_path):
    _, qi = _infos(fixture_run)
    _, li = _infos(llama_run)
    with pytest.raises(CheckpointError, match="cannot merge .*Qwen3ForCausalLM.*LlamaForCausalLM.*one architecture") as e:
        merge_checkpoints([qi["seq-math"], li["seq-math"]], MergeSpec("uniform"), tmp_path / "x")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "x").exists()


def test_adapters_and_missing_base_are_refused(fixture_run, tmp_path):
    _, infos = _infos(fixture_run)
    with pytest.raises(CheckpointError, match="LoRA adapter"):
        merge_checkpoints([infos["seq-math"], infos["lora-ecom"]], MergeSpec("uniform"), tmp_path / "x")
    with pytest.raises(AclarenaError, match="name the base"):
        merge_checkpoints([infos["seq-math"]], MergeSpec("ties"), tmp_path / "x")
    with pytest.raises(AclarenaError, match="did you mean 'ties'"):
        MergeSpec("tie")


def test_other_tokenizer_is_refused(fixture_run, tmp_path):
    m, _ = _infos(fixture_run)
    other = tmp_path / "other"
    shutil.copytree(fixture_run / "checkpoints" / "seq-math", other)
    tj = json.loads((other / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    a, b = list(vocab)[10:12]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tj))
    from aclarena.store.manifest import CheckpointSpec

    spec = CheckpointSpec("other", str(other), kind="stage", parent="base")
    m.add(spec)
    with pytest.raises(CheckpointError, match="tokenizers differ.*mix token ids"):
        merge_checkpoints([inspect(m.resolve("seq-math"), m, fixture_run), inspect(spec, m, fixture_run)],
                          MergeSpec("uniform"), tmp_path / "x")


def test_lora_cat_merge_is_the_sum_of_deltas_and_linear_is_not(fixture_run, tmp_path):
    import copy

    from fixtures import make_lora
    from peft import PeftModel

    from aclarena.consolidate.lora_merge import merge_lora_adapters
    from aclarena.models.tensors import read_lora

    m, infos = _infos(fixture_run)
    from aclarena.models.loading import load_model

    base = load_model("seq-search", m, fixture_run)
    second = make_lora(base, tmp_path / "lora-b", seed=9, r=2)
    first = fixture_run / "checkpoints" / "lora-ecom"
    weights = [0.7, -0.4]
    out = merge_lora_adapters(copy.deepcopy(base), [("a", first), ("b", second)], weights, tmp_path / "cat")
    from aclarena.store.manifest import CheckpointSpec

    for name, folder in (("a", first), ("b", second), ("cat", out)):
        m.add(CheckpointSpec(f"x-{name}", str(folder), kind="consolidated", on="seq-search"), replace_existing=True)
    deltas = {n: read_lora(inspect(m.resolve(f"x-{n}"), m, fixture_run)) for n in ("a", "b", "cat")}
    targets = set(deltas["a"]) | set(deltas["b"])
    assert set(deltas["cat"]) == targets
    for t in targets:
        want = sum(w * deltas[n][t].dense() for n, w in zip(("a", "b"), weights, strict=True) if t in deltas[n])
        torch.testing.assert_close(deltas["cat"][t].dense(), want, rtol=1e-5, atol=1e-6)
    # the merged adapter changes the model's outputs exactly as the summed deltas do
    merged_model = PeftModel.from_pretrained(copy.deepcopy(base), str(out)).merge_and_unload()
    sd = merged_model.state_dict()
    key = "model.layers.0.self_attn.q_proj.weight"
    torch.testing.assert_close(sd[key].double(), base.state_dict()[key].double() + deltas["cat"][key].dense(),
                               rtol=1e-5, atol=1e-6)
    # 'linear' (equal ranks) mixes A and B separately: its delta has cross terms, not the sum
    same = make_lora(base, tmp_path / "lora-c", seed=10, r=4)
    pm = PeftModel.from_pretrained(copy.deepcopy(base), str(first), adapter_name="a")
    pm.load_adapter(str(same), adapter_name="c")
    pm.add_weighted_adapter(["a", "c"], [0.5, 0.5], "lin", combination_type="linear")
    pm.save_pretrained(str(tmp_path / "lin"), selected_adapters=["lin"])
    m.add(CheckpointSpec("x-c", str(same), kind="consolidated", on="seq-search"))
    m.add(CheckpointSpec("x-lin", str(tmp_path / "lin" / "lin"), kind="consolidated", on="seq-search"))
    lin = read_lora(inspect(m.resolve("x-lin"), m, fixture_run))
    dc = read_lora(inspect(m.resolve("x-c"), m, fixture_run))
    want = 0.5 * deltas["a"][key].dense() + 0.5 * dc[key].dense()
    assert (lin[key].dense() - want).abs().max() > 1e-3 * want.abs().max()


def test_chain_stage_ends_merge_their_stage_updates(fixture_run, cli):
    """merge-ta of base -> seq-math -> seq-search at λ = 1 is seq-search itself, not base + 2 δ_math + δ_search."""
    code, out, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ta", "--lambdas", "1,0.5",
                         "--json")
    assert code == 0, err
    res = json.loads(out)
    settings = res["outputs"][0]["settings"]
    assert settings["sources"] == ["seq-math", "seq-search"]
    assert settings["updates_from"] == ["base", "seq-math"]
    base, end = _weights(fixture_run, "base"), _weights(fixture_run, "seq-search")
    merged = _load_merged(fixture_run / "checkpoints" / "merge-ta-l1")
    half = _load_merged(fixture_run / "checkpoints" / "merge-ta-l0.5")
    moved = 0.0
    for name in base:
        torch.testing.assert_close(merged[name], end[name].float(), rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(half[name], base[name].float() + 0.5 * (end[name].float() - base[name].float()),
                                   rtol=1e-5, atol=1e-6, msg=name)
        moved += float((end[name].float() - base[name].float()).abs().sum())
    assert moved > 0  # the fixture's stages did change the weights
    marker = json.loads((fixture_run / "checkpoints" / "merge-ta-l1" / "consolidation.json").read_text())
    assert marker["updates_from"] == ["base", "seq-math"]
    # oracles (each from the base) keep θ_i − θ_base
    code, out, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ta", "--lambdas", "1",
                         "--sources", "oracle-math,seq-math", "--json")
    assert code == 0, err
    assert json.loads(out)["outputs"][0]["settings"]["updates_from"] == ["base", "base"]


@pytest.mark.parametrize("method", ["merge-ties", "merge-dare"])
def test_lam_zero_is_used_not_replaced_by_the_default(fixture_run, cli, method):
    """`--lam 0` is a valid λ (the base itself); it used to be read as 'not given' (`lam or 1.0`)."""
    code, out, err = cli("consolidate", "--run", str(fixture_run), "--method", method, "--lam", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["outputs"][0]["settings"]["merge"]["lam"] == 0.0
    base = _weights(fixture_run, "base")
    merged = _load_merged(fixture_run / "checkpoints" / method)
    for name in base:
        torch.testing.assert_close(merged[name], base[name].float(), rtol=0, atol=0, msg=name)


def test_empty_lambdas_are_refused(fixture_run, cli):
    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ta", "--lambdas", "")
    assert code == 1 and "--lambdas is empty" in err and len(err.strip().splitlines()) == 1
