"""Lead time from the stored series (real series.h5, the monitor's writer): a forced drop, Holm's correction, the lead.

Two phases laid end to end (6 + 4 steps), 16 fixed math items evaluated every 2 steps. A noise dip
at step 4 (5 items lost, p = 1/32) is "significant" uncorrected; the forced drop starts at step 8
(10 items lost). The forward KL to the stage start crosses its 0.05 threshold at step 5, so the
measured lead is 8 - 5 = 3 steps. RL's Razor's own predictor, the forward KL on the trained
stage's prompts (probe ``razor-ecom``), crosses at step 3: a lead of 5.
"""

from __future__ import annotations

import numpy as np
import pytest

from aclarena.diagnostics.monitor_metrics import METRICS, default_rules
from aclarena.errors import AclarenaError
from aclarena.results.monitor_series import BENCH_COLUMNS, TRAIN_COLUMNS, MonitorStore, probe_columns
from aclarena.train.lead_time import check_items, lead_time_table, planned_tests

N = 16
LABELS = ("lead-time/seq-ecom-sft", "lead-time/seq-ecom")
PHASE_STEPS = (6, 4)


def outcomes(step: int) -> np.ndarray:
    ok = np.zeros(N, dtype=bool)
    ok[:14] = True  # 14 of 16 solved at the stage start
    lost = {2: 1, 4: 5, 6: 1, 8: 10, 10: 12}.get(step, 0)
    ok[:lost] = False
    return ok


def fkl(step: int) -> float:
    return 0.0 if step < 5 else 0.02 * step  # 0.10 at step 5: above the 0.05 threshold


def razor_fkl(step: int) -> float:
    return 0.0 if step < 3 else 0.03 * step  # the new task's prompts move first: 0.09 at step 3


def write_series(run) -> None:
    store = MonitorStore(run)
    for label in LABELS:
        store.declare(f"monitor/{label}/bench", BENCH_COLUMNS)
        store.declare(f"monitor/{label}/probes/monitor-math", probe_columns(METRICS))
        store.declare(f"monitor/{label}/probes/razor-ecom", probe_columns(METRICS))
        store.declare(f"monitor/{label}/train", TRAIN_COLUMNS)
    assert store.acquire()
    offset = 0
    for label, steps in zip(LABELS, PHASE_STEPS, strict=True):
        for local in range(steps + 1):
            g = offset + local
            row = {"session": 0, "step": local, "time": float(g)} | {m: 0.1 for m in METRICS}
            row["fkl"] = fkl(g)
            store.append(f"monitor/{label}/probes/monitor-math", row)
            store.append(f"monitor/{label}/probes/razor-ecom", row | {"fkl": razor_fkl(g)})
            store.append(f"monitor/{label}/train", {"session": 0, "step": local, "time": float(g), "loss": 1.0})
            if local % 2 == 0 or local == steps:
                ok = outcomes(g)
                store.append(f"monitor/{label}/bench", {
                    "session": 0, "step": local, "time": float(g), "suite": b"math/id", "n": N,
                    "correct": int(ok.sum()), "accuracy": float(ok.mean()),
                    "outcomes": "".join("1" if x else "0" for x in ok).encode()})
        offset += steps
    store.release()


def test_forced_drop_gives_a_corrected_drop_step_and_a_lead_time(tmp_path):
    write_series(tmp_path)
    res = lead_time_table(tmp_path, LABELS, offsets=[0, 6], suites={"math/id": "math"}, rules=default_rules(),
                          razor_probe="razor-ecom")
    pts = {p["step"]: p for p in res["ground_truth"]["math"]}
    assert sorted(pts) == [0, 2, 4, 6, 8, 10]
    # uncorrected the dip at step 4 would be the drop (p = 1/32 < 0.05); over 5 evaluations Holm needs more
    assert pts[4]["pvalue"] == pytest.approx(1 / 32) and not pts[4]["significant"]
    assert pts[8]["significant"] and pts[8]["adjusted"] == pytest.approx(4 / 1024)
    rows = {r["metric"]: r for r in res["table"]}
    assert {r["drop_step"] for r in res["table"]} == {8}
    assert rows["fkl"]["warn_step"] == 5 and rows["fkl"]["lead"] == 3
    assert rows["kl_high"]["warn_step"] is None and rows["kl_high"]["lead"] is None  # flat: never warned
    razor = rows["razor_fkl"]
    assert razor["predictor"] == "forward KL on the new task's prompts (RL's Razor)"
    assert razor["warn_step"] == 3 and razor["lead"] == 5 and razor["rule"] == rows["fkl"]["rule"]
    assert res["series"]["razor"]["fkl"][3] == pytest.approx(0.09)
    # without the stage's own probe there is no Razor row (the earlier-task fkl is the adaptation)
    plain = lead_time_table(tmp_path, LABELS, offsets=[0, 6], suites={"math/id": "math"}, rules=default_rules())
    assert "razor_fkl" not in {r["metric"] for r in plain["table"]}
    assert res["drop_test"]["domains"]["math"] == {"tests": 5, "solved_at_start": 14, "reachable": True}


def test_planned_tests_and_unreachable_item_counts():
    # phases of 3 and 2 steps, evaluated every 2: steps 0, 2, 3 | 3, 5 -> 3 tests after the start
    assert planned_tests([3, 2], 2) == 3
    assert planned_tests([6, 4], 2) == 5
    assert planned_tests([40, 3], 10) == 5  # 0, 10, 20, 30, 40 | 40, 43
    assert planned_tests([3, None], 2) is None
    check_items(6, 0.05, 3)
    with pytest.raises(AclarenaError, match=r"-n 4 items can never show a significant drop.*use -n 6 or more") as e:
        check_items(4, 0.05, 3)
    assert "\n" not in str(e.value)
    with pytest.raises(AclarenaError, match="use -n 5 or more"):
        check_items(4, 0.05, None)  # unknown length: at least one test's worth


def test_a_replicate_reads_its_own_probe_sets(tmp_path):
    from aclarena.train.lead_time import LeadTimeSettings

    write_series(tmp_path)  # probe sets of replicate 0 only: `monitor-math`
    own = lead_time_table(tmp_path, LABELS, offsets=[0, 6], suites={"math/id": "math"}, rules=default_rules())
    other = lead_time_table(tmp_path, LABELS, offsets=[0, 6], suites={"math/id": "math"}, rules=default_rules(),
                            probe_suffix="-s1")
    assert {r["metric"]: r for r in own["table"]}["fkl"]["warn_step"] == 5
    # replicate 1 reads `monitor-math-s1`, which this store lacks: no warning, never replicate 0's series
    assert {r["metric"]: r for r in other["table"]}["fkl"]["warn_step"] is None
    assert other["series"]["math"]["step"] == []
    with pytest.raises(AclarenaError, match="replicate must be an integer >= 0, got -1"):
        LeadTimeSettings(replicate=-1)


def test_dense_schedule_plans_the_holm_family_and_the_callback_steps():
    from aclarena.train.lead_time import phase_eval_steps

    # 60 SFT steps on the dense schedule (19 evaluations), then 10 RL steps (0..10: its 0 is the SFT's 60)
    assert phase_eval_steps(60, 5, dense=10) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 19, 24, 30, 38, 48, 60]
    assert phase_eval_steps(12, 5) == [0, 5, 10, 12]
    assert planned_tests([60], 5, dense=10) == 18
    assert planned_tests([60, 10], 5, dense=10) == 18 + 10
    assert planned_tests([60, 10], 5) == planned_tests([60, 10], 5, dense=None) == 14


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"every_n_steps": 0}, "--every must be an integer >= 1, got 0"),
    ({"dense": 0}, "--dense must be an integer >= 1"),
    ({"phases": ("sft", "dpo")}, "--phases sft,dpo: name phase kinds among sft, rl"),
    ({"phases": ()}, "--phases : name phase kinds"),
    ({"eval_every": 0}, "eval_every must be an integer >= 1, got 0"),
])
def test_lead_time_settings_refuse_bad_input_in_one_line(kwargs, match):
    from aclarena.train.lead_time import LeadTimeSettings

    with pytest.raises(AclarenaError, match=match) as e:
        LeadTimeSettings(**kwargs)
    assert "\n" not in str(e.value)


def test_settings_identity_keeps_stored_results_and_tells_variants_apart():
    from aclarena.train.lead_time import LeadTimeSettings

    plain = LeadTimeSettings(stage="search").identity()
    assert plain == {"stage": "search", "eval_every": 5, "every_n_steps": None, "n": 50, "alpha": 0.05, "seed": 0}
    dense = LeadTimeSettings(stage="search", dense=10, phases=("sft",), strict=True).identity()
    assert dense["dense"] == 10 and dense["phases"] == ["sft"] and dense["strict"] is True


def test_a_stage_start_that_solves_too_few_items_is_refused_before_training():
    from aclarena.train.lead_time import check_reachable

    check_reachable({"math/id": 12}, alpha=0.05, tests=18, n=50)  # 1/4096 < 0.05 / 18: a drop can be significant
    with pytest.raises(AclarenaError, match=r"math/id: the stage start solves 8 of 50 ground-truth items, so even "
                                            r"losing all of them gives p = 0.00391, not below alpha / 18 evaluations"
                                            r" = 0.00278: no drop could be significant; use more items \(-n, so that "
                                            r"at least 9 are solved\) or fewer evaluations") as e:
        check_reachable({"math/id": 8}, alpha=0.05, tests=18, n=50)
    assert "\n" not in str(e.value)
