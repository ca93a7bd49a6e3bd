"""The demo's summary from plain rows and the steps' typed results (no model): stage ends, parents, ecom effect,
JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aclarena.analysis.demo import _is_stage_end, _plain, _store, build_summary
from aclarena.analysis.displacement import DisplacementResult
from aclarena.analysis.eval import EvalResult
from aclarena.analysis.signatures import SignaturesResult
from aclarena.analysis.steps import Failed
from aclarena.diagnostics.displacement import PhaseRatio

DOMAINS = ("math", "search", "ecom", "if")


def _eval(cells: list[dict[str, Any]]) -> EvalResult:
    """An ``eval`` step's result holding ``cells`` (checkpoint, suite, status, mean, ci95)."""
    return EvalResult(settings={}, settings_id="s", checkpoints=[], suites=[], skipped=0,
                      cells=[{"ci95": None, **c} for c in cells])


def _signed(rows: list[dict[str, Any]], settings: dict[str, Any] | None = None) -> SignaturesResult:
    return SignaturesResult(run_dir=Path("run"), settings=settings or {}, rows=tuple(rows), signatures={})


def rows() -> list[dict]:
    out = [{"name": "base", "kind": "base", "domain": None, "parent": None}]
    prev = "base"
    for d in DOMAINS:
        out += [{"name": f"seq-{d}-sft", "kind": "stage", "domain": d, "parent": prev},
                {"name": f"seq-{d}", "kind": "stage", "domain": d, "parent": f"seq-{d}-sft"}]
        prev = f"seq-{d}"
    for d in DOMAINS[1:]:
        out += [{"name": f"oracle-{d}-sft", "kind": "oracle", "domain": d, "parent": "base"},
                {"name": f"oracle-{d}", "kind": "oracle", "domain": d, "parent": f"oracle-{d}-sft"}]
    for r in out:
        r.update(status="trained", steps=3, time_s=1.5)
    return out


def test_stage_ends_are_the_last_phase_of_each_domain():
    rs = rows()
    assert [r["name"] for r in rs if r["kind"] == "stage" and _is_stage_end(r["name"], rs)] == \
        ["seq-math", "seq-search", "seq-ecom", "seq-if"]
    assert [r["name"] for r in rs if r["kind"] == "oracle" and _is_stage_end(r["name"], rs)] == \
        ["oracle-search", "oracle-ecom", "oracle-if"]


def test_summary_scores_parents_and_ecom_effect(tmp_path):
    rs = rows()
    ends = ["seq-math", "seq-search", "seq-ecom", "seq-if"]
    score = {("base", "math/id"): 0.0, ("seq-math", "math/id"): 0.14, ("seq-search", "math/id"): 0.06,
             ("seq-ecom", "math/id"): 0.0, ("seq-search", "search/id"): 0.1, ("seq-ecom", "search/id"): 0.05,
             ("seq-math-sft", "math/id"): 0.12, ("seq-ecom", "ecom/id"): float("nan")}
    cells = [{"checkpoint": c, "suite": s, "status": "ok", "mean": m} for (c, s), m in score.items()]
    cells[1]["ci95"] = [0.08, 0.21]  # seq-math on math/id
    results = {"eval_chain": _eval(cells),
               "paired": {"search/id": {"lost": 3, "gained": 1, "n": 20, "p_drop": 0.3125},
                          "general": {"error": "'seq-search' has no capability cell on suite 'general'"}},
               "displacement": DisplacementResult(run="r", children=(), parents=(), specs=(), computed=False,
                                                  summaries={}, ratios={"all": ([PhaseRatio("math", 2.0, 0.5)], 4.0, [])})}
    s = build_summary(rs, results, ends, {"train": 1.0}, 2.0, "mini", 50)
    by = {r["stage"]: r for r in s["stages"]}
    assert [by[e]["parent"] for e in ends] == ["base", "seq-math", "seq-search", "seq-ecom"]
    assert by["seq-math"]["score"] == 0.14 and by["seq-math"]["parent_score"] == 0.0
    assert by["seq-math"]["after_sft"] == 0.12
    assert s["ecom_effect"]["before"] == "seq-search"
    assert by["seq-math"]["score_ci95"] == [0.08, 0.21] and by["seq-search"]["score_ci95"] is None
    nothing = {"before_ci95": None, "after_ci95": None}
    assert s["ecom_effect"]["math/id"] == {"before": 0.06, "after": 0.0, **nothing}  # not paired: no counts
    assert s["ecom_effect"]["search/id"] == {"before": 0.1, "after": 0.05, **nothing, "lost": 3, "gained": 1,
                                             "n": 20, "p_drop": 0.3125}
    assert "lost" not in s["ecom_effect"]["general"]  # a suite that could not be paired has no counts
    assert s["sft_rl"] == [{"stage": "math", "ratio": 4.0, "sft": 2.0, "rl": 0.5}] and s["sft_rl_overall"] == 4.0
    assert by["seq-ecom"]["score"] is None  # a NaN mean is no score (as JSON carries it)
    plain = _plain(s)
    assert plain["stages"][2]["score"] is None
    _store(tmp_path, s)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(plain))


def _full_summary() -> dict[str, Any]:
    """A summary as ``run_demo`` stores it: build_summary's keys, then the seed and made_by."""
    s = _plain(build_summary(rows(), {"signatures": Failed("x")}, ["seq-math", "seq-search"], {"train": 1.5}, 2.0,
                             "mini", 50))
    return {**s, "seed": 0, "made_by": {"command": "aclarena-diag demo --preset mini --seed 0 -n 50"}}


def test_the_stored_summary_reads_back_with_the_same_keys_in_the_same_order(tmp_path):
    from aclarena.results.demo import KINDS, STORE_KEY, DemoSummaryData, read_demo_summary
    from aclarena.store import Json, ResultsStore

    assert list(KINDS) == [f.name for f in dataclasses.fields(DemoSummaryData)]
    for s in (_full_summary(), {k: v for k, v in _full_summary().items() if k not in ("seed", "made_by")}):
        _store(tmp_path, s)
        with ResultsStore(tmp_path).reader() as r:
            got = read_demo_summary(r)
            assert r.attrs(STORE_KEY)["result-type"] == "demo-summary"
            stored = r.read(f"{STORE_KEY}/summary")
        assert got is not None and list(got.to_json()) == list(s) and got.to_json() == s
        assert got.preset == "mini" and got.eval_tasks_per_suite == 50 and got.errors == {"signatures": "x"}
        assert (tmp_path / "summary.json").read_text() == json.dumps(s, indent=1) + "\n"
        assert json.dumps(stored) == json.dumps(s)  # the store's element holds the file's JSON, key for key
    (tmp_path / "other").mkdir()
    other = ResultsStore(tmp_path / "other")  # a store without a demo summary
    other.write("x", {"summary": Json(s)}, result_type="t")
    with other.reader() as r:
        assert read_demo_summary(r) is None and read_demo_summary(None) is None


@pytest.mark.parametrize("change,why", [({"findings": None}, "findings is a NoneType, not list"),
                                         ({"eval_tasks_per_suite": "50"}, "eval_tasks_per_suite is a str"),
                                         ({"seed": True}, "seed is a bool"),
                                         ({"stages": "DROP"}, "no stages")])
def test_a_stored_summary_of_the_wrong_shape_is_one_line(tmp_path, change, why):
    from aclarena.errors import StoreError
    from aclarena.results.demo import STORE_KEY, read_demo_summary
    from aclarena.store import Json, ResultsStore

    s = {k: v for k, v in {**_full_summary(), **change}.items() if v != "DROP"}
    ResultsStore(tmp_path).write(STORE_KEY, {"summary": Json(s)}, result_type="demo-summary")
    with ResultsStore(tmp_path).reader() as r, pytest.raises(StoreError, match="is damaged") as e:
        read_demo_summary(r)
    assert why in str(e.value) and STORE_KEY in str(e.value) and "\n" not in str(e.value)


def test_summary_lead_time_rows_say_when_no_drop_could_be_significant():
    lead = {"table": [{"domain": "search", "predictor": "razor_fkl", "metric": "fkl", "warn_step": 10, "drop_step": 95,
                       "lead": 85},
                      {"domain": "math", "predictor": "razor_fkl", "metric": "fkl", "warn_step": 10, "drop_step": None,
                       "lead": None}],
            "drop_test": {"domains": {"search": {"reachable": True}, "math": {"reachable": False}}}}
    s = build_summary(rows(), {"lead_time": lead}, ["seq-math", "seq-search", "seq-ecom", "seq-if"], {}, 1.0, "mini", 50)
    assert [(r["domain"], r["drop_step"], r["drop_reachable"]) for r in s["lead_time"]] == \
        [("search", 95, True), ("math", None, False)]


def test_summary_carries_the_phase_signatures(capsys):
    """Issue 31: the signatures step's result becomes the summary's `signatures` block, and is printed."""
    from aclarena.cli.demo import print_summary

    ci = {m: 0.5 for m in ("kl_share_high", "barely_moved_low", "kl_share_first_k", "concentration_area")}
    row = {"update": "seq-math", "kind": "rl", "domain": "math", "n_sequences": 32, "high_share": 0.06,
           "first_k_share": 0.4, **ci, **{f"{m}_low": 0.4 for m in ci}, **{f"{m}_high": 0.7 for m in ci}}
    s = build_summary(rows(), {"signatures": _signed([row], {"first_k": 12})}, ["seq-math"], {}, 1.0, "mini", 10)
    (got,) = s["signatures"]["updates"]
    assert got["kl_share_high"] == [0.5, 0.4, 0.7] and got["kind"] == "rl" and got["first_k_share"] == 0.4
    failed = build_summary(rows(), {"signatures": Failed("x")}, ["seq-math"], {}, 1.0, "mini", 10)
    assert failed["signatures"] is None and failed["errors"] == {"signatures": "x"}
    print_summary(_plain(s), "runs/demo")
    assert "0.50 [0.40, 0.70]" in capsys.readouterr().out


# --- issue 42: the findings the demo names, one line each, and the folder it refuses ---------------------------


def _sig(update: str, kind: str, share: tuple[float, float, float], high: float = 0.06) -> dict:
    keep = {"kl_share_high": share, "barely_moved_low": (0.9, 0.8, 0.95), "kl_share_first_k": (0.2, 0.1, 0.3),
            "concentration_area": (0.9, 0.8, 0.95)}
    return {"update": update, "kind": kind, "domain": "math", "n_sequences": 32, "high_share": high,
            "first_k_share": 0.6, **{m: v[0] for m, v in keep.items()}, **{f"{m}_low": v[1] for m, v in keep.items()},
            **{f"{m}_high": v[2] for m, v in keep.items()}}


def _two_stage_rows() -> list[dict]:
    out = [{"name": "base", "kind": "base", "domain": None, "parent": None, "status": "shipped"}]
    prev = "base"
    for d in ("math", "search"):
        out += [{"name": f"seq-{d}-sft", "kind": "stage", "domain": d, "parent": prev, "status": "trained"},
                {"name": f"seq-{d}", "kind": "stage", "domain": d, "parent": f"seq-{d}-sft", "status": "trained"}]
        prev = f"seq-{d}"
    out += [{"name": "oracle-math-sft", "kind": "oracle", "domain": "math", "parent": "base", "status": "reused"},
            {"name": "oracle-math", "kind": "oracle", "domain": "math", "parent": "oracle-math-sft", "status": "reused",
             "same_as": "seq-math"},
            {"name": "oracle-search-sft", "kind": "oracle", "domain": "search", "parent": "base", "status": "trained"},
            {"name": "oracle-search", "kind": "oracle", "domain": "search", "parent": "oracle-search-sft",
             "status": "trained"}]
    for r in out:
        r.update(steps=3, time_s=1.0)
    return out


def _findings(results: dict) -> dict:
    s = build_summary(_two_stage_rows(), results, ["seq-math", "seq-search"], {}, 1.0, "quick", 50)
    return {f["finding"]: f for f in s["findings"]}


def test_findings_name_every_finding_even_with_nothing_measured():
    found = _findings({})
    assert list(found) == ["forgetting", "rl_drift_concentrated", "sft_moves_more", "oracle_alignment",
                           "consolidation", "repair"]
    assert all(f["shown"] is None and "not measured" in f["line"] for f in found.values())


def test_forgetting_is_shown_only_for_a_significant_partial_drop():
    cells = [{"checkpoint": c, "suite": "math/id", "status": "ok", "mean": m}
             for c, m in (("seq-math", 0.44), ("seq-search", 0.22))]
    effect = {"stage": "seq-search", "before": "seq-math", "suite": "math/id", "lost": 13, "gained": 2, "n": 50,
              "p_drop": 0.0037}
    f = _findings({"eval_chain": _eval(cells), "stage_effects": [effect]})["forgetting"]
    assert f["shown"] is True and "0.44 -> 0.22" in f["line"] and "13 items lost, 2 gained of 50" in f["line"]
    weak = _findings({"eval_chain": _eval(cells), "stage_effects": [{**effect, "p_drop": 0.2}]})["forgetting"]
    assert weak["shown"] is False and weak["line"].startswith("no later stage lowers")
    cells[1]["mean"] = 0.0  # erased: significant, but nothing is left
    erased = _findings({"eval_chain": _eval(cells), "stage_effects": [effect]})["forgetting"]
    assert erased["shown"] is False and "(it erases it)" in erased["line"]


def test_rl_signature_finding_needs_every_rl_phase_above_three_times_chance():
    ups = [_sig("seq-math-sft", "sft", (0.06, 0.05, 0.07)), _sig("seq-math", "rl", (0.23, 0.13, 0.43)),
           _sig("seq-search", "rl", (0.93, 0.68, 0.97))]
    f = _findings({"signatures": _signed(ups)})["rl_drift_concentrated"]
    assert f["shown"] is False and f["line"].startswith("seq-math not above 3x chance")
    assert "SFT seq-math-sft 0.06 [0.05, 0.07]" in f["line"]  # the SFT phases beside them
    ups[1] = _sig("seq-math", "rl", (0.40, 0.19, 0.6))  # 0.19 > 3 x 0.06
    assert _findings({"signatures": _signed(ups)})["rl_drift_concentrated"]["shown"] is True


def test_oracle_pairs_skip_the_reused_oracle_and_cosines_compare_own_with_others():
    from aclarena.analysis.demo import stage_oracle_pairs

    pairs = stage_oracle_pairs(_two_stage_rows(), ["seq-math", "seq-search"])
    assert [p["pair"] for p in pairs] == ["seq-math-base:oracle-search-base", "seq-search-seq-math:oracle-math-base",
                                          "seq-search-seq-math:oracle-search-base"]
    # the vectors step's cosines by the checkpoints of the two differences (VectorsResult.asked_cosines)
    vec = {((p["stage"], p["parent"]), (p["oracle"], p["base"])): c
           for p, c in zip(pairs, (0.01, -0.06, 0.27), strict=True)}
    s = build_summary(_two_stage_rows(), {"vectors": SimpleNamespace(asked_cosines=lambda: vec),
                                          "vector_pairs": pairs}, ["seq-math", "seq-search"], {}, 1.0, "quick", 50)
    assert s["oracle_cosines"] == [{"stage": "seq-search", "update": "seq-search - seq-math", "domain": "search",
                                    "oracle": "oracle-search", "own": 0.27, "others": {"oracle-math": -0.06}}]
    f = s["findings"][3]
    assert f["shown"] is True and "cos 0.27 with oracle-search, -0.06 with oracle-math" in f["line"]
    vec[(("seq-search", "seq-math"), ("oracle-search", "base"))] = -0.1  # farther from its own oracle than from another's: not shown, and said
    s = build_summary(_two_stage_rows(), {"vectors": SimpleNamespace(asked_cosines=lambda: vec),
                                          "vector_pairs": pairs}, ["seq-math", "seq-search"], {}, 1.0, "quick", 50)
    assert s["findings"][3]["shown"] is False


def test_demo_folder_of_other_settings_is_refused_and_left_alone(tmp_path):
    from aclarena.analysis.demo import SETTINGS_FILE, check_folder, run_demo
    from aclarena.errors import AclarenaError

    out = tmp_path / "demo"
    out.mkdir()
    (out / SETTINGS_FILE).write_text(json.dumps({"preset": "quick", "seed": 0, "trl": []}))
    check_folder(out, "quick", 0, [])  # the same settings: resumed
    before = sorted(p.name for p in out.iterdir())
    for preset, seed in (("mini", None), ("quick", 1)):
        with pytest.raises(AclarenaError, match=r"holds the demo of other settings \(--preset quick --seed 0\)"):
            run_demo(out, preset=preset, seed=seed)
    assert sorted(p.name for p in out.iterdir()) == before
    (out / SETTINGS_FILE).unlink()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(AclarenaError, match="not empty and holds no demo run"):
        run_demo(out)
    assert (out / "notes.txt").read_text() == "mine" and not (out / SETTINGS_FILE).exists()
    (out / "notes.txt").unlink()
    (out / "curriculum.toml").write_text('[run]\nname = "mini"\n')  # a demo folder from before the settings file
    with pytest.raises(AclarenaError, match="holds a run of curriculum 'mini', not the 'quick' demo"):
        run_demo(out)


def test_unknown_preset_is_one_line_with_did_you_mean(cli):
    code, _, err = cli("demo", "--preset", "quik", "--out", "/nonexistent/x")
    assert code == 1 and "did you mean 'quick'" in err and len(err.strip().splitlines()) == 1


def test_the_demo_signs_the_chain_only_so_a_rerun_after_the_merges_reads_it_back():
    from aclarena.analysis.demo import chain_updates

    rows = _two_stage_rows() + [{"name": "merge-uniform", "kind": "consolidated", "domain": None, "parent": "base"}]
    assert chain_updates(rows, ["seq-math", "seq-search"]) == [
        "seq-math-sft", "seq-math", "seq-search-sft", "seq-search", "base..seq-math", "seq-math..seq-search"]
