"""The training methods on the tiny curriculum: SDFT, MMOPD and MLE run and register what they must."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from aclarena.store import ResultsStore, load_manifest

pytestmark = pytest.mark.slow


@pytest.fixture()
def run(tiny_curriculum, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(tiny_curriculum[0], dst)
    return dst


def _sha(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.safetensors"))}


def test_sdft_then_mle_backbone_frozen_adapters_trained(run, cli):
    code, out, err = cli("consolidate", "--run", str(run), "--method", "sdft", "--json")
    assert code == 0, err
    res = json.loads(out)["outputs"][0]
    m = load_manifest(run)
    spec = m.resolve("sdft")
    assert (spec.kind, spec.method, spec.parent) == ("consolidated", "sdft", "base")
    assert set(res["settings"]["kept"]) == {"math", "search", "ecom", "if"}
    backbone = run / "checkpoints" / "sdft"
    before = _sha(backbone)

    code, out, err = cli("consolidate", "--run", str(run), "--method", "mle", "--json")
    assert code == 0, err
    outs = json.loads(out)["outputs"]
    assert [o["checkpoint"] for o in outs] == ["mle-math", "mle-search", "mle-ecom", "mle-if"]
    # the backbone is bit-identical after training the experts
    assert _sha(backbone) == before
    m = load_manifest(run)
    from safetensors.torch import load_file

    for o in outs:
        spec = m.resolve(o["checkpoint"])
        assert (spec.on, spec.parent, spec.method, spec.kind) == ("sdft", "sdft", "mle", "consolidated")
        folder = run / "checkpoints" / o["checkpoint"]
        # only adapters were saved and changed: no full weights, LoRA B moved off its zero initialisation
        assert not (folder / "model.safetensors").exists()
        weights = load_file(str(folder / "adapter_model.safetensors"))
        assert weights and all(".lora_" in k for k in weights)
        assert any(v.abs().max() > 0 for k, v in weights.items() if "lora_B" in k)
        assert o["settings"]["parameters"] == sum(v.numel() for v in weights.values())
    with ResultsStore(run).reader() as r:
        routes = r.read("consolidate/mle/routes")
        assert routes["rule"]["math/id"]["checkpoint"] == "mle-math"
        assert routes["rule"]["general"]["checkpoint"] == "sdft"  # no expert: the backbone serves it
        assert set(r.keys("routing")) == {"rule", "learned", "bandit"}
        from aclarena.results.routing import read_reports

        reports = read_reports(r)
    # each router's accuracy is stored, and it beats a random expert on held-out contexts
    for name, rep in reports.items():
        acc = rep.accuracy
        i = acc["type"].index("held-out")
        assert acc["accuracy"][i] > acc["chance"][i], name
        assert acc["p_chance"][i] < 1e-3, name
        assert 0.0 <= rep.overall <= 1.0
    # eval includes the experts (adapters on the backbone)
    code, out, err = cli("eval", "--run", str(run), "--checkpoints", "mle-math,sdft", "--suites", "math/id", "-n", "2",
                         "--samples", "0", "--json")
    assert code == 0, err


def test_mmopd_distils_the_end_point(run, cli):
    code, out, err = cli("consolidate", "--run", str(run), "--method", "mmopd", "--json")
    assert code == 0, err
    spec = load_manifest(run).resolve("mmopd")
    assert (spec.kind, spec.method, spec.parent) == ("consolidated", "mmopd", "seq-if")
    # the student moved away from the end point it started from
    from safetensors.torch import load_file

    a = load_file(str(run / "checkpoints" / "mmopd" / "model.safetensors"))
    b = load_file(str(run / "checkpoints" / "seq-if" / "model.safetensors"))
    assert any(not (a[k] == b[k]).all() for k in a)
    code, out, _ = cli("consolidate", "--run", str(run), "--method", "mmopd", "--json")
    assert json.loads(out)["outputs"][0]["status"] == "reused"


def test_mle_needs_its_backbone_and_teachers_need_one_tokenizer(run, cli):
    code, _, err = cli("consolidate", "--run", str(run), "--method", "mle")
    assert code == 1 and "method sdft" in err and len(err.strip().splitlines()) == 1
    tj = run / load_manifest(run).resolve("oracle-ecom").path / "tokenizer.json"
    data = json.loads(tj.read_text())
    vocab = data["model"]["vocab"]
    a, b = list(vocab)[20:22]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    tj.write_text(json.dumps(data))
    code, _, err = cli("consolidate", "--run", str(run), "--method", "mmopd")
    assert code == 1 and "tokenizers differ" in err and "one tokenizer" in err


def test_sdft_from_the_end_reads_the_oracles_rollouts_that_sdft_from_the_base_sampled(run, cli):
    """The two SDFTs of the study sample the same oracles on the same tasks (issue 42): the second reads the
    first's kept rollouts, and trains exactly as it does when it samples them itself."""
    first = json.loads(cli("consolidate", "--run", str(run), "--method", "sdft", "--json")[1])["outputs"][0]
    assert first["settings"]["rollouts_reused"] == dict.fromkeys(("math", "search", "ecom", "if"), False)
    assert len(list((run / "work" / "sdft-rollouts").glob("*.json"))) == 4
    code, out, err = cli("consolidate", "--run", str(run), "--method", "sdft", "--start", "end", "--json")
    assert code == 0, err
    second = json.loads(out)["outputs"][0]
    assert second["settings"]["rollouts_reused"] == dict.fromkeys(("math", "search", "ecom", "if"), True)
    assert second["settings"]["kept"] == first["settings"]["kept"]
    read = _sha(run / "checkpoints" / "sdft-from-end")
    shutil.rmtree(run / "work" / "sdft-rollouts")
    code, out, err = cli("consolidate", "--run", str(run), "--method", "sdft", "--start", "end", "--force", "--json")
    assert code == 0, err
    assert json.loads(out)["outputs"][0]["settings"]["rollouts_reused"] == dict.fromkeys(("math", "search", "ecom",
                                                                                          "if"), False)
    assert _sha(run / "checkpoints" / "sdft-from-end") == read


def test_sdft_micro_batches_by_length_train_as_the_full_batch(run, cli):
    """SDFT reads each domain-balanced batch in micro-batches of one domain's share, shortest records together
    (issue 42: e-commerce conversations padded the whole batch): each optimizer step sums the same token losses
    over the same count, so it trains as one full batch does, to float rounding."""
    from safetensors.torch import load_file

    code, out, err = cli("consolidate", "--run", str(run), "--method", "sdft", "--json")
    assert code == 0, err
    grouped = json.loads(out)["outputs"][0]["settings"]
    assert grouped["micro_batch"] == grouped["batch"] // 4 and grouped["trl"]["gradient_accumulation_steps"] == 4
    code, out, err = cli("consolidate", "--run", str(run), "--method", "sdft", "--name", "full", "--json",
                         "--trl", f"per_device_train_batch_size={grouped['batch']}")
    assert code == 0, err
    full = json.loads(out)["outputs"][0]
    assert full["settings"]["micro_batch"] is None
    a = load_file(run / "checkpoints" / "sdft" / "model.safetensors")
    b = load_file(run / "checkpoints" / full["checkpoint"] / "model.safetensors")
    base = load_file(run / "checkpoints" / "base" / "model.safetensors")
    moved = max((b[k] - base[k]).abs().max().item() for k in b)
    apart = max((a[k] - b[k]).abs().max().item() for k in b)
    assert moved > 1e-3  # it trained
    assert apart < 1e-2 * moved, (apart, moved)  # and both ways trained alike (6e-7 against 2e-3 here)
