"""The Overview's Findings panel in headless Chromium: findings.json's rows with the seeds' spread,
the held-out validation, part times; an unreadable file gives one line, not a broken page."""

import json

import pytest
from browser_helpers import wait_for_dash
from capability_helpers import write_fixture_matrix

pytestmark = pytest.mark.browser

FINDINGS = {
    "seeds": [0, 1, 2],
    "rows": [
        {"finding": "the ecom stage's effect on earlier skills", "quantity": "math/id after the ecom stage (seq-ecom)",
         "study": "AIME 23.3 -> 6.0", "values": [0.1, 0.2, 0.3], "mean": 0.2, "spread": 0.1, "digits": 2},
        {"finding": "task-vector cosines", "quantity": "cos(sdft - base, sdft-from-end - seq end)",
         "study": "0.77", "values": [0.5, None, 0.7], "mean": 0.6, "spread": 0.1414, "digits": 2},
    ],
    "part_times": {"train": 12.5, "eval": 3.25},
    "errors": {"vectors": "no oracle SFT phases"},
    "consolidations": ["merge-uniform"],
    "validation": {"status": "ok", "fit_seeds": [0], "held_out_seeds": [1, 2], "notes": ["seed 0 note"],
                   "predictors": [{"predictor": "kl_high", "threshold": 0.0125, "leads": [4], "lead_mean": 4.0,
                                   "detected": 1, "false_alarms": 2, "misses": 3, "r2": 0.41}]},
    "made_by": {"command": "aclarena-diag study --run runs/study --seeds 3", "date": "2026-12-01"},
}


def test_findings_panel_on_overview(fixture_run, serve, page, console_errors):
    write_fixture_matrix(fixture_run)
    (fixture_run / "findings.json").write_text(json.dumps(FINDINGS))
    url = serve(fixture_run)
    page.goto(url + "/overview")
    wait_for_dash(page)
    page.wait_for_selector("#findings-table")
    rows = page.locator("#findings-table tbody tr")
    # header, filter row, two findings
    assert rows.count() == 4
    first = rows.nth(2).inner_text()
    assert "math/id after the ecom stage (seq-ecom)" in first and "AIME 23.3 -> 6.0" in first
    assert "0.20 ± 0.10" in first and "0.10, 0.20, 0.30" in first and "3/3" in first
    second = rows.nth(3).inner_text()
    assert "0.60 ± 0.14" in second and "0.50, -, 0.70" in second and "2/3" in second
    assert "over 3 seeds (0, 1, 2)" in page.inner_text("#findings-caption")
    assert page.inner_text("#findings-validation") == "Early warning held out: fit on seed 0, reported on seeds 1, 2"
    vrow = page.locator("#findings-validation-table tbody tr").nth(1).inner_text()
    for cell in ("token drift at high-entropy positions", "0.0125", "4.0", "0.41"):
        assert cell in vrow
    assert "train 12.5 s, eval 3.2 s" in page.inner_text("#findings-times")
    assert "the vectors step did not finish: no oracle SFT phases" in page.inner_text("#findings-errors")
    assert console_errors == []


def test_findings_panel_reason_and_bad_file(fixture_run, serve, page, console_errors):
    data = dict(FINDINGS, validation={"status": "not run", "reason": "needs at least 2 seeds"})
    (fixture_run / "findings.json").write_text(json.dumps(data))
    url = serve(fixture_run)
    page.goto(url + "/overview")  # no capability matrix: the panel still shows
    wait_for_dash(page)
    page.wait_for_selector("#overview-empty")
    assert page.inner_text("#findings-validation") == (
        "Held-out validation of the early warning: not run: needs at least 2 seeds")
    (fixture_run / "findings.json").write_text('{"seeds": [0], "rows": [], "x": NaN}')
    page.goto(url + "/overview")
    wait_for_dash(page)
    page.wait_for_selector("#findings-error")
    assert "NaN is not strict JSON" in page.inner_text("#findings-error")
    assert page.locator("#findings-table").count() == 0
    assert console_errors == []
