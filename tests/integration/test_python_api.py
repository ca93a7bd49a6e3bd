"""The curated Python API (docs/python-api.md): a light import, the three notebook recipes, the example
percent-script, and the API's numbers against the verbs' and a naive computation."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python-api.md"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OMP_NUM_THREADS": "1"}


def recipes() -> dict[str, str]:
    """The ```python blocks of docs/python-api.md under each '## Recipe N' heading."""
    text = DOC.read_text(encoding="utf-8")
    out = {}
    for m in re.finditer(r"^## (Recipe \d+)[^\n]*\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M):
        blocks = re.findall(r"```python\n(.*?)```", m.group(2), flags=re.S)
        out[m.group(1)] = "\n".join(blocks)
    return out


def _exec(code: str, run: Path | None = None) -> dict:
    if run is not None:
        assert '"runs/demo"' in code
        code = code.replace('"runs/demo"', repr(str(run)))
    namespace: dict = {"__name__": "__recipe__"}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


def test_import_is_light_and_names_resolve():
    code = ("import sys, time, json; t = time.perf_counter(); import aclarena; dt = time.perf_counter() - t; "
            "print(json.dumps({'s': dt, 'heavy': sorted(m for m in ('torch', 'transformers', 'dash', 'h5py', "
            "'pandas') if m in sys.modules)}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    print(f"import aclarena: {got['s']:.3f} s")  # reported, not asserted (a loaded CI machine varies)
    assert got["heavy"] == []
    import aclarena as acl

    assert set(acl.__all__) == set(acl._LAZY) | {"__version__"}
    for name in acl._LAZY:
        assert getattr(acl, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        acl.nope  # noqa: B018


def test_training_names_are_in_the_api():
    # a notebook trains, configures and monitors through the top level: the callback and the config types
    import aclarena as acl
    from aclarena.train.callbacks import DriftMonitorCallback
    from aclarena.train.config import CurriculumConfig, PhaseSpec, StageSpec

    assert acl.DriftMonitorCallback is DriftMonitorCallback and acl.CurriculumConfig is CurriculumConfig
    cfg = acl.load_config(ROOT / "examples" / "tiny.toml")
    assert isinstance(cfg, acl.CurriculumConfig) and cfg.stages
    assert all(isinstance(s, acl.StageSpec) for s in cfg.stages)
    assert all(isinstance(p, acl.PhaseSpec) for s in cfg.stages for p in s.phases)
    assert (acl.StageSpec, acl.PhaseSpec) == (StageSpec, PhaseSpec)
    with pytest.raises(acl.AclarenaError, match="line 2: unknown key 'nmae' in \\[run\\] \\(did you mean 'name'"):
        acl.parse_config('[run]\nnmae = "x"\n')


def test_recipes_are_the_three_documented():
    assert list(recipes()) == ["Recipe 1", "Recipe 2", "Recipe 3"]


def test_recipe_1_vectors_and_displacement_match_the_verbs(fixture_run, cli):
    ns = _exec(recipes()["Recipe 1"], fixture_run)
    code, out, err = cli("vectors", "--run", str(fixture_run), "--json")
    assert code == 0, err
    verb = json.loads(out)
    assert verb["computed"] is False  # the recipe's pass was stored and is reused
    cos = ns["cos"]
    assert list(cos.index) == verb["cosines"]["labels"]
    np.testing.assert_allclose(cos.to_numpy(), np.array(verb["cosines"]["matrix"], dtype=float), rtol=0, atol=1e-12)
    assert ns["vec"].writes == ("vectors/gram", "vectors/summary")
    code, out, err = cli("displacement", "--run", str(fixture_run), "--json")
    assert code == 0, err
    updates = {u["checkpoint"]: u["norm"] for u in json.loads(out)["updates"]}
    frame = ns["disp"].to_pandas()
    assert dict(zip(frame["checkpoint"], frame["norm"], strict=True)) == pytest.approx(updates, rel=1e-12)
    assert ns["ckpts"]["name"].tolist() == ["base", "seq-math", "seq-search", "oracle-math", "lora-ecom"]


@pytest.fixture()
def probed_run(tmp_path, tokenizer, cli) -> Path:
    """A token run (peaked seq-math, two drifted later stages) with seq-math's probe set, not yet scored."""
    from tokens_helpers import PROMPTS, add_token_checkpoints, write_jsonl

    root = tmp_path / "tokens-run"
    add_token_checkpoints(root, tokenizer, name="api")
    prompts = write_jsonl(root / "prompts.jsonl", PROMPTS)
    code, _, err = cli("probe", "--run", str(root), "--ref", "seq-math", "--prompts", str(prompts),
                       "--max-new-tokens", "16", "--json")
    assert code == 0, err
    return root


def test_recipe_2_token_drift_matches_the_verb(probed_run, cli):
    ns = _exec(recipes()["Recipe 2"], probed_run)
    drift = ns["drift"]
    assert drift.checkpoints == ["seq-search", "seq-ecom"]
    assert "tokens/seq-math/reference" in drift.writes and "tokens/seq-math/scores/seq-ecom" in drift.writes
    code, out, err = cli("tokens", "--run", str(probed_run), "--ref", "seq-math", "--json")
    assert code == 0, err
    verb = json.loads(out)
    assert [r["status"] for r in verb["checkpoints"]] == ["cached", "cached"]
    summary = ns["summary"]
    for row in verb["checkpoints"]:
        mine = summary[summary["checkpoint"] == row["checkpoint"]].iloc[0]
        assert mine["kl_mean"] == pytest.approx(row["kl_mean"], rel=1e-12)
        assert mine["kl_share_high"] == pytest.approx(row["kl_share_high"], rel=1e-12)
    pos = ns["pos"]
    valid = pos[pos["status"] == 0]
    row = next(r for r in verb["checkpoints"] if r["checkpoint"] == "seq-ecom")
    assert len(pos) == verb["positions"] and int(valid["high"].sum()) == row["n_high"]
    assert float(valid["kl"].astype(float).mean()) == pytest.approx(row["kl_mean"], rel=1e-5)
    assert float(valid.loc[valid["high"], "kl"].astype(float).mean()) == pytest.approx(row["kl_mean_high"], rel=1e-5)


def test_token_drift_in_memory_equals_the_runs(probed_run):
    """acl.token_drift on the run's models (loaded by hand) and its probe set gives the run's numbers."""
    from transformers import AutoModelForCausalLM

    import aclarena as acl
    from aclarena.results.probes import read_probe_set

    run = acl.Run(probed_run)
    stored = run.tokens(ref="seq-math")
    probe = read_probe_set(run.store, "seq-math")
    models = {n: AutoModelForCausalLM.from_pretrained(probed_run / "checkpoints" / n) for n in ("seq-math", "seq-ecom")}
    mem = acl.token_drift(models["seq-math"], models["seq-ecom"], probe)
    want = stored.summaries["seq-ecom"]
    assert mem.summary.n_valid == want.n_valid and mem.summary.n_high == want.n_high
    assert mem.summary.kl_mean == pytest.approx(want.kl_mean, rel=1e-4)
    assert mem.summary.flip_rate == pytest.approx(want.flip_rate)
    a, b = stored.positions("seq-ecom"), mem.positions()
    assert list(a.columns) == list(b.columns)
    for col in ("sequence", "position", "token", "top1_ref", "top1", "status", "high"):
        np.testing.assert_array_equal(a[col].to_numpy(), b[col].to_numpy(), err_msg=col)
    np.testing.assert_allclose(a["kl"].to_numpy(float), b["kl"].to_numpy(float), rtol=1e-3, atol=1e-6)
    with pytest.raises(acl.AclarenaError, match="tokenizer"):
        acl.token_drift(models["seq-math"], models["seq-ecom"], ["what is 3 + 4?"])


def test_recipe_3_in_memory(capsys):
    ns = _exec(recipes()["Recipe 3"])
    drift, cos = ns["drift"], ns["cos"]
    assert drift.summary.n_valid > 0 and drift.summary.kl_mean > 0
    frame = drift.positions()
    assert len(frame) == drift.summary.n_positions
    assert float(frame["kl"].astype(float).mean()) == pytest.approx(drift.summary.kl_mean, rel=1e-5)
    assert list(cos.index) == ["later", "other"]
    np.testing.assert_allclose(np.diag(cos.to_numpy()), 1.0, atol=1e-9)


def test_task_vector_cosines_against_flattened_weights(tmp_path, tokenizer):
    """The streamed Gram pass against a naive cosine of the flattened weight differences (one tied head)."""
    import torch
    from fixtures import perturb

    import aclarena as acl
    from aclarena.models.tiny import build_model, save_checkpoint, tiny_config

    base = build_model(tiny_config(tokenizer), seed=0)
    a = perturb(base, 0.01, seed=1)
    b = perturb(a, 0.02, seed=2, only="mlp")
    c = perturb(base, 0.03, seed=3)
    for name, m in (("base", base), ("a", a), ("b", b), ("c", c)):
        save_checkpoint(m, tokenizer, tmp_path / "ckpt" / name)

    def flat(m):
        return torch.cat([p.detach().double().flatten() for p in m.parameters()])

    d = [flat(m) - flat(base) for m in (a, b, c)]
    want = np.array([[float(torch.dot(x, y) / (x.norm() * y.norm())) for y in d] for x in d])
    got = acl.task_vector_cosines([tmp_path / "ckpt" / n for n in ("a", "b", "c")], base=tmp_path / "ckpt" / "base")
    assert list(got.index) == ["a", "b", "c"]
    np.testing.assert_allclose(got.to_numpy(), want, rtol=0, atol=1e-9)
    with pytest.raises(acl.AclarenaError):
        acl.task_vector_cosines([], base=tmp_path / "ckpt" / "base")


@pytest.mark.slow
def test_example_percent_script_runs(tmp_path):
    script = ROOT / "examples" / "python_api.py"
    assert script.read_text(encoding="utf-8").startswith("# %%")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, env=_env(),
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "in-memory KL mean" in proc.stdout
    assert (tmp_path / "run" / "results.h5").is_file()


def test_run_flips_calls_the_flips_analysis_with_the_verbs_defaults(fixture_run, monkeypatch):
    import aclarena as acl
    import aclarena.analysis.flips as flips_mod

    seen = {}

    def fake(run_dir, early, late, suite, settings=None, **kw):
        seen.update(run_dir=run_dir, early=early, late=late, suite=suite, settings=settings, **kw)
        return "result"

    monkeypatch.setattr(flips_mod, "flips", fake)
    run = acl.Run(fixture_run)
    assert run.flips("a", "b", "math/id", settings=acl.FlipSettings(seed=3)) == "result"
    assert (seen["early"], seen["late"], seen["suite"], seen["settings"].seed) == ("a", "b", "math/id", 3)
    assert seen["load"].device == "cpu" and seen["force"] is False


def test_eval_result_lists_the_cells_it_wrote(fixture_run):
    """Issue 49: docs/python-api.md promises `.writes` on results that write; EvalResult had none."""
    import aclarena as acl

    run = acl.Run(fixture_run)
    res = run.eval(checkpoints="base", suites="math/id", n=2, samples=0)
    (cell,) = res.cells
    assert res.writes == (cell["key"],) and cell["key"].startswith("capability/")
    assert run.eval(checkpoints="base", suites="math/id", n=2, samples=0).writes == ()  # reused: nothing written
