"""`vectors` and `displacement` on the tiny fixture run, against naive references."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from vectors_helpers import cos, flat, load_sd

from aclarena.models.loading import LoadOptions, load_model
from aclarena.store import ResultsStore
from aclarena.store.manifest import CheckpointSpec, load_manifest, write_manifest

REPO = Path(__file__).resolve().parents[2]
DENSE = ["base", "seq-math", "seq-search", "oracle-math"]


def _state(run: Path, name: str) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint as a model would use them: an adapter merged by PEFT itself."""
    if name == "lora-ecom":
        model = load_model("lora-ecom", load_manifest(run), run, LoadOptions(dtype="float32", merge_adapter=True))
        return {k: v.detach() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    return load_sd(run / "checkpoints" / name)


def _vectors_json(cli, run, *extra):
    code, out, err = cli("vectors", "--run", str(run), "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def test_vectors_agree_with_naive_reference(fixture_run, cli):
    data = _vectors_json(cli, fixture_run)
    assert data["computed"] is True
    sd = {n: _state(fixture_run, n) for n in [*DENSE, "lora-ecom"]}
    names = sorted(sd["base"])
    assert sorted(sd["lora-ecom"]) == names  # tied head left out, as the reader does
    full = {n: flat(s, names) for n, s in sd.items()}
    labels = data["cosines"]["labels"]
    vecs = {v["label"]: full[v["plus"]] - full[v["minus"]] for v in data["vectors"]}
    assert "lora-ecom - seq-search" in vecs and "seq-search - seq-math" in vecs and "seq-search - base" in vecs
    mat = np.array(data["cosines"]["matrix"], dtype=float)
    for i, a in enumerate(labels):
        for j, b in enumerate(labels):
            assert mat[i, j] == pytest.approx(cos(vecs[a], vecs[b]), abs=1e-6), (a, b)
    for v in data["vectors"]:
        assert v["norm"] == pytest.approx(float(vecs[v["label"]].norm()), rel=1e-6)
    # distances to the oracle along the chain
    for row in data["distances"]:
        assert row["oracle-math"] == pytest.approx(float((full[row["checkpoint"]] - full["oracle-math"]).norm()), rel=1e-6)
    assert [r["checkpoint"] for r in data["distances"] if r["on_chain"]] == ["base", "seq-math", "seq-search"]
    # projections of the stage updates on the oracle direction
    o = full["oracle-math"] - full["base"]
    for p in data["projections"]:
        s = vecs[p["update"]]
        assert p["oracle-math"]["coef"] == pytest.approx(float(s @ o / (o @ o)), rel=1e-6, abs=1e-9)
    assert any("no oracle for domain 'search'" in n for n in data["notes"])

    # per tensor: every tensor's cosine with the oracle direction
    per = _vectors_json(cli, fixture_run, "--by", "tensor")
    assert per["computed"] is False  # the pass is reused
    checked = 0
    for row in per["view"]:
        if row["vector"] != "seq-search - base":
            continue
        t = row["group"]
        want = cos((sd["seq-search"][t] - sd["base"][t]).double().reshape(-1),
                   (sd["oracle-math"][t] - sd["base"][t]).double().reshape(-1))
        assert row["cos_oracle"]["oracle-math"] == pytest.approx(want, abs=1e-6), t
        checked += 1
    assert checked == len(names)


def test_pairs_layers_and_embeddings(fixture_run, cli):
    data = _vectors_json(cli, fixture_run, "--pair", "seq-search-base:oracle-math-base",
                         "--pair", "lora-ecom - seq-search:seq-search - seq-math", "--by", "layer",
                         "--exclude-embeddings")
    sd = {n: _state(fixture_run, n) for n in [*DENSE, "lora-ecom"]}
    groups = {r["group"] for r in data["pairs"]}
    assert groups == {"layer.0", "layer.1", "final"}  # embeddings left out
    for r in data["pairs"]:
        names = sorted(t for t in sd["base"] if f"layers.{r['group'][6:]}." in t) if r["group"] != "final" \
            else ["model.norm.weight"]
        a, b, c, d = (("seq-search", "base", "oracle-math", "base") if r["pair"].startswith("seq-search")
                      else ("lora-ecom", "seq-search", "seq-search", "seq-math"))
        want = cos(flat(sd[a], names) - flat(sd[b], names), flat(sd[c], names) - flat(sd[d], names))
        if r["cos"] is None:  # LoRA does not touch the final norm: a zero vector has no cosine
            assert r["group"] == "final" and a == "lora-ecom"
        else:
            assert r["cos"] == pytest.approx(want, abs=1e-6), r
    store = ResultsStore(fixture_run)
    assert store.has("vectors/pairs") and store.has("vectors/summary/no-embeddings")
    code, _, err = cli("vectors", "--run", str(fixture_run), "--pair", "seq-math-nope:base-base")
    assert code == 1 and "not NAME-NAME" in err and err.count("\n") == 1


def test_rerun_reuses_and_store_unchanged(fixture_run, cli):
    code, out, err = cli("vectors", "--run", str(fixture_run))
    assert code == 0, err
    assert "computed" in out and "oracle-math" in out and "note: no oracle for domain 'search'" in out
    before = (fixture_run / "results.h5").read_bytes()
    code, out, _ = cli("vectors", "--run", str(fixture_run))
    assert code == 0 and "reused" in out
    assert (fixture_run / "results.h5").read_bytes() == before


def _save(run: Path, src: str, folder: Path, *, dtype=None, shard=None):
    """Load checkpoint ``src`` of ``run`` and save it to ``folder`` (optionally in another dtype or sharded)."""
    model = load_model(src, load_manifest(run), run, LoadOptions(dtype="float32"))
    if dtype is not None:
        model = model.to(dtype)
    if shard is not None:
        model.save_pretrained(folder, max_shard_size=shard)
        _tok(run).save_pretrained(folder)
    else:
        from aclarena.models.tiny import save_checkpoint

        save_checkpoint(model, _tok(run), folder)


def _tok(run):
    from aclarena.models.loading import load_tokenizer

    return load_tokenizer("base", load_manifest(run), run)


def _rewrite_with(run: Path, spec_changes: dict[str, dict]) -> None:
    m = load_manifest(run)
    for name, fields in spec_changes.items():
        if fields is None:
            del m.checkpoints[name]
        else:
            m.checkpoints[name] = CheckpointSpec(name, **fields)
    write_manifest(m, run)


def test_sharded_and_bf16_checkpoints(fixture_run, cli, tmp_path):
    ref = _vectors_json(cli, fixture_run)
    # the same checkpoints saved in ~100 kB shards
    sharded = tmp_path / "sharded"
    shutil.copytree(fixture_run, sharded, ignore=shutil.ignore_patterns("results.h5*"))
    for n in DENSE:
        shutil.rmtree(sharded / "checkpoints" / n)
        _save(fixture_run, n, sharded / "checkpoints" / n, shard="100KB")
    assert len(list((sharded / "checkpoints" / "base").glob("model-*.safetensors"))) > 2
    assert not (sharded / "checkpoints" / "base" / "model.safetensors").exists()
    got = _vectors_json(cli, sharded)
    np.testing.assert_allclose(np.array(got["cosines"]["matrix"], float), np.array(ref["cosines"]["matrix"], float),
                               rtol=1e-10, atol=1e-12)
    # bf16 checkpoints: compared with the bf16 values themselves
    bf = tmp_path / "bf16"
    shutil.copytree(fixture_run, bf, ignore=shutil.ignore_patterns("results.h5*"))
    for n in DENSE:
        _save(bf, n, bf / "checkpoints" / (n + "-bf"), dtype=torch.bfloat16)
    _rewrite_with(bf, {"lora-ecom": None, "base-bf": {"path": "checkpoints/base-bf", "kind": "base"},
                       "seq-math-bf": {"path": "checkpoints/seq-math-bf", "parent": "base-bf", "domain": "math"},
                       "oracle-math-bf": {"path": "checkpoints/oracle-math-bf", "kind": "oracle", "domain": "math",
                                          "parent": "base-bf"}})
    code, out, err = cli("vectors", "--run", str(bf), "--json", "--checkpoints", "base-bf,seq-math-bf,oracle-math-bf",
                         "--pair", "seq-math-bf-base-bf:oracle-math-bf-base-bf")
    assert code == 0, err
    data = json.loads(out)
    sd = {n: load_sd(bf / "checkpoints" / n) for n in ("base-bf", "seq-math-bf", "oracle-math-bf")}
    assert next(iter(sd["base-bf"].values())).dtype == torch.bfloat16
    want = cos(flat(sd["seq-math-bf"]) - flat(sd["base-bf"]), flat(sd["oracle-math-bf"]) - flat(sd["base-bf"]))
    assert data["pairs"][0]["cos"] == pytest.approx(want, abs=1e-9)


def _snapshot(run: Path) -> bytes | None:
    p = run / "results.h5"
    return p.read_bytes() if p.exists() else None


def _results(run: Path) -> dict[str, tuple[str, str]]:
    """Every result group of the store with its type and fingerprint (what a reader can see)."""
    store = ResultsStore(run)
    with store.reader() as r:
        return {k: (r.attrs(k)["result-type"], r.attrs(k).get("fingerprint")) for k in r.results()}


def _assert_refused(cli, run, verb, needle, *extra, same_bytes=True):
    before, results = _snapshot(run), _results(run)
    code, out, err = cli(verb, "--run", str(run), *extra)
    assert code == 1, (out, err)
    assert needle in err and err.count("\n") == 1, err
    if same_bytes:
        assert _snapshot(run) == before
    assert _results(run) == results


def test_bad_inputs_are_refused_and_leave_the_store(fixture_run, cli, tokenizer, llama_run):
    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config

    run = fixture_run
    assert cli("vectors", "--run", str(run))[0] == 0
    assert cli("displacement", "--run", str(run))[0] == 0
    ck = run / "checkpoints"
    # a tensor missing from one checkpoint
    from safetensors.torch import load_file, save_file

    shutil.copytree(ck / "seq-math", ck / "missing")
    sd = load_file(str(ck / "missing" / "model.safetensors"))
    del sd["model.layers.1.mlp.up_proj.weight"]
    save_file(sd, str(ck / "missing" / "model.safetensors"), metadata={"format": "pt"})
    _rewrite_with(run, {"missing": {"path": "checkpoints/missing", "parent": "seq-math", "phase": "sft"}})
    for verb in ("vectors", "displacement"):
        _assert_refused(cli, run, verb, "tensor model.layers.1.mlp.up_proj.weight is in 'base' but not in 'missing'")
    # another shape (same architecture)
    save_checkpoint(build_model(tiny_config(tokenizer, hidden_size=32), seed=0), tokenizer, ck / "narrow")
    _rewrite_with(run, {"missing": None, "narrow": {"path": "checkpoints/narrow", "parent": "base"}})
    _assert_refused(cli, run, "vectors", "has shape [512, 64] in 'base' but [512, 32] in 'narrow'")
    # another architecture
    _rewrite_with(run, {"narrow": None, "llama": {"path": str(llama_run / "checkpoints" / "base"), "parent": "base"}})
    _assert_refused(cli, run, "vectors", "'base' (Qwen3ForCausalLM) and 'llama' (LlamaForCausalLM) have different")
    # an adapter on the wrong base
    _rewrite_with(run, {"llama": None, "narrow": {"path": "checkpoints/narrow", "kind": "oracle"},
                        "lora-wrong": {"path": "checkpoints/lora-ecom", "on": "narrow"}})
    _assert_refused(cli, run, "vectors", "apply the adapter to the model it was trained on")
    # NaN weights, named
    shutil.copytree(ck / "seq-search", ck / "nan")
    sd = load_file(str(ck / "nan" / "model.safetensors"))
    sd["model.layers.1.self_attn.o_proj.weight"][3, 4] = float("nan")
    save_file(sd, str(ck / "nan" / "model.safetensors"), metadata={"format": "pt"})
    _rewrite_with(run, {"lora-wrong": None, "narrow": None,
                        "nan": {"path": "checkpoints/nan", "parent": "seq-search", "phase": "rl", "domain": "x"}})
    for verb in ("vectors", "displacement"):
        _assert_refused(cli, run, verb, "checkpoint 'nan' has NaN or inf weights in model.layers.1.self_attn.o_proj.weight")
    # NaN found only after parts were saved: the parts are removed again
    # (the file was rewritten twice, so only its results are compared)
    _assert_refused(cli, run, "vectors", "NaN or inf", "--save-every", "0", same_bytes=False)
    # a stage with no parent
    _rewrite_with(run, {"nan": None, "orphan": {"path": "checkpoints/seq-math", "kind": "stage"}})
    for verb in ("vectors", "displacement"):
        _assert_refused(cli, run, verb, "checkpoint 'orphan' is a stage but has no parent")
    # no oracle at all: the oracle views are skipped with a note, the rest is computed
    _rewrite_with(run, {"orphan": None, "oracle-math": None})
    code, out, err = cli("vectors", "--run", str(run), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["distances"] == [] or all(len(r) == 2 for r in data["distances"])
    assert any("no oracles" in n for n in data["notes"]) and len(data["cosines"]["labels"]) == 5


def test_displacement_against_naive(fixture_run, cli):
    code, out, err = cli("displacement", "--run", str(fixture_run), "--json", "--tolerances", "0,1e-4,1e-2")
    assert code == 0, err
    data = json.loads(out)
    sd = {n: _state(fixture_run, n) for n in [*DENSE, "lora-ecom"]}
    names = sorted(sd["base"])
    rows = {u["checkpoint"]: u for u in data["updates"]}
    assert set(rows) == {"seq-math", "seq-search", "oracle-math", "lora-ecom"}
    for c, u in rows.items():
        child, parent = flat(sd[c], names), flat(sd[u["parent"]], names)
        d = (child - parent).abs()
        assert u["norm"] == pytest.approx(float(d.norm()), rel=1e-6)
        assert u["rel"] == pytest.approx(float(d.norm() / parent.norm()), rel=1e-6)
        # LoRA merged by PEFT vs formed here differ by float32 rounding, hence the loose count check
        slack = 0.002 if c == "lora-ecom" else 0.0
        for j, t in enumerate((0.0, 1e-4, 1e-2)):
            assert u["changed_frac"][j] == pytest.approx(float((d > t).double().mean()), abs=slack), (c, t)
        db = (child.to(torch.bfloat16).double() - parent.to(torch.bfloat16).double()).abs()
        if c != "lora-ecom":
            assert u["changed_frac_bf16"][0] == pytest.approx(float((db > 0).double().mean()), abs=1e-12)
    # the fixture's stages: seq-math (rl only) then seq-search (sft only): no stage has both phases, so there
    # is no overall ratio (it once divided search's SFT norm by math's RL norm), and both are named as left out
    assert data["sft_rl_overall"] is None and data["sft_rl"] == []
    assert data["sft_rl_excluded"] == [{"stage": "math", "reason": "RL phase only"},
                                       {"stage": "search", "reason": "SFT phase only"}]
    code, out, err = cli("displacement", "--run", str(fixture_run), "--by", "layer", "--tolerances", "0,1e-4,1e-2")
    assert code == 0 and "layer.1" in out and "reused" in out and "no SFT/RL ratio" in out
    assert "stage 'search' is not in the overall SFT/RL ratio (SFT phase only)" in out
    code, out, err = cli("displacement", "--run", str(fixture_run))  # other tolerances: a new pass
    assert code == 0 and "computed" in out and "1.0e-08" in out
    code, _, err = cli("displacement", "--run", str(fixture_run), "--tolerances", "1e-3,-1")
    assert code == 1 and "--tolerances" in err


def test_sft_rl_ratio_per_stage(fixture_run, cli):
    from fixtures import perturb

    from aclarena.models.tiny import save_checkpoint

    run = fixture_run
    m = load_manifest(run)
    base = load_model("base", m, run)
    sft = perturb(base, 0.05, seed=11)
    rl = perturb(sft, 0.01, seed=12)
    save_checkpoint(sft, _tok(run), run / "checkpoints" / "math-sft")
    save_checkpoint(rl, _tok(run), run / "checkpoints" / "math-rl")
    _rewrite_with(run, {"math-sft": {"path": "checkpoints/math-sft", "parent": "base", "phase": "sft", "domain": "alg"},
                        "math-rl": {"path": "checkpoints/math-rl", "parent": "math-sft", "phase": "rl", "domain": "alg"}})
    code, out, err = cli("displacement", "--run", str(run), "--json")
    assert code == 0, err
    data = json.loads(out)
    (alg,) = [r for r in data["sft_rl"] if r["stage"] == "alg"]
    assert alg["ratio"] == pytest.approx(5.0, rel=0.05)  # noise 0.05 vs 0.01 on the same weights
    # the overall ratio pools the one stage with both phases, not the one-phase stages seq-math and seq-search
    assert alg["pooled"] and data["sft_rl_overall"] == pytest.approx(alg["ratio"], rel=1e-9)
    assert {r["stage"] for r in data["sft_rl_excluded"]} == {"math", "search"}
    with ResultsStore(run).reader() as r:
        stored = r.read("displacement/summary")["all"]
    assert stored["overall_ratio"] == pytest.approx(alg["ratio"], rel=1e-9)
    assert [x["stage"] for x in stored["ratio_excluded"]] == ["math", "search"]


def test_kill_then_rerun_equals_one_run(tmp_path, tokenizer):
    """SIGKILL `python -m aclarena vectors` mid-pass; the rerun resumes and gives the same numbers."""
    from fixtures import perturb

    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
    from aclarena.store.manifest import Manifest

    run = tmp_path / "run"
    base = build_model(tiny_config(tokenizer, num_layers=12), seed=0)
    models = {"base": base, "s1": perturb(base, 0.01, 1)}
    models["s2"] = perturb(models["s1"], 0.02, 2)
    models["oracle"] = perturb(base, 0.01, 3)
    m = Manifest(name="kill", base="base")
    for n, model in models.items():
        save_checkpoint(model, tokenizer, run / "checkpoints" / n)
    m.add(CheckpointSpec("base", "checkpoints/base", kind="base"))
    m.add(CheckpointSpec("s1", "checkpoints/s1", parent="base", domain="a", phase="sft"))
    m.add(CheckpointSpec("s2", "checkpoints/s2", parent="s1", domain="b", phase="rl"))
    m.add(CheckpointSpec("oracle", "checkpoints/oracle", kind="oracle", domain="a", parent="base"))
    write_manifest(m, run)
    clean = tmp_path / "clean"
    shutil.copytree(run, clean)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "aclarena", "vectors", "--run", str(run), "--save-every", "0"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store = ResultsStore(run)
    deadline = time.monotonic() + 120
    parts = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                keys = store.keys("vectors/_partial")
                parts = len(store.keys(f"vectors/_partial/{keys[0]}")) if keys else 0
            except Exception:  # the file is being replaced; look again
                parts = 0
            if parts >= 3:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the pass finished before it could be killed"
    assert not store.has("vectors/gram") and parts >= 3
    env_out = subprocess.run([sys.executable, "-m", "aclarena", "vectors", "--run", str(run), "--json"], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=300)
    assert env_out.returncode == 0, env_out.stderr
    resumed_parts = len(ResultsStore(run).keys("vectors"))
    one = subprocess.run([sys.executable, "-m", "aclarena", "vectors", "--run", str(clean), "--json"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    a, b = ResultsStore(run).read("vectors/gram"), ResultsStore(clean).read("vectors/gram")
    assert a["tensors"] == b["tensors"]
    np.testing.assert_array_equal(a["gram"], b["gram"])
    assert json.loads(env_out.stdout)["cosines"] == json.loads(one.stdout)["cosines"]
    assert not ResultsStore(run).has("vectors/_partial") and resumed_parts == len(ResultsStore(clean).keys("vectors"))


def test_checkpoint_selection_adds_parents_and_base(fixture_run, cli):
    data = _vectors_json(cli, fixture_run, "--checkpoints", "seq-search")
    assert data["checkpoints"] == ["base", "seq-math", "seq-search"]
    assert [v["label"] for v in data["vectors"]] == ["seq-math - base", "seq-search - seq-math", "seq-search - base"]
    assert any("no oracles" in n for n in data["notes"])
    code, _, err = cli("vectors", "--run", str(fixture_run), "--checkpoints", "seq-serch")
    assert code == 1 and "did you mean 'seq-search'" in err
