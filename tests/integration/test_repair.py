"""``aclarena-diag repair`` on the fixture run: written weights against the formulas, lineage, bad input."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from aclarena.diagnostics import repair as R
from aclarena.diagnostics.task_vectors import group_of
from aclarena.store import load_manifest


def _weights(run, name):
    return load_file(str(run / "checkpoints" / name / "model.safetensors"))


def _snapshot(run):
    """What a refused command must leave as it was: every file's name and size, the manifest text."""
    return (sorted((p.relative_to(run).as_posix(), p.stat().st_size) for p in run.rglob("*") if p.is_file()),
            (run / "aclarena.toml").read_text())


def test_svd_restore_sweep_writes_the_formula_with_lineage(fixture_run, cli):
    code, out, err = cli("repair", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search",
                         "--method", "svd-restore", "--rank-percent", "10,50", "--name", "fix", "--json")
    assert code == 0, err
    outputs = json.loads(out)["outputs"]
    assert [o["checkpoint"] for o in outputs] == ["fix-r10", "fix-r50"]
    old, new = _weights(fixture_run, "seq-math"), _weights(fixture_run, "seq-search")
    m = load_manifest(fixture_run)
    for o, p in zip(outputs, (10, 50), strict=True):
        spec = m.resolve(o["checkpoint"])
        assert (spec.kind, spec.method, spec.parent) == ("consolidated", "repair-svd-restore", "seq-search")
        got = _weights(fixture_run, o["checkpoint"])
        assert set(got) == set(new)
        for name, t in got.items():
            want = R.svd_restore(old[name], new[name], p).tensor.to(t.dtype)
            torch.testing.assert_close(t, want, rtol=0, atol=1e-6)
            if t.ndim == 1:
                assert torch.equal(t, new[name])
        marker = json.loads((fixture_run / "checkpoints" / o["checkpoint"] / "consolidation.json").read_text())
        assert marker["lineage"] == {"from": "seq-math", "to": "seq-search", "method": "svd-restore",
                                     "parameters": {"method": "svd-restore", "rank_percent": float(p)}}
        assert 0 < o["energy_removed"] < 1 and 0 < o["directions_kept"] < 1
    # more directions restored: more of the update moved back
    assert outputs[1]["energy_removed"] > outputs[0]["energy_removed"]
    # a rerun reuses the finished outputs
    code, out, _ = cli("repair", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search",
                       "--method", "svd-restore", "--rank-percent", "10,50", "--name", "fix", "--json")
    assert code == 0 and {o["status"] for o in json.loads(out)["outputs"]} == {"reused"}


def test_dg_hard_and_module_pattern(fixture_run, cli):
    code, out, err = cli("repair", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search",
                         "--method", "dg-hard", "--modules", "*.mlp.*", "--name", "dg", "--json")
    assert code == 0, err
    old, new, got = (_weights(fixture_run, n) for n in ("seq-math", "seq-search", "dg"))
    repaired = 0
    for name, t in got.items():
        if ".mlp." in name:
            repaired += 1
            torch.testing.assert_close(t, R.dg_hard(old[name], new[name]).tensor.to(t.dtype), rtol=0, atol=1e-6)
        else:
            assert torch.equal(t, new[name]), name
    assert json.loads(out)["outputs"][0]["tensors_repaired"] == repaired > 0


def test_layer_rollback_by_index_and_by_cosine(fixture_run, cli):
    code, _, err = cli("repair", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search",
                       "--method", "layer-rollback", "--layers", "0", "--name", "roll0", "--json")
    assert code == 0, err
    old, new, got = (_weights(fixture_run, n) for n in ("seq-math", "seq-search", "roll0"))
    for name, t in got.items():
        assert torch.equal(t, old[name] if group_of(name) == "layer.0" else new[name]), name
    # by cosine: seq-math's update (from base) against oracle-math's direction, computed independently here
    base, sm, orc = (_weights(fixture_run, n) for n in ("base", "seq-math", "oracle-math"))
    dots: dict[str, list[float]] = {}
    for name in sm:
        g = group_of(name)
        if not g.startswith("layer."):
            continue
        d, t = (sm[name] - base[name]).double(), (orc[name] - base[name]).double()
        acc = dots.setdefault(g, [0.0, 0.0, 0.0])
        acc[0] += float((d * t).sum())
        acc[1] += float((d * d).sum())
        acc[2] += float((t * t).sum())
    cos = {g: a / math.sqrt(b * c) for g, (a, b, c) in dots.items()}
    want = min(cos, key=lambda g: (cos[g], int(g.split(".")[1])))
    code, out, err = cli("repair", "--run", str(fixture_run), "--from", "base", "--to", "seq-math",
                         "--method", "layer-rollback", "--select", "cosine", "--count", "1", "--name", "rollc", "--json")
    assert code == 0, err
    assert json.loads(out)["outputs"][0]["layers"] == [want]


def test_python_api(fixture_run):
    import aclarena as acl

    run = acl.Run(fixture_run)
    res = run.repair("seq-math", "seq-search", method="layer-rollback", select="displacement", count=1, name="rolld")
    assert "rolld" in run.manifest and res.outputs[0].layers
    assert res.to_pandas().loc[0, "checkpoint"] == "rolld"


@pytest.mark.parametrize(("extra", "message"), [
    (["--method", "svd-restore", "--rank-percent", "0", "--name", "x"], "(0, 100]"),
    (["--method", "svd-restore", "--rank-percent", "150", "--name", "x"], "(0, 100]"),
    (["--method", "dg-hard", "--modules", "*.nothing.*", "--name", "x"], "matches no tensor"),
    (["--method", "dg-hard", "--name", "oracle-math"], "oracle checkpoint of the manifest"),
    (["--method", "dg-hard", "--name", "seq-math"], "one of the checkpoints being repaired"),
    (["--method", "dg-hard", "--name", "../x"], "is not allowed"),
    (["--method", "mend", "--name", "x"], "repair method"),
    (["--method", "layer-rollback", "--layers", "99", "--name", "x"], "no layer.99"),
])
def test_bad_input_is_one_line_and_writes_nothing(fixture_run, cli, extra, message):
    before = _snapshot(fixture_run)
    code, out, err = cli("repair", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", *extra)
    assert code == 1 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert _snapshot(fixture_run) == before


def test_checkpoints_of_different_shapes_are_refused(fixture_run, cli, tokenizer):
    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config
    from aclarena.store.manifest import CheckpointSpec, write_manifest

    other = build_model(tiny_config(tokenizer, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2), seed=0)
    save_checkpoint(other, tokenizer, fixture_run / "checkpoints" / "wide")
    m = load_manifest(fixture_run)
    m.add(CheckpointSpec("wide", "checkpoints/wide", kind="stage", domain="ecom", parent="seq-search"))
    write_manifest(m, fixture_run)
    before = _snapshot(fixture_run)
    code, out, err = cli("repair", "--run", str(fixture_run), "--from", "seq-search", "--to", "wide",
                         "--method", "dg-hard", "--name", "x")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "wide" in err
    assert _snapshot(fixture_run) == before


def test_compare_scores_repairs_in_four_parts(fixture_run, cli):
    from consolidation_helpers import write_cells

    assert cli("repair", "--run", str(fixture_run), "--from", "seq-math", "--to", "seq-search", "--method", "dg-hard",
               "--name", "dg")[0] == 0
    n = 40

    def items(k: int) -> list[float]:
        return [1.0] * k + [0.0] * (n - k)

    write_cells(fixture_run, {
        "seq-math": {"math/id": items(36), "search/id": items(4), "general": items(10)},
        "seq-search": {"math/id": items(8), "search/id": items(32), "general": items(10)},
        "dg": {"math/id": items(22), "search/id": items(25), "general": items(9)},
    })
    code, out, err = cli("compare", "--run", str(fixture_run), "--json")
    assert code == 0, err
    (row,) = json.loads(out)["repair_scores"]
    assert (row["checkpoint"], row["from"], row["to"]) == ("dg", "seq-math", "seq-search")
    assert row["partition"] == {"math/id": "damaged", "search/id": "target", "general": "unchanged"}
    assert row["healing"]["value"] == pytest.approx((22 - 8) / (36 - 8))
    assert row["target_retention"]["value"] == pytest.approx((25 - 4) / (32 - 4))
    assert row["non_damage"]["value"] == pytest.approx(9 / 10)
    assert row["preservation"]["value"] is None and row["preservation"]["suites"] == []
    lo, hi = row["healing"]["ci95"]
    assert lo < row["healing"]["value"] < hi
    # the same score of the merge-free pair, asked for explicitly, and the table
    code, out, _ = cli("compare", "--run", str(fixture_run), "--repair-stage", "seq-math,seq-search")
    assert code == 0 and "four-part score" in out and "0.50 [" in out
    code, _, err = cli("compare", "--run", str(fixture_run), "--repair-stage", "seq-math")
    assert code == 1 and "OLD,NEW" in err
    # the Consolidation page and the exported figure show the same score
    from aclarena.dashboard.pages import consolidation as cpage
    from aclarena.figures import build_figures
    from aclarena.store import ResultsStore

    c = cpage.content(fixture_run)
    (shown,) = c["repairs"]
    assert shown["label"] == "dg" and shown["cells"][0].startswith("0.50 [")
    assert shown["cells"][1] == "-"
    bars = {t.name: t for t in c["repair_figure"].data}
    assert bars["healing"].y[0] == pytest.approx(0.5)
    with ResultsStore(fixture_run).reader() as r:
        figs = build_figures(r, load_manifest(fixture_run), "consolidation/repair")
    assert [f.name for f in figs] == ["consolidation-repair"]


def test_rank_percent_above_a_low_rank_update_is_said_and_vectors_are_not_counted(fixture_run, cli):
    """Issue 49: on a rank-16 LoRA stage `--rank-percent 25` restored every direction (25% of min(m, n) > 16), a
    full rollback reported as a partial repair; and `tensors_repaired` counted the 1-D tensors kept NEW's."""
    import shutil

    from safetensors.torch import save_file

    from aclarena.store.manifest import CheckpointSpec, write_manifest

    src = fixture_run / "checkpoints" / "seq-math"
    dst = fixture_run / "checkpoints" / "low-rank"
    shutil.copytree(src, dst)
    old = _weights(fixture_run, "seq-math")
    g = torch.Generator().manual_seed(7)
    new = {}
    for name, t in old.items():  # a rank-2 update of every matrix, as a merged rank-2 LoRA stage would be
        if t.ndim == 2:
            t = t + (torch.randn(t.shape[0], 2, generator=g) @ torch.randn(2, t.shape[1], generator=g)) * 0.05
        new[name] = t.contiguous()
    save_file(new, str(dst / "model.safetensors"), metadata={"format": "pt"})
    m = load_manifest(fixture_run)
    m.add(CheckpointSpec("low-rank", "checkpoints/low-rank", kind="stage", domain="search", phase="sft",
                         parent="seq-math"))
    write_manifest(m, fixture_run)
    argv = ["repair", "--run", str(fixture_run), "--from", "seq-math", "--to", "low-rank", "--method", "svd-restore"]
    code, out, err = cli(*argv, "--rank-percent", "25", "--name", "lr25", "--json")
    assert code == 0, err
    (o,) = json.loads(out)["outputs"]
    n_matrices = sum(t.ndim >= 2 for t in old.values())
    assert o["tensors_repaired"] == n_matrices < len(old)  # the 1-D tensors are NEW's, not repaired
    assert o["directions_kept"] == 0 and o["energy_removed"] == pytest.approx(1.0, abs=1e-6)
    (note,) = o["notes"]
    assert f"{n_matrices} of {n_matrices} changed matrices" in note and "full rollback" in note
    code, out, err = cli(*argv, "--rank-percent", "1", "--name", "lr1")  # k = 1 of rank 2: partial, no note
    assert code == 0, err
    assert "note:" not in out
    code, out, err = cli(*argv, "--rank-percent", "25", "--name", "lr25")  # reused: the note is read back
    assert code == 0, err
    assert sum(line.startswith("note: lr25: --rank-percent 25 restores every direction") for line in out.splitlines()) == 1


@pytest.mark.parametrize("method", ["svd-restore", "dg-hard"])
def test_row_blocks_write_the_whole_svds_weights(fixture_run, monkeypatch, method):
    """Tensors above the row-block size are repaired block by block (the memory bound of large vocabularies):
    the written weights are those of the whole-matrix SVD to float32 rounding."""
    import aclarena as acl
    from aclarena.consolidate import repair as CR

    run = acl.Run(fixture_run)
    extra = {"percents": [25.0]} if method == "svd-restore" else {}
    first = run.repair("seq-math", "seq-search", method=method, name="whole", **extra).outputs[0]
    monkeypatch.setattr(CR, "ROW_BLOCK_MIN_BYTES", 0)  # every matrix in blocks
    monkeypatch.setattr(CR, "ROW_BLOCK_BYTES", 8 * 64 * 8)  # of 8 rows where a row has 64 columns
    grams = []
    monkeypatch.setattr(R, "gram_spectrum", lambda *a, _f=R.gram_spectrum: grams.append(1) or _f(*a))
    second = run.repair("seq-math", "seq-search", method=method, name="blocked", **extra).outputs[0]
    whole, blocked = _weights(fixture_run, first.checkpoint), _weights(fixture_run, second.checkpoint)
    assert whole.keys() == blocked.keys()
    tall = [k for k, t in whole.items() if t.ndim == 2 and t.shape[0] > t.shape[1]]
    assert tall and len(grams) == len(tall)  # every tall matrix went through the row blocks
    for k in whole:
        torch.testing.assert_close(blocked[k], whole[k], rtol=0, atol=2e-5)
