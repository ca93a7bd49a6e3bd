"""Issue 46: the dashboard's notes are computed from the run, the study's figures beside them, labelled;
empty and not-applicable states say why; Tokens opens on the main reference probe set with a fitted scale."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from aclarena.diagnostics import run_notes as rn
from aclarena.figures.token_explore import KL_LOW, colour_fraction, colour_ticks, fitted_scale

DASHBOARD = Path(__file__).resolve().parents[2] / "aclarena" / "dashboard"


def test_no_page_prints_a_fixed_study_claim():
    """The claims the run may contradict are gone from the pages' source (they are computed now)."""
    text = "\n".join(p.read_text() for p in DASHBOARD.rglob("*.py"))
    for claim in ("3–7× more than RL", "cosine 0.77", "MMOPD is the most balanced", "Study: SFT moves",
                  "(the study: forgetting"):
        assert claim not in text, claim


DISPLACEMENT = {
    "phases": ["sft", "rl", "sft", "rl", None],
    "ratios": [{"stage": "math", "ratio": 14.358}, {"stage": "search", "ratio": 8.906},
               {"stage": "ecom", "ratio": None}],
    "overall_ratio": 12.128,
}


def test_displacement_note_puts_the_runs_ratios_first_and_labels_the_study():
    note = rn.displacement_note(DISPLACEMENT)
    assert note.startswith("This run: SFT moves the weights 14.4x (math), 8.9x (search) as far as RL; "
                           "mean SFT / mean RL 12.1x.")
    assert note.endswith("Study (Qwen3-8B): SFT moves the weights 3-7x as far as RL.")
    assert rn.sft_rl_ratios(DISPLACEMENT) == [("math", 14.358), ("search", 8.906)]


def test_displacement_note_without_a_pair_says_why():
    note = rn.displacement_note({"phases": ["sft", None], "ratios": [], "overall_ratio": None})
    assert note.startswith("This run has no SFT and RL update of one stage to compare (its updates: SFT)")
    assert "aclarena-diag displacement" in note and "Study (Qwen3-8B)" in note
    both = rn.displacement_note({"phases": ["sft", "rl"], "ratios": [{"stage": "m", "ratio": None}]})
    assert "no stage has both an SFT and a non-zero RL update" in both


def _vectors() -> tuple[dict, dict]:
    # vectors: 0 seq-math-sft - base, 1 seq-math - seq-math-sft, 2 oracle-math-sft - base,
    # 3 oracle-math - oracle-math-sft, 4 oracle-math - base, 5 oracle-search-sft - base
    plus = ["seq-math-sft", "seq-math", "oracle-math-sft", "oracle-math", "oracle-math", "oracle-search-sft"]
    minus = ["base", "seq-math-sft", "base", "oracle-math-sft", "base", "base"]
    kinds = ["update", "update", "update", "update", "cumulative", "update"]
    cos = np.eye(6)
    cos[0, 2] = cos[2, 0] = 0.61
    cos[1, 3] = cos[3, 1] = 0.42
    cos[2, 5] = cos[5, 2] = 0.03
    s = {"plus": plus, "minus": minus, "kinds": kinds, "cos": cos, "base": "base",
         "oracles": ["oracle-math-sft", "oracle-math", "oracle-search-sft"]}
    ck = {"seq-math-sft": ("math", "sft", "stage"), "seq-math": ("math", "rl", "stage"),
          "oracle-math-sft": ("math", "sft", "oracle"), "oracle-math": ("math", "rl", "oracle"),
          "oracle-search-sft": ("search", "sft", "oracle"), "base": (None, None, "base")}
    return s, ck


def test_vectors_note_is_the_runs_cosines():
    s, ck = _vectors()
    assert rn.stage_oracle_cosines(s, ck) == [("seq-math-sft − base", "oracle-math-sft", 0.61),
                                              ("seq-math − seq-math-sft", "oracle-math", 0.42)]
    assert rn.unrelated_sft_cosines(s, ck) == [("oracle-math-sft", "oracle-search-sft", 0.03)]
    note = rn.vectors_note(s, ck, "seq-math")
    assert note.startswith("This run: cosine of stage update vs its oracle 0.61 (seq-math-sft − base vs "
                           "oracle-math-sft), 0.42 (seq-math − seq-math-sft vs oracle-math); unrelated SFT tasks 0.03")
    assert "0.77" not in note  # the run has no oracle-mix pair: the study's 0.77 is not quoted
    assert note.endswith("unrelated SFT tasks, cosine 0.05.") and "Study (Qwen3-8B)" in note
    # the first stage's oracle is that stage, trained once (one folder): its cosine of 1 is no finding
    assert rn.stage_oracle_cosines(s, ck, {"oracle-math": "seq-math"}) == [
        ("seq-math-sft − base", "oracle-math-sft", 0.61)]
    alone = {**s, "oracles": []}
    assert rn.vectors_note(alone, ck).startswith("This run has no stage update with an oracle of its domain to "
                                                 "compare: an `[oracles] domains = [...]` table in the curriculum")


def _cell(mean: float, std: float = math.nan) -> SimpleNamespace:
    return SimpleNamespace(mean=mean, std=std)


def _row(label: str, role: str, method: str | None, domain: str | None = None, **cells: float) -> SimpleNamespace:
    return SimpleNamespace(label=label, role=role, method=method, domain=domain,
                           cells={k.replace("_", "/"): _cell(v) for k, v in cells.items()})


ORACLES = [_row("oracle-math", "oracle", None, "math", math_id=0.32),
           _row("oracle-search", "oracle", None, "search", search_id=0.40),
           _row("sequential end point (seq-search)", "end", None, math_id=0.10, search_id=0.24, general=0.0)]


def test_consolidation_note_names_the_runs_most_balanced_model_and_only_its_methods():
    rows = [*ORACLES, _row("merge-uniform", "method", "merge-uniform", math_id=0.30, search_id=0.04, general=0.08),
            _row("merge-ties", "method", "merge-ties", math_id=0.38, search_id=0.0, general=0.2)]
    note = rn.consolidation_note(rows, ["math/id", "search/id"])
    assert "the most balanced shared-weight model (highest worst in-domain share of its oracle) is merge-uniform: " \
           "math 0.30 (94% of the oracle), search 0.04 (10% of the oracle)" in note
    assert "merge-ties 0%" in note and "merge-uniform general 0.08 vs the sequential end's 0.00" in note
    assert note.endswith("Study (Qwen3-8B): uniform merging keeps general knowledge.")
    assert "MMOPD" not in note and "SDFT" not in note and "MLE" not in note


def test_consolidation_note_quotes_the_study_for_the_methods_present():
    rows = [*ORACLES, _row("mmopd", "method", "mmopd", math_id=0.16, search_id=0.30),
            _row("sdft", "method", "sdft", math_id=0.31, search_id=0.05),
            _row("mle (rule)", "mle", "mle", math_id=0.3, search_id=0.4)]
    note = rn.consolidation_note(rows, ["math/id", "search/id"])
    assert "is mmopd: math 0.16 (50% of the oracle), search 0.30 (75% of the oracle)" in note
    assert "Study (Qwen3-8B): MMOPD is the most balanced shared-weight model; SDFT recovers search but loses IF; " \
           "MLE stays near each oracle in-domain." in note
    assert "uniform merging" not in note
    assert rn.consolidation_note(ORACLES, ["math/id"]) == "This run: no consolidated model to compare."


def test_tokens_note():
    row = {"checkpoint": "seq-search", "kl_share_high": 0.06, "barely_moved_low": 0.8436, "n_high": 38,
           "n_valid": 639}
    assert rn.tokens_note("seq-math", row) == (
        "This run (seq-math, seq-search): the 6% highest-entropy positions carry 6% of the KL; 84% of "
        "low-entropy positions barely move. Study (Qwen3-8B): forgetting concentrates at the ~6% high-entropy "
        "positions; ~94% of low-entropy positions barely move.")
    assert rn.tokens_note("p", None).startswith("No token summary for p: run `aclarena-diag tokens")


def test_avg_k_and_floor_states():
    nan = math.nan
    assert rn.avg_k_state([0.1, 0.2], [0.3, 0.1]) == (2, 2, None)
    n, total, why = rn.avg_k_state([0.1, 0.2, nan], [nan, nan, nan])
    assert (n, total) == (0, 2) and "no cell of this run has sampled scores" in why and "--samples" in why
    assert rn.avg_k_state([0.1, 0.2], [0.3, nan])[2].startswith("avg@k: only 1 of 2 cells were sampled")
    assert rn.floor_note([0.0, 0.0, nan]).startswith("Every model scores 0.00 on every suite (greedy): all are at "
                                                      "the floor")
    assert "aclarena-diag train" in rn.floor_note([0.0])
    assert rn.floor_note([0.0, 0.01]) is None and rn.floor_note([nan]) is None


def test_repair_part_reasons():
    assert rn.repair_part_reason("healing", 1.0, ("math/id",), 0) is None
    assert rn.repair_part_reason("preservation", math.nan, (), 0) == \
        "preservation: - because the stage improved no held-out suite"
    assert rn.repair_part_reason("non_damage", math.nan, ("general",), 1000).startswith(
        "non-damage: - on general: its denominator is not positive there")


def test_main_probe_prefers_a_checkpoints_name_over_signatures_sets():
    ckpts = ["base", "seq-math-sft", "seq-math", "seq-search"]
    probes = ["base.math", "base.search", "seq-math", "seq-math-sft.math", "seq-search.math"]
    assert rn.main_probe(probes, ckpts) == "seq-math"
    assert rn.main_probe(["seq-search", "seq-math"], ckpts) == "seq-math"  # manifest order
    assert rn.main_probe(["base.math", "custom"], ckpts) == "custom"
    assert rn.main_probe(["base.math"], ckpts) == "base.math" and rn.main_probe([], ckpts) is None
    assert rn.signatures_probe("seq-math-sft.math", ckpts) == ("seq-math-sft", "math")
    assert rn.signatures_probe("seq-math", ckpts) is None
    assert "made by `aclarena-diag signatures`" in rn.probe_help("base.math", "base", ckpts)
    assert rn.probe_help("seq-math", "seq-math", ckpts).startswith("seq-math: seq-math's frozen generations")


def test_fitted_scale_spans_the_values_shown():
    values = np.linspace(0.017, 0.020, 200)
    lo, hi = fitted_scale(values, "drift", (KL_LOW, 4.9))
    assert lo == pytest.approx(np.percentile(values, 1)) and hi == pytest.approx(np.percentile(values, 99))
    # the global scale compresses them into a sliver of the bar; the fitted one uses all of it
    glob = [colour_fraction(v, (KL_LOW, 4.9), "drift") for v in (0.017, 0.020)]
    fit = [colour_fraction(v, (lo, hi), "drift") for v in (0.017, 0.020)]
    assert glob[1] - glob[0] < 0.02 and fit == [0.0, 1.0]
    assert [t for _, t in colour_ticks((lo, hi), "drift")][1] == f"{math.sqrt(lo * hi):.3g}"  # a middle tick
    # within the global scale: below KL_LOW still reads as unchanged
    assert fitted_scale([1e-7, 1e-6, 0.5], "drift", (KL_LOW, 4.9))[0] == KL_LOW
    assert fitted_scale([0.3], "drift", (KL_LOW, 4.9)) == (KL_LOW, 4.9)  # nothing to fit
    e = fitted_scale(np.linspace(1.0, 2.0, 101), "entropy", (0.0, 5.0))
    assert e == pytest.approx((1.01, 1.99)) and colour_fraction(1.5, e, "entropy") == pytest.approx(0.5)
    assert colour_ticks(e, "entropy")[0][1] == "1"


def test_oracle_shares_find_each_oracle_by_its_domain_not_its_name():
    # a run whose oracles are named by the user (`init`), not oracle-<domain>: the manifest's domain decides
    rows = [_row("my-math-expert", "oracle", None, "math", math_id=0.40),
            _row("search-only", "oracle", None, "search", search_id=0.50),
            _row("merge-ties", "method", "merge-ties", math_id=0.20, search_id=0.25)]
    assert rn.oracle_shares(rows, ["math/id", "search/id"]) == {"merge-ties": {"math/id": 0.5, "search/id": 0.5}}
