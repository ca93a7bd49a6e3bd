"""benchmarks/study_by_seed.py: a study's wall time summed from one-seed side-by-side pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_helpers import load_benchmark


def _bench():
    return load_benchmark("study_by_seed")


def _pair(tmp_path: Path, seed: int, old: float, new: float, old_val: float, new_retrain: float, stage: float, *,
          seeds: int = 1, n: int = 100) -> tuple[Path, Path]:
    suffix = f".seed{seed}" if seed else ""
    timing = {"made_by": {"date": "2026-12-07"},
              "settings": {"seeds": seeds, "n": n, "lead_n": 100, "lead_stage": "ecom", "threads": 1,
                           "old_commit": "a" * 40, "new_commit": "b" * 40, "old_config": f"examples/mini{suffix}.toml",
                           "new_config": f"examples/mini-half{suffix}.toml"},
              "jobs": {"old": {"wall_s": old}, "new": {"wall_s": new}}, "ratio_new_old": new / old}
    val = {"stage": "ecom", "lead_n": 100, "retrain_s": {"old": old_val, "new": new_retrain},
           "new_stage_in_chain_s": stage, "new_riding_s_estimate": new_retrain - stage}
    t, v = tmp_path / f"t{seed}.json", tmp_path / f"v{seed}.json"
    t.write_text(json.dumps(timing), encoding="utf-8")
    v.write_text(json.dumps(val), encoding="utf-8")
    return t, v


def test_each_seed_is_its_study_and_its_validation_and_the_ratio_is_of_the_sums(tmp_path, capsys):
    bench = _bench()
    a = _pair(tmp_path, 0, 4000.0, 2000.0, 800.0, 450.0, 300.0)   # old 4800, new 2150
    b = _pair(tmp_path, 1, 3000.0, 1800.0, 1000.0, 500.0, 300.0)  # old 4000, new 2000
    out_path = tmp_path / "out.json"
    assert bench.main(["--seed", *map(str, b), "--seed", *map(str, a), "--json-out", str(out_path)]) == 0
    out = json.loads(out_path.read_text(encoding="utf-8"))
    assert [s["seed"] for s in out["seeds"]] == [0, 1]
    assert out["seeds"][0]["old_s"] == 4800.0 and out["seeds"][0]["new_s"] == 2150.0
    assert out["old_s"] == 8800.0 and out["new_s"] == 4150.0
    assert out["ratio_new_old"] == pytest.approx(4150 / 8800)  # the sums' ratio, not the mean of the seeds' ratios
    assert out["ratio_range"] == pytest.approx([2150 / 4800, 2000 / 4000])
    assert "2 seeds: old 8,800 s, new 4,150 s -> new / old 0.47" in capsys.readouterr().out


def test_a_negative_riding_estimate_counts_as_nothing(tmp_path):
    s = _bench().one_seed(*_pair(tmp_path, 0, 4000.0, 2000.0, 800.0, 280.0, 300.0))
    assert s["validation_s"]["new"] == 0.0 and s["new_s"] == 2000.0


@pytest.mark.parametrize("case, match", [
    ("twice", "a seed given twice"),
    ("three seeds", "not a finished one-seed timing"),
    ("other n", r"other settings than seed 0's \(n\)"),
    ("missing", "cannot read it as a result"),
])
def test_pairs_that_do_not_add_up_are_refused_in_one_line(tmp_path, case, match):
    bench = _bench()
    a = _pair(tmp_path, 0, 4000.0, 2000.0, 800.0, 450.0, 300.0)
    b = {"twice": lambda: a, "three seeds": lambda: _pair(tmp_path, 1, 1.0, 1.0, 1.0, 1.0, 0.0, seeds=3),
         "other n": lambda: _pair(tmp_path, 1, 1.0, 1.0, 1.0, 1.0, 0.0, n=50),
         "missing": lambda: (tmp_path / "none.json", a[1])}[case]()
    with pytest.raises(SystemExit, match=match) as e:
        bench.main(["--seed", *map(str, a), "--seed", *map(str, b)])
    assert "\n" not in str(e.value)


def test_pairs_of_other_recipes_are_refused(tmp_path):
    bench = _bench()
    a = _pair(tmp_path, 0, 4000.0, 2000.0, 800.0, 450.0, 300.0)
    t, v = _pair(tmp_path, 1, 1.0, 1.0, 1.0, 1.0, 0.0)
    data = json.loads(t.read_text(encoding="utf-8"))
    data["settings"]["new_config"] = "examples/mini-fast.seed1.toml"
    t.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SystemExit, match=r"other settings than seed 0's \(new_recipe\)"):
        bench.main(["--seed", *map(str, a), "--seed", str(t), str(v)])
