"""Issue 45 item 2: merges with LoRA adapters among the sources, against the float64 merge of the densified
checkpoints (an adapter is the model it is on plus ``s·B·A``); an adapter on another model is one line."""

from __future__ import annotations

import json

import pytest
import torch
from lora_helpers import add_adapters, dense64, snapshot
from safetensors.torch import load_file

from aclarena.consolidate import merging
from aclarena.store import load_manifest


@pytest.fixture()
def lora_run(fixture_run):
    return add_adapters(fixture_run)


def _full(folder):
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def test_uniform_of_a_full_checkpoint_and_an_adapter_on_it(lora_run, cli):
    code, out, err = cli("consolidate", "--run", str(lora_run), "--method", "merge-uniform",
                         "--sources", "seq-search,lora-a", "--name", "mix", "--json")
    assert code == 0, err
    got = _full(lora_run / "checkpoints" / "mix")
    a, b = dense64(lora_run, "seq-search"), dense64(lora_run, "lora-a")
    assert set(got) == set(a)
    moved = 0
    for name, t in got.items():
        torch.testing.assert_close(t.double(), (a[name] + b[name]) / 2, rtol=0, atol=1e-6, msg=name)
        moved += not torch.equal(t.double(), a[name])
    assert moved > 0
    assert load_manifest(lora_run).resolve("mix").on is None  # a full checkpoint


def test_task_arithmetic_of_adapters_is_an_adapter_with_the_summed_deltas(lora_run, cli):
    code, out, err = cli("consolidate", "--run", str(lora_run), "--method", "merge-ta", "--lambdas", "0.5,1",
                         "--sources", "lora-a,lora-b", "--name", "ta", "--json")
    assert code == 0, err
    on, a, b = (dense64(lora_run, n) for n in ("seq-search", "lora-a", "lora-b"))
    for lam in (0.5, 1.0):
        name = f"ta-l{lam:g}"
        assert load_manifest(lora_run).resolve(name).on == "seq-search"
        got = dense64(lora_run, name)
        for t in got:
            want = on[t] + lam * ((a[t] - on[t]) + (b[t] - on[t]))
            torch.testing.assert_close(got[t], want, rtol=0, atol=1e-6, msg=t)


@pytest.mark.parametrize("method", ["merge-ties", "merge-dare"])
def test_ties_and_dare_of_adapters_merge_the_densified_adapters(lora_run, cli, method):
    """No exact low-rank form: each adapter is densified tensor by tensor and the result is a full checkpoint;
    the updates start at the run's base (neither adapter is an ancestor of the other)."""
    code, out, err = cli("consolidate", "--run", str(lora_run), "--method", method, "--sources", "lora-a,lora-b",
                         "--name", "td", "--json")
    assert code == 0, err
    settings = json.loads(out)["outputs"][0]["settings"]
    assert settings["updates_from"] == ["base", "base"]
    base, a, b = (dense64(lora_run, n) for n in ("base", "lora-a", "lora-b"))
    got = _full(lora_run / "checkpoints" / "td")
    m = settings["merge"]
    for name, t in got.items():
        models = [a[name].float(), b[name].float()]
        if method == "merge-ties":
            want = merging.ties(base[name], models, density=m["density"], lam=m["lam"])
        else:
            want = merging.dare(base[name], models, p=m["p"], lam=m["lam"], seed=m["seed"], tensor=name)
        torch.testing.assert_close(t, want.to(t.dtype), rtol=0, atol=1e-6, msg=name)


def test_an_adapter_on_another_model_is_one_line_and_writes_nothing(lora_run, cli, tokenizer):
    """lora-wrong was trained on base but the manifest puts it on seq-search."""
    from fixtures import make_lora
    from transformers import AutoModelForCausalLM

    from aclarena.store.manifest import CheckpointSpec, write_manifest

    model = AutoModelForCausalLM.from_pretrained(lora_run / "checkpoints" / "base", dtype=torch.float32)
    make_lora(model, lora_run / "checkpoints" / "lora-wrong", seed=30, r=8)
    m = load_manifest(lora_run)
    m.add(CheckpointSpec("lora-wrong", "checkpoints/lora-wrong", kind="stage", domain="ecom", parent="seq-search",
                         on="seq-search"))
    write_manifest(m, lora_run)
    before = snapshot(lora_run)
    for sources, method in (("seq-search,lora-wrong", "merge-uniform"), ("lora-a,lora-wrong", "merge-ta"),
                            ("lora-a,lora-wrong", "merge-ties")):
        code, out, err = cli("consolidate", "--run", str(lora_run), "--method", method, "--sources", sources,
                             "--name", "bad")
        assert code == 1 and out == ""
        assert "does not belong on 'seq-search'" in err and len(err.strip().splitlines()) == 1, err
        assert snapshot(lora_run) == before


def test_an_adapter_with_nan_weights_is_one_line_for_repair_and_merges(lora_run, cli):
    from safetensors.torch import load_file, save_file

    f = lora_run / "checkpoints" / "lora-a" / "adapter_model.safetensors"
    tensors = load_file(f)
    name = next(k for k in tensors if "lora_B" in k)
    tensors[name][0, 0] = float("nan")
    save_file(tensors, f, metadata={"format": "pt"})
    before = snapshot(lora_run)
    for argv in (["repair", "--from", "seq-search", "--to", "lora-a", "--method", "dg-hard", "--name", "bad"],
                 ["repair", "--from", "lora-a", "--to", "lora-b", "--method", "svd-restore", "--name", "bad"],
                 ["consolidate", "--method", "merge-ties", "--sources", "lora-a,lora-b", "--name", "bad"],
                 ["consolidate", "--method", "merge-uniform", "--sources", "seq-search,lora-a", "--name", "bad"]):
        code, out, err = cli(argv[0], "--run", str(lora_run), *argv[1:])
        assert code == 1 and out == "", (argv, err)
        assert "'lora-a' has NaN weights" in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert snapshot(lora_run) == before
