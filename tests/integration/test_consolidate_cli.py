"""`consolidate` (merge methods) and `compare`: manifest entries, replicates, the study-shaped table."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from consolidation_helpers import write_cells

from aclarena.results.consolidation import MleRecord, write_consolidation
from aclarena.store import ResultsStore, load_manifest, write_manifest
from aclarena.store.manifest import CheckpointSpec


def add_replicate(run) -> None:
    """A second curriculum replicate (-s1) and its oracle, as `train --seeds 2` names them."""
    m = load_manifest(run)
    ck = run / "checkpoints"
    for name in ("seq-math", "seq-search", "oracle-math"):
        shutil.copytree(ck / name, ck / f"{name}-s1")
    m.add(CheckpointSpec("seq-math-s1", "checkpoints/seq-math-s1", kind="stage", domain="math", phase="rl",
                         parent="base", seed=1))
    m.add(CheckpointSpec("seq-search-s1", "checkpoints/seq-search-s1", kind="stage", domain="search", phase="sft",
                         parent="seq-math-s1", seed=1))
    m.add(CheckpointSpec("oracle-math-s1", "checkpoints/oracle-math-s1", kind="oracle", domain="math", parent="base",
                         seed=1))
    for name in ("seq-math", "seq-search", "oracle-math"):
        m.add(CheckpointSpec(**{**m.resolve(name).to_dict(), "name": name, "seed": 0}), replace_existing=True)
    write_manifest(m, run)


def test_merges_are_added_to_the_manifest_and_compared(fixture_run, cli):
    add_replicate(fixture_run)
    code, out, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-uniform", "--seeds", "2", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert [o["checkpoint"] for o in res["outputs"]] == ["merge-uniform", "merge-uniform-s1"]
    assert res["outputs"][1]["settings"]["sources"] == ["seq-math-s1", "seq-search-s1"]
    m = load_manifest(fixture_run)
    spec = m.resolve("merge-uniform-s1")
    assert (spec.kind, spec.method, spec.parent, spec.seed) == ("consolidated", "merge-uniform", "base", 1)
    assert (fixture_run / "checkpoints" / "merge-uniform-s1" / "model.safetensors").is_file()
    with ResultsStore(fixture_run).reader() as r:
        assert r.attrs("consolidate/merge-uniform-s1")["method"] == "merge-uniform"
    # a rerun reuses the outputs
    code, out, _ = cli("consolidate", "--run", str(fixture_run), "--method", "merge-uniform", "--seeds", "2", "--json")
    assert [o["status"] for o in json.loads(out)["outputs"]] == ["reused", "reused"]

    write_cells(fixture_run, {
        "oracle-math": {"math/id": [1, 1, 1, 1], "search/id": [0, 0, 0, 0], "general": [1, 0, 0, 0]},
        "oracle-math-s1": {"math/id": [1, 1, 1, 0], "search/id": [0, 0, 0, 0], "general": [1, 1, 0, 0]},
        "seq-search": {"math/id": [1, 0, 0, 0], "search/id": [1, 1, 0, 0], "general": [1, 0, 0, 0]},
        "seq-search-s1": {"math/id": [0, 0, 0, 0], "search/id": [1, 1, 1, 0], "general": [1, 0, 0, 0]},
        "merge-uniform": {"math/id": [1, 1, 0, 0], "search/id": [1, 0, 0, 0], "general": [1, 1, 1, 0]},
        "merge-uniform-s1": {"math/id": [1, 1, 1, 0], "search/id": [0, 0, 0, 0], "general": [1, 1, 0, 0]},
    })
    code, out, err = cli("compare", "--run", str(fixture_run), "--json")
    assert code == 0, err
    cmp = json.loads(out)
    assert cmp["in_domain"] == ["math/id", "search/id"] and cmp["out_of_domain"] == ["general"]
    rows = {r["label"]: r for r in cmp["rows"]}
    # lora-ecom is a consolidated checkpoint of the fixture too (no cells: a note says so)
    assert [(r["label"], r["role"]) for r in cmp["rows"]] == [
        ("oracle-math", "oracle"), ("sequential end point (seq-search)", "end"), ("lora-ecom", "method"),
        ("merge-uniform", "method")]
    assert any("lora-ecom: not evaluated" in n for n in cmp["notes"])
    cell = rows["merge-uniform"]["cells"]["math/id"]
    assert cell["mean"] == pytest.approx((0.5 + 0.75) / 2)
    assert cell["std"] == pytest.approx(np.std([0.5, 0.75], ddof=1))
    assert cell["n"] == 2 and cell["std_over"] == "replicates"
    end = rows["sequential end point (seq-search)"]
    assert end["members"] == ["seq-search", "seq-search-s1"]
    assert end["cells"]["search/id"]["mean"] == pytest.approx((0.5 + 0.75) / 2)
    assert rows["oracle-math"]["cells"]["math/id"]["mean"] == pytest.approx(0.875)
    # the table view prints mean ± std
    code, out, _ = cli("compare", "--run", str(fixture_run))
    assert code == 0 and "0.625 ± 0.177" in out and "merge-uniform" in out


def test_seeded_and_unseeded_methods_on_one_chain(fixture_run, cli):
    code, out, _ = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ties", "--seeds", "2", "--json")
    res = json.loads(out)
    assert code == 0 and [o["checkpoint"] for o in res["outputs"]] == ["merge-ties"]
    assert "no seed of its own" in res["notes"][0]
    code, out, _ = cli("consolidate", "--run", str(fixture_run), "--method", "merge-dare", "--seeds", "2", "--json")
    res = json.loads(out)
    assert [o["checkpoint"] for o in res["outputs"]] == ["merge-dare", "merge-dare-s1"]
    assert res["outputs"][0]["settings"]["merge"]["seed"] != res["outputs"][1]["settings"]["merge"]["seed"]
    # a comma-separated list is a list of checkpoint names: 'oracles' is not one
    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ta", "--lambdas", "0.5,1",
                       "--sources", "oracles,seq-math")
    assert code == 1 and "unknown checkpoint 'oracles'" in err


def test_bad_input_is_one_line(fixture_run, llama_run, cli):
    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-tiess")
    assert code == 1 and "did you mean 'merge-ties'" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ta", "--lambdas", "a,b")
    assert code == 1 and "comma-separated numbers" in err
    # an option the method does not take (before: silently ignored)
    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ties", "--lora-r", "4")
    assert code == 1 and "merge-ties takes no --lora-r (its options:" in err and len(err.strip().splitlines()) == 1
    m = load_manifest(fixture_run)
    m.add(CheckpointSpec("llama-x", str(llama_run / "checkpoints" / "seq-math"), kind="consolidated", parent="base"))
    write_manifest(m, fixture_run)
    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-uniform",
                       "--sources", "seq-math,llama-x")
    assert code == 1 and "one architecture" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ties", "--sources", "oracles")
    assert code == 0, err
    code, _, err = cli("compare", "--run", str(fixture_run))
    assert code == 1 and "run `aclarena-diag eval" in err
    code, _, err = cli("compare", "--run", str(fixture_run), "--router", "rulez")
    assert code == 1 and "did you mean 'rule'" in err


def test_lora_adapters_merge_through_peft_cat(fixture_run, cli):
    from fixtures import make_lora

    from aclarena.models.loading import load_model

    m = load_manifest(fixture_run)
    model = load_model("seq-search", m, fixture_run)
    make_lora(model, fixture_run / "checkpoints" / "lora-b", seed=7, r=2)
    m.add(CheckpointSpec("lora-b", "checkpoints/lora-b", kind="consolidated", on="seq-search", parent="seq-search"))
    write_manifest(m, fixture_run)
    code, out, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-uniform", "--sources",
                         "lora-ecom,lora-b", "--name", "experts-avg", "--json")
    assert code == 0, err
    spec = load_manifest(fixture_run).resolve("experts-avg")
    assert spec.on == "seq-search" and (fixture_run / "checkpoints" / "experts-avg" / "adapter_config.json").is_file()
    # TIES has no exact low-rank form: since issue 45 the adapters are densified while streaming, into a full model
    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-ties", "--sources", "lora-ecom,lora-b")
    assert code == 0, err
    spec = load_manifest(fixture_run).resolve("merge-ties-custom")
    assert spec.on is None and (fixture_run / "checkpoints" / "merge-ties-custom" / "model.safetensors").is_file()


def test_mle_row_uses_the_routed_expert_of_each_suite(fixture_run, cli):
    m = load_manifest(fixture_run)
    m.add(CheckpointSpec("mle-math", "checkpoints/lora-ecom", kind="consolidated", method="mle", domain="math",
                         on="seq-search", parent="seq-search"))
    write_manifest(m, fixture_run)
    write_cells(fixture_run, {
        "mle-math": {"math/id": [1, 1, 1, 1], "search/id": [0, 0, 0, 0], "general": [0, 0, 0, 0]},
        "seq-search": {"math/id": [0, 0, 0, 0], "search/id": [1, 1, 0, 0], "general": [1, 1, 1, 0]},
    })
    routes = {"rule": {"math/id": {"expert": "math", "checkpoint": "mle-math"},
                       "search/id": {"expert": None, "checkpoint": "seq-search"},
                       "general": {"expert": None, "checkpoint": "seq-search"}}}
    write_consolidation(fixture_run, MleRecord(name="mle", method="mle", replicate=0, seed=0, fallback="backbone",
                                               routes=routes, experts={"math": "mle-math"}, backbone="seq-search"))
    code, out, err = cli("compare", "--run", str(fixture_run), "--json")
    assert code == 0, err
    row = next(r for r in json.loads(out)["rows"] if r["role"] == "mle")
    assert row["label"] == "mle (rule router)"
    assert row["cells"]["math/id"]["mean"] == 1.0 and row["cells"]["search/id"]["mean"] == 0.5
    assert row["cells"]["general"]["mean"] == 0.75
    # the experts themselves are not rows of their own
    assert not any(r["label"] == "mle-math" for r in json.loads(out)["rows"])


def test_tokens_scores_consolidations_after_the_chain(fixture_run, cli):
    from aclarena.analysis.tokens import targets_of

    code, _, err = cli("consolidate", "--run", str(fixture_run), "--method", "merge-uniform")
    assert code == 0, err
    m = load_manifest(fixture_run)
    # merge-uniform's parent is the base, yet it consolidates the chain: later than each stage
    assert targets_of(m, "seq-math", "later") == ["seq-search", "lora-ecom", "merge-uniform"]
    assert "merge-uniform" in targets_of(m, "seq-search", "later")
    # an oracle is not on the chain: only its own descendants
    from aclarena.errors import AclarenaError

    with pytest.raises(AclarenaError, match="no later checkpoints"):
        targets_of(m, "oracle-math", "later")
