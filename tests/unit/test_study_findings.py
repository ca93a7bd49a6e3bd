"""The study's findings rows from per-seed measurements (pure), and their strict-JSON file."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from aclarena.analysis._common import Made
from aclarena.analysis.signatures import Signed
from aclarena.analysis.study import StudyResult, write_findings
from aclarena.analysis.study_findings import Trained, findings, mean_spread
from aclarena.diagnostics.signatures import DriftSignature
from aclarena.train.naming import oracle_name, seq_name


def trained(stages, replicates: int, rl_only: tuple[str, ...] = ()) -> Trained:
    """The phases a ``--seeds`` study trains (SFT then RL per stage, but ``rl_only``), as the manifest records them."""
    jobs = [SimpleNamespace(name="base", kind="base", domain=None, phase=None, parent=None, replicate=0)]
    for r in range(replicates):
        for kind, name in (("stage", seq_name), ("oracle", oracle_name)):
            prev = "base"
            for d in stages:
                start = prev if kind == "stage" else "base"
                if d not in rl_only:
                    jobs.append(SimpleNamespace(name=name(d, r, "sft"), kind=kind, domain=d, phase="sft", parent=start,
                                                replicate=r))
                    start = name(d, r, "sft")
                jobs.append(SimpleNamespace(name=name(d, r), kind=kind, domain=d, phase="rl", parent=start, replicate=r))
                prev = name(d, r)
    return Trained.of(jobs)


def test_trained_checkpoints_are_found_by_kind_domain_phase_and_replicate():
    t = trained(["math", "search"], 2, rl_only=("search",))
    assert t.end("stage", "math") == "seq-math" and t.sft_end("stage", "math", 1) == "seq-math-sft-s1"
    assert t.end("oracle", "search", 1) == "oracle-search-s1"
    assert t.sft_end("stage", "search") is None  # no SFT phase before its RL
    assert t.end("stage", "math", 2) is None and t.end("stage", "ecom") is None  # not trained


def test_mean_spread_is_the_sample_std_over_finite_values():
    m, s = mean_spread([0.2, None, 0.4, float("nan")])
    assert m == pytest.approx(0.3) and s == pytest.approx(math.sqrt(0.02))
    assert mean_spread([0.5]) == (0.5, None)
    assert mean_spread([None]) == (None, None)


def test_findings_rows_pair_each_seed_with_its_own_checkpoints():
    stages = ["math", "search", "ecom", "if"]
    cells = {("seq-search", "math/id"): 0.5, ("seq-ecom", "math/id"): 0.1,
             ("seq-search-s1", "math/id"): 0.7, ("seq-ecom-s1", "math/id"): 0.3,
             ("seq-search", "search/id"): 0.4, ("seq-ecom", "search/id"): 0.2,
             ("seq-math", "math/id"): 0.6, ("oracle-math", "math/id"): 0.6, ("oracle-math-s1", "math/id"): 0.8}
    norms = {"seq-math-sft": 30.0, "seq-math": 6.0, "seq-math-sft-s1": 20.0, "seq-math-s1": 5.0,
             "seq-search-sft": 4.0, "seq-search": 0.0}  # GRPO without reward: no update
    drift = {0: SimpleNamespace(kl_share_high=0.09, barely_moved_low=0.23),
             1: SimpleNamespace(kl_share_high=0.11, barely_moved_low=float("nan"))}
    rows = findings([0, 1], stages, trained(stages, 2), cells, norms, drift)
    by = {r["quantity"]: r for r in rows}
    before = by["math/id before the ecom stage (seq-search)"]
    after = by["math/id after the ecom stage (seq-ecom)"]
    assert before["values"] == [0.5, 0.7] and before["mean"] == pytest.approx(0.6)
    assert after["values"] == [0.1, 0.3] and after["spread"] == pytest.approx(math.sqrt(0.02))
    assert after["study"] == "AIME 23.3 -> 6.0" and before["study"] is None
    assert by["search/id after the ecom stage (seq-ecom)"]["values"] == [0.2, None]
    ratio = by["math: ||dθ|| SFT / ||dθ|| RL"]
    assert ratio["values"] == [5.0, 4.0] and ratio["mean"] == pytest.approx(4.5)
    assert by["search: ||dθ|| SFT / ||dθ|| RL"]["values"] == [None, None]  # undefined, not infinite
    share = next(r for r in rows if r["quantity"].startswith("share of KL"))
    assert share["values"] == [0.09, 0.11] and share["mean"] == pytest.approx(0.10)
    barely = next(r for r in rows if r["quantity"].startswith("low-entropy"))
    assert barely["values"] == [0.23, None] and barely["spread"] is None
    assert by["math/id of its oracle (oracle-math)"]["values"] == [0.6, 0.8]


def test_findings_json_is_strict(tmp_path):
    rows = findings([0, 1], ["math"], trained(["math"], 2), {("seq-math", "math/id"): float("nan")}, {}, {})
    path = write_findings(StudyResult(out=tmp_path, seeds=[0, 1], rows=rows, part_times={"train": 1.0}),
                          command="aclarena-diag study --seeds 2")
    text = path.read_text()
    assert "NaN" not in text
    data = json.loads(text)
    df = StudyResult(out=tmp_path, seeds=[0, 1], rows=rows, part_times={}).to_pandas()
    assert list(df["quantity"]) == [r["quantity"] for r in rows]
    assert data["made_by"]["command"] == "aclarena-diag study --seeds 2"
    assert data["rows"][0]["values"] == [None, None]


STAGES = ["math", "search", "ecom", "if"]


def test_consolidation_rows_pair_each_seed_with_its_own_end_and_oracle():
    from aclarena.analysis.study_findings import consolidation_rows

    made = [Made("merge-uniform", "merge-uniform", 0), Made("merge-uniform-s1", "merge-uniform", 1),
            Made("mle-math", "mle", 0, "math"), Made("mle-math-s1", "mle", 1, "math")]
    cells = {("merge-uniform", "math/id"): 0.30, ("merge-uniform-s1", "math/id"): 0.50,
             ("seq-if", "math/id"): 0.10, ("seq-if-s1", "math/id"): 0.20,
             ("oracle-math", "math/id"): 0.60, ("oracle-math-s1", "math/id"): 0.40,
             ("mle-math", "math/id"): 0.55, ("mle-math-s1", "math/id"): 0.45,
             ("merge-uniform", "if/id"): 0.9}
    rows = consolidation_rows([0, 1], STAGES, trained(STAGES, 2), cells, made)
    by = {r["quantity"]: r for r in rows}
    assert by["math/id of the sequential end (seq-if)"]["values"] == [0.10, 0.20]
    assert by["math/id of the sequential end (seq-if)"]["study"] == "AIME26 10.21"
    uni = by["math/id of merge-uniform"]
    assert uni["values"] == [0.30, 0.50] and uni["study"] == "AIME26 14.79"
    assert by["math/id of merge-uniform minus the sequential end"]["values"] == pytest.approx([0.20, 0.30])
    gap = by["math/id of merge-uniform minus oracle-math"]
    assert gap["values"] == pytest.approx([-0.30, 0.10]) and gap["mean"] == pytest.approx(-0.10)
    assert gap["spread"] == pytest.approx(math.sqrt(0.08))  # paired per seed, not mean(a) - mean(b)
    assert by["if/id of merge-uniform minus oracle-if"]["values"] == [None, None]  # no oracle score: null
    assert by["math/id of mle (expert mle-math)"]["values"] == [0.55, 0.45]
    assert by["search/id of mle (expert mle-search)"]["values"] == [None, None]
    assert consolidation_rows([0], STAGES, trained(STAGES, 1), cells, []) == []


def test_vector_pairs_and_cosine_rows():
    from aclarena.analysis.steps import pair_arg
    from aclarena.analysis.study import vector_pairs
    from aclarena.analysis.study_findings import cosine_rows

    names = {"base", "seq-if", "seq-if-s1", "sdft", "sdft-from-end", "sdft-s1",  # seed 1 lacks sdft-from-end-s1
             "oracle-math-sft", "oracle-search-sft", "oracle-if-sft", "oracle-math-sft-s1", "oracle-if-sft-s1"}
    made = {0: {"base": "sdft", "end": "sdft-from-end"}, 1: {"base": "sdft-s1", "end": "sdft-from-end-s1"}}
    mix, unrelated = vector_pairs(STAGES, 2, trained(STAGES, 2), names, sdft=made)
    assert mix == {0: (("sdft", "base"), ("sdft-from-end", "seq-if"))}
    assert pair_arg(mix[0]) == "sdft - base:sdft-from-end - seq-if"  # what `vectors --pair` is given
    # the outputs consolidate reported are used, whatever their names (e.g. `--name`)
    named = vector_pairs(STAGES, 1, trained(STAGES, 1), names | {"mix-a", "mix-b"},
                         sdft={0: {"base": "mix-a", "end": "mix-b"}})[0]
    assert named == {0: (("mix-a", "base"), ("mix-b", "seq-if"))}
    assert [pair_arg(p) for p in unrelated[0]] == [
        "oracle-math-sft - base:oracle-search-sft - base", "oracle-math-sft - base:oracle-if-sft - base",
        "oracle-search-sft - base:oracle-if-sft - base"]
    assert unrelated[1] == [(("oracle-math-sft-s1", "base"), ("oracle-if-sft-s1", "base"))]
    rows = cosine_rows([0, 1], {0: 0.8}, {0: [0.1, 0.2, 0.3], 1: [0.5]})
    mix_row, unrel = rows
    assert mix_row["values"] == [0.8, None] and mix_row["study"].startswith("0.77")
    assert unrel["values"] == pytest.approx([0.2, 0.5]) and unrel["study"].startswith("0.05")
    assert "3 pairs" in unrel["quantity"]


def _lead(accs, sig, kl, razor, loss, reachable=True, quiet_kl=None):
    gt = [{"step": s, "accuracy": a, "significant": g} for s, a, g in zip((0, 2, 4), accs, sig, strict=True)]
    out = {"ground_truth": {"math": gt},
           "series": {"math": {"step": [0.0, 3.0], "kl_high": kl, "flip_high": [0, 0], "kl_all": [0, 0], "fkl": [0, 0]},
                      "razor": {"step": [0.0, 3.0], "fkl": razor}, "train": {"step": [1.0, 2.0, 3.0, 4.0], "loss": loss}},
           "drop_test": {"domains": {"math": {"reachable": reachable}}}}
    if quiet_kl is not None:  # a second domain that does not drop
        out["ground_truth"]["search"] = [{"step": s, "accuracy": 0.5, "significant": False} for s in (0, 2, 4)]
        out["series"]["search"] = {"step": [0.0, 3.0], "kl_high": quiet_kl, "flip_high": [0, 0], "kl_all": [0, 0],
                                   "fkl": [0, 0]}
        out["drop_test"]["domains"]["search"] = {"reachable": True}
    return out


def test_warning_series_from_a_lead_time_result():
    from aclarena.analysis.study_validation import warning_series

    (s,), unreachable = warning_series(7, _lead([0.8, 0.5, 0.2], [False, False, True], [0.0, 2.0], [0.1, 0.3],
                                                [1.0, 0.9, 0.8, 0.7]))
    assert unreachable == [] and s.seed == 7 and s.steps == [0, 2, 4]
    assert s.drop == pytest.approx([0.0, 0.3, 0.6]) and s.drop_step == 4
    assert s.predictors["kl_high"] == [0.0, 0.0, 2.0]  # as of each evaluation: step 3's value first seen at 4
    assert s.predictors["razor_fkl"] == [0.1, 0.1, 0.3]
    assert math.isnan(s.predictors["loss"][0]) and s.predictors["loss"][1:] == [0.9, 0.7]
    _, unreachable = warning_series(7, _lead([0.2, 0.2, 0.2], [False] * 3, [0, 0], [0, 0], [1, 1, 1, 1], False))
    assert unreachable == ["math"]


def test_validation_report_fits_on_seed_0_and_says_why_when_it_cannot():
    from aclarena.analysis.study_validation import validation_report

    one = validation_report({}, 0, seeds=[0])
    assert one["status"] == "not run" and "at least 2 seeds" in one["reason"] and one["predictors"] == []
    leads = {0: _lead([0.8, 0.5, 0.2], [False, False, True], [0.0, 2.0], [0.1, 0.3], [1.0, 0.9, 0.8, 0.7],
                      quiet_kl=[0.0, 0.5]),
             1: _lead([0.8, 0.4, 0.1], [False, True, True], [0.0, 2.5], [0.1, 0.1], [1.0, 0.9, 0.8, 0.7],
                      quiet_kl=[0.0, 0.5])}
    rep = validation_report(leads, 0, seeds=[0, 1])
    assert rep["status"] == "ok" and rep["held_out_seeds"] == [1]
    assert rep["series"] == {"fit": 2, "held_out": 2, "held_out_drops": 1}
    kl = next(r for r in rep["predictors"] if r["predictor"] == "kl_high")
    # fit on seed 0: 0 and 0.5 alarm on search, which did not drop; 2.0 (first seen at step 4, the drop step)
    # warns in time. On seed 1 it warns at 4, after the drop at 2: a miss; search stays below: no false alarm
    assert kl["threshold"] == 2.0 and kl["misses"] == 1 and kl["detected"] == 0 and kl["false_alarms"] == 0
    assert kl["points"] == 12 and kl["r2"] is not None
    assert not any("false alarms could not occur" in n for n in rep["notes"])
    # only domains that dropped (the mini arena's search stage: math, the one earlier skill): no false alarm is
    # possible and nothing keeps a fitted threshold from warning at once; the report says so
    alldrop = validation_report({0: _lead([0.8, 0.5, 0.2], [False, False, True], [0.0, 2.0], [0.1, 0.3], [1.0] * 4),
                                 1: _lead([0.8, 0.4, 0.1], [False, True, True], [0.0, 2.5], [0.1, 0.1], [1.0] * 4)},
                                0, seeds=[0, 1])
    assert alldrop["status"] == "ok" and any("false alarms could not occur" in n for n in alldrop["notes"])
    bad = validation_report({0: leads[0], 1: _lead([0.2] * 3, [False] * 3, [0, 0], [0, 0], [1] * 4, False)}, 0,
                            seeds=[0, 1])
    assert bad["status"] == "not run" and "no drop could reach significance on the held-out seeds" in bad["reason"]
    assert bad["excluded"] == [{"seed": 1, "domain": "math", "why": bad["excluded"][0]["why"]}]
    failed = validation_report({}, 0, seeds=[0, 1], errors={0: "-n 2 items can never show a significant drop"})
    assert failed["status"] == "not run" and "-n 2 items" in failed["reason"]
    flat = validation_report({0: _lead([0.2] * 3, [False] * 3, [0, 0], [0, 0], [1] * 4, False)}, 0, seeds=[0, 1])
    assert "no drop could reach significance on the fit seed 0" in flat["reason"]
    lost = validation_report({0: leads[0]}, 0, seeds=[0, 1], errors={1: "checkpoint 'seq-ecom-s1' is not trained"})
    assert lost["reason"] == "the lead time was not measured on seed(s) 1 (checkpoint 'seq-ecom-s1' is not trained)"


def test_cosine_rows_exist_when_nothing_could_be_measured():
    from aclarena.analysis.study_findings import cosine_rows

    rows = cosine_rows([0, 1], {}, {})
    assert [r["values"] for r in rows] == [[None, None], [None, None]]
    assert [r["mean"] for r in rows] == [None, None]


@pytest.mark.parametrize("stage", ["math", "chess"])
def test_lead_stage_must_be_a_later_stage(tmp_path, cli, stage):
    """--lead-stage names the stage the validation watches: the first stage (no earlier skill) or a
    domain the curriculum lacks is one line, exit 1, before anything is trained."""
    from train_helpers import TINY

    out = tmp_path / "study"
    code, _, err = cli("study", "--run", str(out), "--seeds", "2", "--config", str(TINY), "--lead-stage", stage)
    assert code == 1
    assert err.strip().splitlines() == [f"aclarena-diag study: error: --lead-stage {stage}: not a stage after the first of this "
                                        "curriculum; name one of search, ecom, if"]
    assert not out.exists()


def test_validation_retrains_the_named_stage(tmp_path, monkeypatch):
    """`_validation` measures the lead time on --lead-stage when given, else on ecom."""
    from train_helpers import TINY

    from aclarena.analysis import study
    from aclarena.train import lead_time
    from aclarena.train.config import load_config

    seen = []

    def fake(out, settings, show_progress=False):
        seen.append((settings.stage, settings.replicate))
        raise study.AclarenaError("stop here")

    monkeypatch.setattr(lead_time, "measure_lead_time", fake)
    cfg = load_config(TINY)
    rep = study._validation(cfg, tmp_path, 2, ["math", "search", "ecom", "if"], 6, 2, False, "search")
    assert seen == [("search", 0)] and rep["stage"] == "search" and rep["status"] == "not run"
    study._validation(cfg, tmp_path, 2, ["math", "search", "ecom", "if"], 6, 2, False)
    assert seen[-1] == ("ecom", 0)


def test_signature_rows_pair_each_seed_with_its_own_updates_and_intervals():
    from aclarena.analysis.study_findings import signature_rows

    def sig(kind, child, domain, share, low, high):
        signature = DriftSignature(values={"kl_share_high": share, "barely_moved_low": 0.9, "kl_share_first_k": 0.3},
                                   low={"kl_share_high": low, "barely_moved_low": 0.8, "kl_share_first_k": 0.2},
                                   high={"kl_share_high": high, "barely_moved_low": 0.95, "kl_share_first_k": 0.4},
                                   high_share=0.06, first_k_share=0.5, n_sequences=8, n_positions=100, n_valid=100,
                                   n_high=6, n_first_k=50)
        return Signed(child, kind, "parent", child, domain, signature)

    signed = [sig("sft", "seq-math-sft", "math", 0.05, 0.03, 0.08),
              sig("rl", "seq-math", "math", 0.24, 0.16, 0.45),
              sig("rl", "seq-math-s1", "math", 0.30, 0.20, 0.40),
              sig("stage", "seq-math", "search", 0.99, 0.9, 1.0),     # a stage row of another domain: not math's
              sig("consolidation", "merge-uniform-s1", "math", 0.07, 0.05, 0.09)]
    made = [Made("merge-uniform", "merge-uniform", 0), Made("merge-uniform-s1", "merge-uniform", 1),
            Made("mle-math", "mle", 0, "math")]
    rows = signature_rows([0, 1], STAGES, trained(STAGES, 2), signed, made)
    by = {r["quantity"]: r for r in rows}
    rl = by["math RL phase: share of KL at the top 6% entropy positions"]
    assert rl["values"] == [0.24, 0.30] and rl["mean"] == pytest.approx(0.27)
    assert rl["intervals"] == [[0.16, 0.45], [0.20, 0.40]]
    assert rl["study"] == "forgetting concentrates at ~6% high-entropy positions"
    sft = by["math SFT phase: share of KL at the top 6% entropy positions"]
    assert sft["values"] == [0.05, None] and sft["intervals"] == [[0.03, 0.08], None]
    assert by["math SFT phase: share of KL at the first 12 reply tokens"]["study"] is None
    assert "math whole stage: share of KL at the top 6% entropy positions" not in by  # none signed on math
    assert not any(q.startswith("search") for q in by)
    merge = by["merge-uniform on math: share of KL at the top 6% entropy positions"]
    assert merge["values"] == [None, 0.07]
    assert not any("mle" in q for q in by)
    assert signature_rows([0], STAGES, trained(STAGES, 1), [], made) == []
