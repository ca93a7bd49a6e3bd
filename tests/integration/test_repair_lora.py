"""Issue 45 item 2: ``repair`` of LoRA stages on their factors, against the dense float64 repair of the
densified checkpoints (the model the adapters are on plus ``s·B·A``); an adapter on another model is one line."""

from __future__ import annotations

import json

import pytest
import torch
from lora_helpers import add_adapters, dense64, snapshot

from aclarena.diagnostics import repair as R
from aclarena.diagnostics.task_vectors import group_of
from aclarena.store import load_manifest


@pytest.fixture()
def lora_run(fixture_run):
    return add_adapters(fixture_run)


@pytest.mark.parametrize(("old", "new", "method", "extra"), [
    ("seq-search", "lora-a", "svd-restore", ["--rank-percent", "5"]),
    ("seq-search", "lora-a", "svd-restore", ["--rank-percent", "50"]),
    ("seq-search", "lora-a", "dg-hard", []),
    ("lora-a", "lora-b", "svd-restore", ["--rank-percent", "10"]),
    ("lora-a", "lora-b", "dg-hard", ["--modules", "*.layers.1.*"]),
    ("lora-a", "seq-search", "svd-restore", ["--rank-percent", "5"]),
])
def test_repair_of_adapters_is_the_dense_float64_repair(lora_run, cli, old, new, method, extra):
    code, out, err = cli("repair", "--run", str(lora_run), "--from", old, "--to", new, "--method", method,
                         *extra, "--name", "fix", "--json")
    assert code == 0, err
    row = json.loads(out)["outputs"][0]
    m = load_manifest(lora_run)
    spec = m.resolve("fix")
    assert (spec.kind, spec.method, spec.parent, spec.on) == ("consolidated", f"repair-{method}", new, "seq-search")
    folder = lora_run / "checkpoints" / "fix"
    assert (folder / "adapter_config.json").is_file() and not (folder / "model.safetensors").exists()
    got = dense64(lora_run, "fix")
    w_old, w_new = dense64(lora_run, old), dense64(lora_run, new)
    modules = extra[1] if extra[:1] == ["--modules"] else None
    percent = float(extra[1]) if method == "svd-restore" else None
    removed = total = 0.0
    changed = 0
    for name, t in got.items():
        sq = float(((w_new[name] - w_old[name]) ** 2).sum())
        total += sq
        if modules is not None and group_of(name) != "layer.1":
            want = w_new[name]
        elif method == "svd-restore":
            res = R.svd_restore(w_old[name], w_new[name], percent, compute_dtype=torch.float64)
            want, removed = res.tensor, removed + res.energy_removed * sq
        else:
            res = R.dg_hard(w_old[name], w_new[name], compute_dtype=torch.float64)
            want, removed = res.tensor, removed + res.energy_removed * sq
        torch.testing.assert_close(t, want, rtol=0, atol=2e-6)
        changed += not torch.equal(t, w_new[name])
    assert changed > 0  # the repair did something
    assert row["energy_removed"] == pytest.approx(removed / total, abs=1e-6)
    assert json.loads((folder / "consolidation.json").read_text())["lineage"]["on"] == "seq-search"


def test_layer_rollback_of_adapters_picks_the_dense_layers(lora_run, cli):
    code, out, err = cli("repair", "--run", str(lora_run), "--from", "lora-a", "--to", "lora-b", "--method",
                         "layer-rollback", "--select", "displacement", "--count", "1", "--name", "roll", "--json")
    assert code == 0, err
    w_old, w_new, got = (dense64(lora_run, n) for n in ("lora-a", "lora-b", "roll"))
    sq: dict[str, float] = {}
    for name in w_new:
        sq[group_of(name)] = sq.get(group_of(name), 0.0) + float(((w_new[name] - w_old[name]) ** 2).sum())
    want = max((g for g in sq if g.startswith("layer.")), key=lambda g: sq[g])
    assert json.loads(out)["outputs"][0]["layers"] == [want]
    for name, t in got.items():
        torch.testing.assert_close(t, w_old[name] if group_of(name) == want else w_new[name], rtol=0, atol=2e-6)


def test_repaired_adapter_loads_with_peft_and_scores_as_the_densified_model(lora_run, cli):
    from aclarena.models.loading import load_model

    code, _, err = cli("repair", "--run", str(lora_run), "--from", "seq-search", "--to", "lora-a",
                       "--method", "svd-restore", "--rank-percent", "5", "--name", "fix")
    assert code == 0, err
    m = load_manifest(lora_run)
    model = load_model("fix", m, lora_run)
    weights = dense64(lora_run, "fix")
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    sd = merged.state_dict()
    assert set(weights) <= set(sd)
    for name, t in weights.items():
        torch.testing.assert_close(sd[name].double(), t, rtol=0, atol=2e-6)


@pytest.mark.parametrize(("old", "new"), [("seq-math", "lora-a"), ("lora-base", "lora-a"), ("lora-a", "base")])
def test_an_adapter_on_another_model_is_one_line_and_writes_nothing(lora_run, cli, old, new):
    before = snapshot(lora_run)
    code, out, err = cli("repair", "--run", str(lora_run), "--from", old, "--to", new, "--method", "dg-hard",
                         "--name", "x")
    assert code == 1 and out == ""
    assert "LoRA adapter on" in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(lora_run) == before


def test_layer_rollback_of_adapters_by_cosine_with_the_oracle(lora_run, cli):
    """--select cosine on adapters: ⟨Δ_g, τ_g⟩ from the factors against the dense cosine with oracle − base."""
    import dataclasses
    import math

    from aclarena.store.manifest import write_manifest

    m = load_manifest(lora_run)
    m.add(dataclasses.replace(m.resolve("lora-b"), domain="math"), replace_existing=True)  # its oracle: oracle-math
    write_manifest(m, lora_run)
    code, out, err = cli("repair", "--run", str(lora_run), "--from", "lora-a", "--to", "lora-b", "--method",
                         "layer-rollback", "--select", "cosine", "--count", "1", "--name", "rollc", "--json")
    assert code == 0, err
    w_old, w_new, base, orc = (dense64(lora_run, n) for n in ("lora-a", "lora-b", "base", "oracle-math"))
    dot: dict[str, float] = {}
    sq_d: dict[str, float] = {}
    sq_t: dict[str, float] = {}
    for name in w_new:
        g = group_of(name)
        d, t = w_new[name] - w_old[name], orc[name] - base[name]
        dot[g] = dot.get(g, 0.0) + float((d * t).sum())
        sq_d[g] = sq_d.get(g, 0.0) + float((d * d).sum())
        sq_t[g] = sq_t.get(g, 0.0) + float((t * t).sum())
    cos = {g: dot[g] / math.sqrt(sq_d[g] * sq_t[g]) for g in dot if g.startswith("layer.") and sq_d[g] > 0}
    want = min(cos, key=lambda g: cos[g])
    assert json.loads(out)["outputs"][0]["layers"] == [want]
