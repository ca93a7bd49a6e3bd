"""The demo's summary from plain rows and verb results (no model): stage ends, parents, ecom effect, JSON."""

from __future__ import annotations

import json
import math

from aclarena.analysis.demo import _is_stage_end, _plain, _store, build_summary

DOMAINS = ("math", "search", "ecom", "if")


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
    results = {"eval_chain": {"cells": cells},
               "paired": {"search/id": {"lost": 3, "gained": 1, "n": 20, "p_drop": 0.3125},
                          "general": {"error": "'seq-search' has no capability cell on suite 'general'"}},
               "displacement": {"sft_rl": [{"stage": "math", "ratio": 4.0, "sft": 2.0, "rl": 0.5}]}}
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
    assert s["sft_rl"][0]["ratio"] == 4.0
    assert math.isnan(by["seq-ecom"]["score"])
    plain = _plain(s)
    assert plain["stages"][2]["score"] is None  # NaN is no JSON value
    _store(tmp_path, s)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(plain))


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
    """Issue 31: the signatures step's JSON becomes the summary's `signatures` block, and is printed."""
    from aclarena.cli.demo import print_summary

    ci = {m: 0.5 for m in ("kl_share_high", "barely_moved_low", "kl_share_first_k", "concentration_area")}
    row = {"update": "seq-math", "kind": "rl", "domain": "math", "n_sequences": 32, "high_share": 0.06,
           "first_k_share": 0.4, **ci, **{f"{m}_low": 0.4 for m in ci}, **{f"{m}_high": 0.7 for m in ci}}
    data = {"settings": {"first_k": 12}, "updates": [row]}
    s = build_summary(rows(), {"signatures": data}, ["seq-math"], {}, 1.0, "mini", 10)
    (got,) = s["signatures"]["updates"]
    assert got["kl_share_high"] == [0.5, 0.4, 0.7] and got["kind"] == "rl" and got["first_k_share"] == 0.4
    assert build_summary(rows(), {"signatures": {"error": "x"}}, ["seq-math"], {}, 1.0, "mini", 10)["signatures"] is None
    print_summary(_plain(s), "runs/demo")
    assert "0.50 [0.40, 0.70]" in capsys.readouterr().out
