"""Non-finite models past load_model (issue 15): weights that vLLM or peft read themselves, and LoRA
adapters whose adapter_config.json is of the wrong shape or contradicts its weights or its base.

vLLM is not installed on the CPU machines: the vLLM path is driven with a stand-in ``vllm`` module
that records whether an engine was built, so the tests show the check runs before vLLM would read
a byte, and the check itself is called directly."""

from __future__ import annotations

import copy
import json
import shutil
import sys
import types
from pathlib import Path

import pytest
from distributed_helpers import file_hash
from reliability_helpers import VERB_ARGV, _poison, fill, seed_store

from aclarena.errors import AclarenaError, CheckpointError
from aclarena.models.checkpoint import NonFiniteWeightsError

ADAPTER = ("checkpoints", "lora-ecom")


class FakeLLM:
    """Stands in for vllm.LLM: records its construction, then fails as an engine that cannot start."""

    built: list[dict] = []

    def __init__(self, **kwargs):
        FakeLLM.built.append(kwargs)
        raise ValueError("stand-in engine: no GPU here")


@pytest.fixture()
def fake_vllm(monkeypatch):
    FakeLLM.built = []
    mod = types.ModuleType("vllm")
    mod.LLM = FakeLLM
    lora = types.ModuleType("vllm.lora")
    req = types.ModuleType("vllm.lora.request")
    req.LoRARequest = lambda *a: a
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", req)
    return FakeLLM


def _poison_adapter(run: Path, value: float) -> Path:
    from safetensors.torch import load_file, save_file

    f = run.joinpath(*ADAPTER) / "adapter_model.safetensors"
    tensors = load_file(f)
    name = next(k for k in tensors if "lora_B" in k)
    tensors[name][0, 0] = value
    save_file(tensors, f, metadata={"format": "pt"})
    return f.parent


def _edit_adapter_config(folder: Path, fn) -> None:
    f = folder / "adapter_config.json"
    f.write_text(json.dumps(fn(json.loads(f.read_text()))))


# --- the check itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("value, what", [(float("nan"), "NaN"), (float("inf"), "infinite"), (float("-inf"), "infinite")])
def test_check_finite_safetensors_names_the_tensor(tmp_path, value, what):
    import torch
    from safetensors.torch import save_file

    from aclarena.models.tensors import check_finite_safetensors

    f = tmp_path / "model.safetensors"
    good = {"a.weight": torch.ones(3, 5), "b.weight": torch.zeros(7, dtype=torch.bfloat16), "ids": torch.arange(4)}
    save_file(good, f)
    check_finite_safetensors([f], "x")  # finite: no error
    bad = dict(good)
    bad["b.weight"] = bad["b.weight"].clone()
    bad["b.weight"][6] = value
    save_file(bad, f)
    with pytest.raises(NonFiniteWeightsError, match=rf"^checkpoint 'x' has {what} weights \(tensor b\.weight in "):
        check_finite_safetensors([f], "x", chunk=2)  # the bad entry is in the last chunk of the tensor


# --- the vLLM path ------------------------------------------------------------------------------


@pytest.mark.parametrize("value, what", [(float("nan"), "NaN"), (float("-inf"), "infinite")])
def test_vllm_engine_is_never_built_on_nonfinite_weights(fixture_run, tmp_path, cli, fake_vllm, value, what):
    seed_store(fixture_run)
    argv = fill([*VERB_ARGV["probe"], "--engine", "vllm"], fixture_run, tmp_path)
    # healthy weights reach the engine (the stand-in then fails as an engine would, in one line)
    code, _, err = cli(*argv)
    assert code == 1 and len(fake_vllm.built) == 1, err
    assert "vLLM cannot load 'seq-math'" in err
    _poison(fixture_run, value)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*argv)
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"aclarena-diag probe: error: checkpoint 'seq-math' has {what} weights (tensor "), lines[0]
    assert len(fake_vllm.built) == 1  # no engine was built on the poisoned weights
    assert file_hash(fixture_run / "results.h5") == before


def test_load_llm_checks_before_vllm(fixture_run):
    """Without vLLM at all: the check load_llm runs, called directly on the inspected checkpoint."""
    from aclarena.models.checkpoint import inspect
    from aclarena.models.tensors import check_finite_checkpoint
    from aclarena.store.manifest import load_manifest

    m = load_manifest(fixture_run)
    check_finite_checkpoint(inspect(m.resolve("seq-math"), m, fixture_run))
    _poison(fixture_run, float("nan"))
    with pytest.raises(NonFiniteWeightsError, match="checkpoint 'seq-math' has NaN weights"):
        check_finite_checkpoint(inspect(m.resolve("seq-math"), m, fixture_run))


# --- LoRA adapters: NaN weights -----------------------------------------------------------------


def test_tokens_refuses_an_adapter_with_nan_weights(fixture_run, tmp_path, cli):
    seed_store(fixture_run)
    code, _, err = cli(*fill(VERB_ARGV["probe"], fixture_run, tmp_path))  # the reference's probe set first
    assert code == 0, err
    _poison_adapter(fixture_run, float("nan"))
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(["tokens", "--ref", "seq-math", "--against", "lora-ecom"], fixture_run, tmp_path))
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("aclarena-diag tokens: error: checkpoint 'lora-ecom' has NaN weights"), lines[0]
    assert file_hash(fixture_run / "results.h5") == before


@pytest.mark.parametrize("argv, needle", [
    (["vectors"], "'lora-ecom' has NaN or inf weights"),
    (["displacement"], "'lora-ecom' has NaN or inf weights"),
    (["eval", "--checkpoints", "lora-ecom", "--suites", "math/id", "-n", "1", "--samples", "0"],
     "'lora-ecom' has NaN weights"),
], ids=["vectors", "displacement", "eval"])
def test_other_verbs_refuse_an_adapter_with_nan_weights(fixture_run, tmp_path, cli, argv, needle):
    """The other readers of a manifest adapter (parameter diagnostics read its factors; eval loads it):
    one line, store unchanged (eval stores no cell: an error cell would look like a measurement)."""
    seed_store(fixture_run)
    _poison_adapter(fixture_run, float("nan"))
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(argv, fixture_run, tmp_path))
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert needle in lines[0], lines[0]
    assert file_hash(fixture_run / "results.h5") == before


@pytest.fixture()
def seq_search(fixture_run):
    from aclarena.models.loading import load_model
    from aclarena.store.manifest import load_manifest

    return load_model("seq-search", load_manifest(fixture_run), fixture_run)


def test_serving_and_merging_refuse_an_adapter_with_nan_weights(fixture_run, tmp_path, tokenizer, seq_search):
    from aclarena.consolidate.lora_merge import merge_lora_adapters
    from aclarena.consolidate.routers import RuleRouter
    from aclarena.consolidate.serving import PeftExpertServer

    folder = fixture_run.joinpath(*ADAPTER)
    # healthy: both accept it
    PeftExpertServer(copy.deepcopy(seq_search), tokenizer, {"ecom": folder}, RuleRouter(("ecom",)))
    merge_lora_adapters(copy.deepcopy(seq_search), [("a", folder)], [0.5], tmp_path / "ok")
    _poison_adapter(fixture_run, float("inf"))
    with pytest.raises(NonFiniteWeightsError, match=r"^checkpoint 'ecom' has infinite weights \(tensor .*lora_B"):
        PeftExpertServer(copy.deepcopy(seq_search), tokenizer, {"ecom": folder}, RuleRouter(("ecom",)))
    with pytest.raises(NonFiniteWeightsError, match="has infinite weights"):
        merge_lora_adapters(copy.deepcopy(seq_search), [("a", folder)], [0.5], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_vllm_expert_server_checks_experts_and_backbone(fixture_run, fake_vllm):
    from aclarena.consolidate.routers import RuleRouter
    from aclarena.consolidate.serving import VllmExpertServer

    folder = fixture_run.joinpath(*ADAPTER)
    backbone = fixture_run / "checkpoints" / "seq-search"
    with pytest.raises(ValueError, match="stand-in engine"):  # healthy: handed to vLLM
        VllmExpertServer(backbone, {"ecom": folder}, RuleRouter(("ecom",)))
    assert len(fake_vllm.built) == 1
    _poison_adapter(fixture_run, float("nan"))
    with pytest.raises(NonFiniteWeightsError, match="'ecom' has NaN weights"):
        VllmExpertServer(backbone, {"ecom": folder}, RuleRouter(("ecom",)))
    _poison(fixture_run, float("nan"), "seq-search")
    _poison_adapter(fixture_run, 0.0)
    with pytest.raises(NonFiniteWeightsError, match="has NaN weights .*down_proj"):
        VllmExpertServer(backbone, {"ecom": folder}, RuleRouter(("ecom",)))
    assert len(fake_vllm.built) == 1


# --- LoRA adapters: adapter_config.json of the wrong shape or contradicting fields ----------------

BAD_CONFIGS = [
    ("not an object", lambda c: [c], "not a JSON object"),
    ("r a string", lambda c: c | {"r": "4"}, "`r` must be a positive integer"),
    ("r zero", lambda c: c | {"r": 0}, "`r` must be a positive integer"),
    ("r contradicts the weights", lambda c: c | {"r": 8}, "rank 8 for"),
    ("rank_pattern contradicts the weights", lambda c: c | {"rank_pattern": {"q_proj": 2}}, "rank 2 for"),
    ("target_modules a number", lambda c: c | {"target_modules": 5}, "`target_modules` must be a list"),
    ("target_modules of numbers", lambda c: c | {"target_modules": [1, 2]}, "`target_modules` must be a list"),
    ("target_modules a bad regex", lambda c: c | {"target_modules": "q_proj("}, "not a regular expression"),
    ("target_modules contradicts the weights", lambda c: c | {"target_modules": ["k_proj"]}, "does not select"),
    ("use_rslora a string", lambda c: c | {"use_rslora": "false"}, "`use_rslora` must be true or false"),
    ("modules_to_save a string", lambda c: c | {"modules_to_save": "lm_head"}, "`modules_to_save` must be a list"),
    ("base_model_name_or_path a number", lambda c: c | {"base_model_name_or_path": 3},
     "`base_model_name_or_path` must be a string"),
]


def _other_base(run: Path) -> Path:
    return (run / "checkpoints" / "base").resolve()  # same architecture, other weights


def _bad_config(run: Path, fn) -> Path:
    folder = run.joinpath(*ADAPTER)
    if fn == "other base":
        _edit_adapter_config(folder, lambda c: c | {"base_model_name_or_path": str(_other_base(run))})
    else:
        _edit_adapter_config(folder, fn)
    return folder


CASES = [*BAD_CONFIGS, ("base_model_name_or_path names another base", "other base", "does not belong on")]


@pytest.mark.parametrize("label, fn, needle", CASES, ids=[c[0] for c in CASES])
def test_adapter_config_checks_everywhere_adapters_are_read(fixture_run, tmp_path, cli, tokenizer, seq_search,
                                                            label, fn, needle):
    from aclarena.consolidate.lora_merge import merge_lora_adapters
    from aclarena.consolidate.routers import RuleRouter
    from aclarena.consolidate.serving import PeftExpertServer, adapter_settings

    folder = _bad_config(fixture_run, fn)
    # `checkpoints` lists it as not loadable with the reason
    code, out, err = cli("checkpoints", "--json", "--run", str(fixture_run))
    assert code == 0, err
    row = {r["name"]: r for r in json.loads(out)["checkpoints"]}["lora-ecom"]
    assert row["loadable"] is False and needle in row["problem"], row
    # a verb that loads it: one line, store unchanged
    seed_store(fixture_run)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli(*fill(["tokens", "--ref", "seq-math", "--against", "lora-ecom"], fixture_run, tmp_path))
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert "lora-ecom" in lines[0] and needle in lines[0], lines[0]
    assert file_hash(fixture_run / "results.h5") == before
    # serving and merging (which take adapter folders, not manifest names)
    with pytest.raises(CheckpointError, match=needle) as e:
        PeftExpertServer(copy.deepcopy(seq_search), tokenizer, {"ecom": folder}, RuleRouter(("ecom",)))
    assert "\n" not in str(e.value) and "'ecom'" in str(e.value)
    with pytest.raises(CheckpointError, match=needle):
        merge_lora_adapters(copy.deepcopy(seq_search), [("a", folder)], [0.5], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
    if fn in ("other base",) or label.startswith(("r contradicts", "rank_pattern", "target_modules contradicts")):
        adapter_settings(folder)  # the config alone is well formed
    else:
        with pytest.raises(CheckpointError, match=needle):
            adapter_settings(folder)


def test_a_copy_of_the_base_elsewhere_is_the_same_base(fixture_run, tmp_path, tokenizer, seq_search):
    """base_model_name_or_path naming a copy of the base (a run folder moved or copied) is accepted;
    the same path naming other weights of the same shapes is refused."""
    from aclarena.consolidate.routers import RuleRouter
    from aclarena.consolidate.serving import PeftExpertServer
    from aclarena.models.checkpoint import inspect
    from aclarena.store.manifest import load_manifest

    copy_dir = tmp_path / "elsewhere" / "seq-search"
    shutil.copytree(fixture_run / "checkpoints" / "seq-search", copy_dir)
    folder = fixture_run.joinpath(*ADAPTER)
    _edit_adapter_config(folder, lambda c: c | {"base_model_name_or_path": str(copy_dir)})
    m = load_manifest(fixture_run)
    assert inspect(m.resolve("lora-ecom"), m, fixture_run).problem is None
    PeftExpertServer(copy.deepcopy(seq_search), tokenizer, {"ecom": folder}, RuleRouter(("ecom",)))
    shutil.rmtree(copy_dir)
    shutil.copytree(fixture_run / "checkpoints" / "seq-math", copy_dir)  # same shapes, other bytes
    problem = inspect(m.resolve("lora-ecom"), m, fixture_run).problem
    assert problem is not None and "does not belong on 'seq-search'" in problem, problem
    with pytest.raises(AclarenaError, match="does not belong on this model"):
        PeftExpertServer(copy.deepcopy(seq_search), tokenizer, {"ecom": folder}, RuleRouter(("ecom",)))
