"""A chain of LoRA adapters (issue 45, found on Gemma 3 270M): a stage trained from an adapter stage is an adapter
on that adapter. `vectors` and `displacement` refused it ("applied on another adapter") and `repair` between the two
stages was refused ("a LoRA adapter on 'base' and a LoRA adapter on 'sft-math'"); each now reads the chain as the
sum of its deltas on the full model at its end. Checked against the weights PEFT itself merges (vectors,
displacement) and the dense float64 repair of the densified checkpoints (repair)."""

from __future__ import annotations

import json

import pytest
import torch
from lora_helpers import dense64
from vectors_helpers import cos, flat

from aclarena.diagnostics import repair as R
from aclarena.diagnostics.task_vectors import LoraFactors, stack_loras
from aclarena.models.loading import LoadOptions, load_model
from aclarena.store.manifest import CheckpointSpec, load_manifest, write_manifest


@pytest.fixture()
def chain_run(fixture_run):
    """lora-stack: an adapter on lora-ecom (itself an adapter on seq-search), trained from lora-ecom's merged weights."""
    from fixtures import make_lora

    run = fixture_run
    merged = load_model("lora-ecom", load_manifest(run), run, LoadOptions(dtype="float32", merge_adapter=True))
    folder = make_lora(merged, run / "checkpoints" / "lora-stack", seed=31, r=4)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str((run / "checkpoints" / "lora-ecom").resolve())  # as the benchmark saves it
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    m = load_manifest(run)
    m.add(CheckpointSpec("lora-stack", "checkpoints/lora-stack", kind="stage", domain="geo", phase="sft",
                         parent="lora-ecom", on="lora-ecom"))
    write_manifest(m, run)
    return run


def _merged(run, name):
    model = load_model(name, load_manifest(run), run, LoadOptions(dtype="float32", merge_adapter=True))
    return {k: v.detach() for k, v in model.state_dict().items() if k != "lm_head.weight"}


def test_stack_loras_is_the_sum_of_the_deltas():
    g = torch.Generator().manual_seed(0)
    x = LoraFactors(A=torch.randn(3, 7, generator=g), B=torch.randn(5, 3, generator=g), scale=2.0)
    y = LoraFactors(A=torch.randn(2, 7, generator=g), B=torch.randn(5, 2, generator=g), scale=0.5)
    z = LoraFactors(A=torch.randn(2, 4, generator=g), B=torch.randn(6, 2, generator=g), scale=1.5)
    out = stack_loras([{"w": x, "v": z}, {"w": y}])
    assert out["w"].rank == 5 and out["v"] is z
    torch.testing.assert_close(out["w"].dense(), x.dense() + y.dense(), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="shapes"):
        stack_loras([{"w": x}, {"w": z}])


def test_vectors_and_displacement_read_an_adapter_on_an_adapter(chain_run, cli):
    code, out, err = cli("vectors", "--run", str(chain_run), "--json")
    assert code == 0, err  # refused before: "adapter 'lora-stack' is applied on another adapter"
    data = json.loads(out)
    sd = {n: _merged(chain_run, n) for n in ("base", "seq-math", "seq-search", "oracle-math", "lora-ecom", "lora-stack")}
    names = sorted(sd["base"])
    full = {n: flat(s, names) for n, s in sd.items()}
    vecs = {v["label"]: full[v["plus"]] - full[v["minus"]] for v in data["vectors"]}
    assert "lora-stack - lora-ecom" in vecs
    labels = data["cosines"]["labels"]
    for i, a in enumerate(labels):
        for j, b in enumerate(labels):
            assert data["cosines"]["matrix"][i][j] == pytest.approx(cos(vecs[a], vecs[b]), abs=1e-6), (a, b)
    for v in data["vectors"]:
        assert v["norm"] == pytest.approx(float(vecs[v["label"]].norm()), rel=1e-6)

    code, out, err = cli("displacement", "--run", str(chain_run), "--json")
    assert code == 0, err
    norms = {u["checkpoint"]: u["norm"] for u in json.loads(out)["updates"]}
    want = float((full["lora-stack"] - full["lora-ecom"]).norm())
    assert want > 0 and norms["lora-stack"] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize(("method", "extra"), [("svd-restore", ["--rank-percent", "5"]), ("dg-hard", [])])
def test_repair_between_two_stages_of_an_adapter_chain_is_the_dense_float64_repair(chain_run, cli, method, extra):
    code, out, err = cli("repair", "--run", str(chain_run), "--from", "lora-ecom", "--to", "lora-stack",
                         "--method", method, *extra, "--name", "fix", "--json")
    assert code == 0, err  # refused before: an adapter on 'seq-search' and one on 'lora-ecom'
    row = json.loads(out)["outputs"][0]
    spec = load_manifest(chain_run).resolve("fix")
    assert (spec.parent, spec.on) == ("lora-stack", "seq-search")  # an adapter on the chain's full model
    cfg = json.loads((chain_run / "checkpoints" / "fix" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str((chain_run / "checkpoints" / "seq-search").resolve())
    got = dense64(chain_run, "fix")
    w_old, w_new = dense64(chain_run, "lora-ecom"), dense64(chain_run, "lora-stack")
    removed = total = 0.0
    changed = 0
    for name, t in got.items():
        sq = float(((w_new[name] - w_old[name]) ** 2).sum())
        total += sq
        res = (R.svd_restore(w_old[name], w_new[name], 5.0, compute_dtype=torch.float64) if method == "svd-restore"
               else R.dg_hard(w_old[name], w_new[name], compute_dtype=torch.float64))
        removed += res.energy_removed * sq
        torch.testing.assert_close(t, res.tensor, rtol=0, atol=2e-6)
        changed += not torch.equal(t, w_new[name])
    assert changed > 0
    assert row["energy_removed"] == pytest.approx(removed / total, abs=1e-6)
    # PEFT loads the output on seq-search and gives the same weights
    merged = _merged(chain_run, "fix")
    for name, t in got.items():
        torch.testing.assert_close(merged[name].double(), t, rtol=0, atol=2e-6)


def test_init_finds_the_chain_and_checkpoints_loads_it(chain_run, cli, tmp_path):
    """`init` takes each adapter's `on` from its base_model_name_or_path (an adapter folder for the second stage),
    and `checkpoints --strict` finds every row loadable (the second stage was refused: its LoRA tensors were
    checked against its base adapter's tensors)."""
    ck = chain_run / "checkpoints"
    cfg = json.loads((ck / "lora-ecom" / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str((ck / "seq-search").resolve())
    (ck / "lora-ecom" / "adapter_config.json").write_text(json.dumps(cfg))
    run = tmp_path / "chain"
    code, _, err = cli("init", "--run", str(run), f"base={ck / 'base'}", f"seq-search={ck / 'seq-search'}",
                       f"lora-ecom={ck / 'lora-ecom'}", f"lora-stack={ck / 'lora-stack'}")
    assert code == 0, err
    m = load_manifest(run)
    assert (m.resolve("lora-ecom").on, m.resolve("lora-ecom").parent) == ("seq-search", "seq-search")
    assert (m.resolve("lora-stack").on, m.resolve("lora-stack").parent) == ("lora-ecom", "lora-ecom")
    code, out, err = cli("checkpoints", "--run", str(run), "--strict", "--json")
    assert code == 0, err


@pytest.mark.parametrize("method", ["merge-uniform", "merge-ties"])
def test_a_merge_of_an_adapter_chain_is_one_line_and_writes_nothing(chain_run, cli, method):
    """Merges do not read chains yet: one line naming the adapter and what to do (was: "'lora-ecom' is a LoRA
    adapter; merge adapters with merge_lora_adapters", about the wrong checkpoint)."""
    from lora_helpers import snapshot

    before = snapshot(chain_run)
    code, out, err = cli("consolidate", "--run", str(chain_run), "--method", method,
                         "--sources", "lora-ecom,lora-stack", "--name", "m")
    assert code == 1 and out == ""
    assert "'lora-stack' is a LoRA adapter on another adapter ('lora-ecom')" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert snapshot(chain_run) == before


def test_the_weights_fingerprint_follows_the_whole_chain(chain_run):
    """Re-saving the adapter two levels below changes the fingerprint that probe sets and token drift reuse
    results by (it followed one level: a stale result was reused); one level keeps its former value."""
    import os

    from aclarena.models.checkpoint import inspect
    from aclarena.models.tensors import checkpoint_fingerprint, weights_fingerprint

    m = load_manifest(chain_run)

    def fp(name):
        return weights_fingerprint(inspect(m.resolve(name), m, chain_run, allow_pickle=True), m, chain_run)

    ecom = inspect(m.resolve("lora-ecom"), m, chain_run, allow_pickle=True)
    below = inspect(m.resolve(ecom.spec.on), m, chain_run, allow_pickle=True)
    assert fp("lora-ecom") == checkpoint_fingerprint(ecom, on=below)  # one level: as before
    before = fp("lora-stack")
    weights = sorted({t.file for t in below.tensors.values()})  # seq-search, the full model under lora-ecom
    st = weights[0].stat()
    os.utime(weights[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # re-saved
    assert fp("lora-stack") != before
