"""Results as data: the README's and docs' result tables equal what docs_results renders from the
committed files under docs/results/, and the renderer reads strict JSON only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.docs_results import REPO, ResultsError, blocks, main, regenerate, render_block

SUMMARY = {
    "made_by": {"command": "aclarena-diag demo --seed 0", "date": "2026-12-01", "machine": "2 CPU cores"},
    "stages": [
        {"stage": "seq-math", "suite": "math/id", "parent": "base", "parent_score": 0.0, "after_sft": 0.16,
         "score": 0.18, "oracle": 0.18},
        {"stage": "seq-search", "suite": "search/id", "parent": "seq-math", "parent_score": 0.0, "after_sft": None,
         "score": 0.02, "oracle": 0.125},
    ],
    "lead_time": [{"domain": "math", "predictor": "fkl", "metric": "fkl", "warn_step": 10, "drop_step": 30,
                   "lead": 20},
                  {"domain": "search", "predictor": "loss", "metric": "loss", "warn_step": None, "drop_step": None,
                   "lead": None},
                  {"domain": "ecom", "predictor": "loss", "metric": "loss", "warn_step": 5, "drop_step": None,
                   "lead": None, "drop_reachable": False}],
}


def test_committed_tables_equal_what_the_files_generate():
    found = blocks()
    assert {b.table for b in found} >= {"demo-stages", "demo-lead-time", "demo-comparison", "findings"}
    stale = [f"{b.file.name}:{b.table}" for b in found if b.stale]
    assert not stale, f"run `make docs-results`: {stale}"
    assert main(["--check"]) == 0


def _repo(tmp_path: Path, summary: dict | None) -> Path:
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "README.md").write_text(
        "intro\n\n<!-- results: demo-stages from docs/results/demo.json -->\nold table\n<!-- /results -->\n\n"
        "<!-- results: demo-lead-time from docs/results/demo.json -->\n<!-- /results -->\nend\n", encoding="utf-8")
    if summary is not None:
        (tmp_path / "docs" / "results" / "demo.json").write_text(json.dumps(summary), encoding="utf-8")
    return tmp_path


def test_tables_render_from_the_file_and_a_rerun_changes_nothing(tmp_path):
    repo = _repo(tmp_path, SUMMARY)
    assert main(["--check", "--repo", str(repo)]) == 1  # "old table" is stale
    assert regenerate(repo) == [repo / "README.md"]
    text = (repo / "README.md").read_text(encoding="utf-8")
    assert "| seq-math | math/id | 0.00 (base) | 0.16 | 0.18 | 0.18 |" in text
    assert "| seq-search | search/id | 0.00 | - | 0.02 | 0.12 |" in text  # None is '-', 0.125 rounds half even
    assert "| math | forward KL to the stage start | 10 | 30 | 20 |" in text
    assert "| search | training loss | never | none | - |" in text
    assert "| ecom | training loss | 5 | unreachable | - |" in text  # too few items solved: no drop could be significant
    assert "`aclarena-diag demo --seed 0`, 2026-12-01, 2 CPU cores" in text
    assert text.startswith("intro\n") and text.endswith("<!-- /results -->\nend\n")
    assert regenerate(repo) == []
    assert main(["--check", "--repo", str(repo)]) == 0
    # a changed number in the file makes the committed table stale
    changed = json.loads(json.dumps(SUMMARY))
    changed["stages"][0]["score"] = 0.2
    (repo / "docs" / "results" / "demo.json").write_text(json.dumps(changed), encoding="utf-8")
    assert [b.table for b in blocks(repo) if b.stale] == ["demo-stages"]


def test_a_missing_file_is_marked_to_be_regenerated(tmp_path):
    repo = _repo(tmp_path, None)
    regenerate(repo)
    text = (repo / "README.md").read_text(encoding="utf-8")
    assert "old table" not in text
    assert text.count("*To be regenerated from `docs/results/demo.json` by `aclarena-diag demo") == 2


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_non_strict_json_is_refused(tmp_path, bad, capsys):
    repo = _repo(tmp_path, None)
    text = json.dumps(SUMMARY).replace('"score": 0.18', f'"score": {bad}')
    (repo / "docs" / "results" / "demo.json").write_text(text, encoding="utf-8")
    with pytest.raises(ResultsError, match="not strict JSON"):
        render_block("demo-stages", "docs/results/demo.json", repo)
    before = (repo / "README.md").read_text(encoding="utf-8")
    assert main(["--repo", str(repo)]) == 1
    assert "not strict JSON" in capsys.readouterr().err
    assert (repo / "README.md").read_text(encoding="utf-8") == before


def test_unknown_table_and_source_outside_results(tmp_path):
    with pytest.raises(ResultsError, match="unknown results table 'demo-stagez'; known: "):
        render_block("demo-stagez", "docs/results/demo.json", tmp_path)
    with pytest.raises(ResultsError, match="result files live under docs/results/"):
        render_block("demo-stages", "runs/demo/summary.json", tmp_path)


def test_repo_root_is_this_checkout():
    assert (REPO / "tools" / "docs_results.py").is_file() and (REPO / "pyproject.toml").is_file()


FINDINGS = {
    "seeds": [0, 1, 2],
    "made_by": {"command": "aclarena-diag study --run runs/study --seeds 3", "date": "2026-12-01"},
    "part_times": {"train": 797.07, "eval": 800.4},
    "rows": [{"finding": "task-vector cosines", "quantity": "cos(sdft - base, sdft-from-end - seq end)",
              "study": "0.77", "values": [0.5, None, 0.7], "mean": 0.6, "spread": 0.1414, "digits": 2},
             {"finding": "SFT vs RL displacement", "quantity": "math: ||dθ|| SFT / ||dθ|| RL",
              "study": "3-7x", "values": [35.5, 33.5, 35.9], "mean": 34.97, "spread": 1.29, "digits": 1},
             {"finding": "consolidation vs the sequential end and the oracles", "quantity": "math/id of merge-ties",
              "study": None, "values": [None, None, None], "mean": None, "spread": None, "digits": 2}],
    "validation": {"status": "ok", "fit_seeds": [0], "held_out_seeds": [1, 2],
                   "series": {"fit": 3, "held_out": 6, "held_out_drops": 2},
                   "notes": ["seed 0 had no significant drop"],
                   "predictors": [{"predictor": "razor_fkl", "threshold": 0.0125, "leads": [4], "lead_mean": 4.0,
                                   "detected": 1, "false_alarms": 2, "misses": 1, "r2": 0.41}]},
}


def test_findings_and_validation_tables(tmp_path):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "README.md").write_text(
        "<!-- results: findings from docs/results/findings.json -->\n<!-- /results -->\n"
        "<!-- results: monitor-validation from docs/results/findings.json -->\n<!-- /results -->\n", encoding="utf-8")
    path = tmp_path / "docs" / "results" / "findings.json"
    path.write_text(json.dumps(FINDINGS), encoding="utf-8")
    regenerate(tmp_path)
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "| task-vector cosines | cos(sdft - base, sdft-from-end - seq end) | 0.77 | 0.60 ± 0.14 | 0.50, -, 0.70 | 2/3 |" in text
    assert "| math/id of merge-ties | - | - | -, -, - | 0/3 |" in text
    # a pipe inside a cell is escaped, so the row keeps its columns
    assert r"| math: \|\|dθ\|\| SFT / \|\|dθ\|\| RL | 3-7x | 35.0 ± 1.3 | 35.5, 33.5, 35.9 | 3/3 |" in text
    assert "| forward KL on the current task (RL's Razor) | 0.013 | 4.0 | 1 | 2 | 1 | 0.41 |" in text
    assert "Reported on seeds 1, 2 only (6 domain series, 2 with a significant drop)" in text
    assert "*Note: seed 0 had no significant drop.*" in text
    # a validation that could not run says why, in one line
    path.write_text(json.dumps(FINDINGS | {"validation": {"status": "not run", "reason": "needs 2 seeds"}}))
    regenerate(tmp_path)
    assert "*No held-out validation in this file: needs 2 seeds.*" in (tmp_path / "README.md").read_text()


def test_study_timing_puts_the_two_studies_side_by_side():
    from tools.docs_results import study_timing

    settings = {"seeds": 3, "n": 100, "lead_n": 100, "lead_stage": "ecom", "threads": 1, "old_commit": "a" * 40,
                "new_commit": "b" * 40, "old_config": "examples/mini.toml", "new_config": "examples/mini-fast.toml"}
    seg = {"segment": 0, "wall_s": 1.0, "status": "finished", "parts_s": {}}
    stopped = {"segment": 0, "wall_s": 500.0, "status": "killed", "parts_s": {"train": 300.0}}
    data = {"settings": settings, "target_ratio": 0.5, "ratio_new_old": 0.6,
            "jobs": {"old": {"done": True, "wall_s": 10000.0, "segments": [stopped, seg], "parts_s": {"train": 8000.0, "eval": 1000.0}},
                     "new": {"done": True, "wall_s": 6000.0, "segments": [seg], "parts_s": {"train": 5000.0, "vectors": 10.0}}}}
    text = study_timing(data)
    assert "| part | old: aaaaaaa, examples/mini.toml | new: bbbbbbb, examples/mini-fast.toml | new / old |" in text
    assert "| train | 8,000 s | 5,000 s | 0.62 |" in text
    assert "| eval | 1,000 s | - | - |" in text and "| vectors | - | 10 s | - |" in text
    assert "| **wall time, start to end** | **10,000 s** | **6,000 s** | **0.60** |" in text
    assert "| part in progress at a stop (its time when it finished is above) | 200 s | 0 s | - |" in text
    assert "2 segment(s)" in text and "at most 0.5" in text


def test_demo_renderers_show_every_part_of_the_summary():
    from tools.docs_results import demo_displacement, demo_forgetting, demo_times, demo_tokens

    summary = {
        "ecom_effect": {"before": "seq-search", "after": "seq-ecom", "math/id": {"before": 0.2, "after": 0.1},
                        "search/id": {"before": 0.4, "after": None}, "general": {"before": 0.3, "after": 0.3}},
        "forgetting": {"average_accuracy": 0.25, "backward_transfer": -0.125, "forward_transfer": None},
        "sft_rl": [{"stage": "seq-math", "sft": 30.0, "rl": 1.5, "ratio": 20.0},
                   {"stage": "seq-search", "sft": 10.0, "rl": 0.0, "ratio": None}],
        "sft_rl_overall": 20.0,
        "token_drift": {"high": "q=0.06", "checkpoints": [{"checkpoint": "seq-if", "kl_share_high": 0.09,
                                                        "barely_moved_low": 0.23, "kl_mean": 0.5}]},
        "step_times": {"train": 12.5, "eval": 100.0}, "total_s": 130.0,
        "phase_times": [{"name": "seq-math-sft", "steps": 300, "time_s": 103.0, "status": "finished"},
                        {"name": "oracle-math", "steps": None, "time_s": None, "status": "reused"}],
    }
    forgetting = demo_forgetting(summary)
    assert "| math/id (seq-search → seq-ecom) | 0.20 | 0.10 |" in forgetting
    assert "| search/id (seq-search → seq-ecom) | 0.40 | - |" in forgetting  # unscored: a dash, never 0
    assert "| BWT (backward transfer) | -0.12 |" in forgetting and "| FWT (forward transfer) | - |" in forgetting
    disp = demo_displacement(summary)
    assert "| seq-math | 30.00 | 1.500 | 20.0× |" in disp and "undefined (RL moved 0)" in disp
    assert "pooled over stages with both phases" in disp
    assert "| seq-if | 0.09 | 0.23 | 0.500 |" in demo_tokens(summary) and "top 6% entropy" in demo_tokens(summary)
    times = demo_times(summary)
    assert "| eval | 100 s |" in times and "| seq-math-sft | 300 | 103 s | finished |" in times and "| oracle-math | - | - | reused |" in times


def test_demo_tables_show_intervals_and_the_paired_test():
    from tools.docs_results import demo_forgetting, demo_stages

    eff = {"before": "seq-search", "after": "seq-ecom",
           "search/id": {"before": 0.5, "after": 0.26, "before_ci95": [0.4, 0.59], "after_ci95": [0.18, 0.34],
                         "lost": 24, "gained": 0, "n": 100, "p_drop": 5.96e-8},
           "general": {"before": 0.0, "after": 0.0, "before_ci95": [0.0, 0.0], "after_ci95": [0.0, 0.0]}}
    table = demo_forgetting({"ecom_effect": eff})
    assert "| search/id (seq-search → seq-ecom) | 0.50 [0.40, 0.59] | 0.26 [0.18, 0.34] | 24 / 0 of 100 | 6e-08 |" \
        in table and "McNemar p (drop)" in table
    assert "| general (seq-search → seq-ecom) | 0.00 [0.00, 0.00] | 0.00 [0.00, 0.00] | - | - |" in table
    stages = demo_stages({"stages": [{"stage": "seq-search", "suite": "search/id", "parent": "seq-math",
                                      "parent_score": 0.0, "after_sft": 0.46, "score": 0.5, "score_ci95": [0.4, 0.59],
                                      "oracle": 0.8, "oracle_ci95": None, "general": None}]})
    assert "| seq-search | search/id | 0.00 | 0.46 | 0.50 [0.40, 0.59] | 0.80 | - |" in stages


def test_test_tiers_table():
    from tools.docs_results import test_tiers

    table = test_tiers({"tiers": [
        {"tier": "unit", "command": "pytest tests/unit", "passed": 10, "skipped": 1, "deselected": 0, "seconds": 61.35,
         "source": "measured"},
        {"tier": "full", "command": "make test", "passed": None, "seconds": 1030, "source": "CI"}]})
    assert "| unit | `pytest tests/unit` | 10 passed, 1 skipped, 0 deselected | 61 s | measured |" in table
    assert "| full | `make test` | - | 1030 s | CI |" in table


def test_demo_signatures_and_findings_show_each_interval():
    from tools.docs_results import demo_signatures, findings_table

    block = {"settings": {"first_k": 12}, "updates": [
        {"update": "seq-math", "kind": "rl", "domain": "math", "n_sequences": 32, "high_share": 0.06,
         "first_k_share": 0.4, "kl_share_high": [0.24, 0.16, 0.45], "barely_moved_low": [0.96, 0.9, 0.99],
         "kl_share_first_k": [0.5, 0.3, 0.7], "concentration_area": [0.9, 0.8, 0.95]}]}
    table = demo_signatures({"signatures": block})
    assert "| seq-math | rl | math | 32 | 0.24 [0.16, 0.45] | 0.96 [0.90, 0.99] | 0.50 [0.30, 0.70] | 0.40 |" in table
    assert "first 12 reply tokens" in table
    assert "did not run" in demo_signatures({"signatures": None})
    failed = demo_signatures({"signatures": {**block, "failed": ["seq-math-s2 on math (seq-math-sft-s2.math): KL 0"]}})
    assert "*No signature: seq-math-s2 on math (seq-math-sft-s2.math): KL 0.*" in failed
    rows = [{"finding": "f", "quantity": "q", "study": None, "values": [0.24, None, 0.3], "mean": 0.27,
             "spread": 0.04, "digits": 2, "intervals": [[0.16, 0.45], None, [0.2, 0.4]]}]
    assert "| 0.27 ± 0.04 | 0.24 [0.16, 0.45], -, 0.30 [0.20, 0.40] | 2/3 |" in findings_table({"seeds": [0, 1, 2],
                                                                                             "rows": rows})


def test_study_by_seed_lists_each_seed_and_the_sums(tmp_path):
    from train_helpers import load_benchmark

    from tools.docs_results import study_by_seed

    bench = load_benchmark("study_by_seed")
    pairs = []
    for seed, (old, new) in enumerate([(4000.0, 2000.0), (3000.0, 1800.0)]):
        sfx = f".seed{seed}" if seed else ""
        t, v = tmp_path / f"t{seed}.json", tmp_path / f"v{seed}.json"
        t.write_text(json.dumps({
            "made_by": {"date": "2026-12-07"}, "ratio_new_old": new / old, "jobs": {"old": {"wall_s": old}, "new": {"wall_s": new}},
            "settings": {"seeds": 1, "n": 100, "lead_n": 100, "lead_stage": "ecom", "threads": 1, "old_commit": "a" * 40,
                         "new_commit": "b" * 40, "old_config": f"examples/mini{sfx}.toml",
                         "new_config": f"examples/mini-half{sfx}.toml"}}))
        v.write_text(json.dumps({"stage": "ecom", "lead_n": 100, "retrain_s": {"old": 800.0, "new": 450.0},
                                 "new_riding_s_estimate": 150.0}))
        pairs.append(bench.one_seed(t, v))
    text = study_by_seed(bench.combine(pairs))
    assert "| 1 | 2026-12-07 | bbbbbbb | 3,000 + 800 | 1,800 + ~150 | 3,800 s | 1,950 s | 0.51 |" in text
    assert "**2 seeds**" in text and "**8,600 s**" in text and "**4,100 s**" in text and "**0.48** (seeds 0.45-0.51)" in text
    assert "with examples/mini.toml; new: examples/mini-half.toml" in text
