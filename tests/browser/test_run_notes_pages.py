"""Issue 46 in headless Chromium: every page's notes are the run's own numbers (the study's beside them,
labelled); data the run lacks is explained, its controls disabled or hidden; Tokens opens on the main
reference probe set, explains probe-set names and fits its colour scale to the values shown."""

import contextlib
import io
import re

import pytest
from browser_helpers import wait_for_dash
from consolidation_helpers import consolidated_run, write_cells

from aclarena.cli import main

pytestmark = pytest.mark.browser

FIXED_CLAIMS = ("3–7× more than RL", "cosine 0.77", "MMOPD is the most balanced")


def _cli(*argv):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert code == 0, err.getvalue()


def _no_fixed_claim(page):
    body = page.inner_text("body")
    assert [c for c in FIXED_CLAIMS if c in body] == []


def test_notes_are_the_runs_own_numbers(fixture_run, serve, page, console_errors):
    for verb in ("vectors", "displacement"):
        _cli(verb, "--run", str(fixture_run))
    run = consolidated_run(fixture_run)
    url = serve(run)
    page.goto(url + "/displacement")
    wait_for_dash(page)
    note = page.inner_text("#displacement-run-note")
    # the fixture has SFT and RL updates, but no stage with both: the note says so, the study labelled beside it
    assert note.startswith("This run: no stage has both an SFT and a non-zero RL update")
    assert "Study (Qwen3-8B): SFT moves the weights 3-7x as far as RL." in note
    _no_fixed_claim(page)
    page.goto(url + "/vectors")
    wait_for_dash(page)
    note = page.inner_text("#vectors-run-note")
    assert note.startswith("This run") and "Study (Qwen3-8B)" in note
    _no_fixed_claim(page)
    page.goto(url + "/consolidation")
    wait_for_dash(page)
    note = page.inner_text("#consolidation-run-note")
    # oracle-math (4/4) is the only oracle: merge-ties keeps 3 of its 4 math items, merge-uniform 2
    assert "is merge-ties: math 0.75 (75% of the oracle)" in note and "merge-uniform 50%" in note
    assert "no oracle score above 0 to compare on search/id" in note
    assert "Study (Qwen3-8B): uniform merging keeps general knowledge." in note
    assert "MMOPD" not in note and "SDFT" not in note
    _no_fixed_claim(page)
    assert console_errors == []


def test_missing_data_is_explained_and_its_controls_disabled(fixture_run, serve, page, console_errors):
    # merges without MLE, greedy scores only (no avg@k), every model at 0
    for method in ("merge-uniform", "merge-ties"):
        _cli("consolidate", "--run", str(fixture_run), "--json", "--method", method)
    zeros = {"math/id": [0, 0, 0, 0], "search/id": [0, 0, 0, 0], "general": [0, 0, 0, 0]}
    write_cells(fixture_run, {c: zeros for c in ("base", "seq-math", "seq-search", "oracle-math", "merge-uniform",
                                                 "merge-ties")})
    url = serve(fixture_run)
    page.goto(url + "/overview")
    wait_for_dash(page)
    page.wait_for_selector("#overview-matrix .main-svg")
    assert page.locator("#overview-score input[value=avg_k_mean]").is_disabled()
    assert "aclarena-diag eval --run DIR --samples" in page.inner_text("#overview-avg-note")
    assert "Every model scores 0.00 on every suite (greedy): all are at the floor" in \
        page.inner_text("#overview-floor-note")
    # a URL asking for avg@k gets the greedy scores the run has
    page.goto(url + "/overview?score=avg_k_mean")
    wait_for_dash(page)
    page.wait_for_selector("#overview-matrix .main-svg")
    assert page.locator("#overview-score input[value=mean]").is_checked()
    page.goto(url + "/consolidation")
    wait_for_dash(page)
    page.wait_for_selector("#consolidation-table table")
    assert not page.locator("#consolidation-router").is_visible()
    states = page.inner_text("#consolidation-states")
    assert "this run has no MLE" in states and "aclarena-diag consolidate --method mle" in states
    assert "all are at the floor" in states
    assert page.locator("#consolidation-score input[value=avg]").is_disabled()
    assert "MLE answers each suite" not in page.inner_text("body")
    assert console_errors == []


def test_repair_dashes_say_why(fixture_run, serve, page, console_errors):
    """A repair whose parts are "-" says why under its table."""
    _cli("repair", "--run", str(fixture_run), "--json", "--method", "svd-restore", "--from", "seq-math",
         "--to", "seq-search", "--name", "repair-seq-search")
    write_cells(fixture_run, {
        "seq-math": {"math/id": [1, 1, 1, 0], "search/id": [0, 0, 0, 0], "general": [0, 0, 0, 0]},
        "seq-search": {"math/id": [1, 0, 0, 0], "search/id": [1, 1, 0, 0], "general": [0, 0, 0, 0]},
        "oracle-math": {"math/id": [1, 1, 1, 1]},
        "repair-seq-search": {"math/id": [1, 1, 0, 0], "search/id": [1, 0, 0, 0], "general": [0, 0, 0, 0]},
    })
    url = serve(fixture_run)
    page.goto(url + "/consolidation")
    wait_for_dash(page)
    page.wait_for_selector("#consolidation-repair-table")
    row = page.inner_text("#consolidation-repair-row-0")
    why = page.inner_text("#consolidation-repair-why")
    assert "-" in row.split("\t")
    assert "preservation: - because the stage improved no held-out suite" in why
    assert console_errors == []


@pytest.fixture(scope="module")
def two_probe_run(tmp_path_factory, tokenizer):
    """The token run plus a probe set named like `signatures` makes (``<parent>.<domain>``), which sorts
    before the run's reference ``seq-math``."""
    from tokens_helpers import PROMPTS, make_token_run, write_jsonl

    root = make_token_run(tmp_path_factory.mktemp("two-probes") / "run", tokenizer, max_new_tokens=12)
    prompts = write_jsonl(root / "prompts-ecom.jsonl", PROMPTS)
    _cli("probe", "--run", str(root), "--ref", "seq-ecom", "--name", "seq-ecom.math", "--prompts", str(prompts),
         "--max-new-tokens", "12", "--json")
    _cli("tokens", "--run", str(root), "--ref", "seq-ecom", "--probe", "seq-ecom.math", "--against", "seq-math",
         "--json")
    return root


def _bar_ticks(page):
    return page.eval_on_selector_all("#tokens-colour-bar .tick", "els => els.map(e => e.textContent)")


def test_tokens_opens_on_the_reference_with_a_fitted_scale(two_probe_run, serve, page, console_errors):
    from aclarena.results.tokens import list_probes
    from aclarena.store import ResultsStore

    with ResultsStore(two_probe_run).reader() as r:
        assert list_probes(r)[0] == "seq-ecom.math"  # the first name: what the page used to open on
    url = serve(two_probe_run)
    page.goto(url + "/tokens")
    wait_for_dash(page)
    page.wait_for_selector("#tokens-text span.tok[title]")
    assert page.inner_text("#tokens-probe").strip() == "seq-math"
    assert page.inner_text("#tokens-probe-help").startswith("seq-math: seq-math's frozen generations")
    note = page.inner_text("#tokens-run-note")
    assert re.match(r"This run \(seq-math, seq-ecom\): the \d+% highest-entropy positions carry \d+% of the KL", note)
    assert "Study (Qwen3-8B): forgetting concentrates" in note
    # the colour scale is fitted to the values shown; the global one is a click away
    page.wait_for_function("() => document.querySelector('#tokens-legend').textContent.includes('fitted to this view')")
    fitted = _bar_ticks(page)
    page.get_by_label("global (whole probe set)").check()
    page.wait_for_function("() => document.querySelector('#tokens-legend').textContent.includes('one scale for every')")
    wait_for_dash(page)
    assert _bar_ticks(page) != fitted and _bar_ticks(page)[0] == "≤0.0001"
    assert "scale=global" in page.url
    # the other probe set explains its name
    page.click("#tokens-probe")
    page.get_by_role("option", name="seq-ecom.math", exact=True).click()
    page.wait_for_function(
        "() => document.querySelector('#tokens-probe-help').textContent.includes('aclarena-diag signatures')")
    assert console_errors == []
