"""Issue 46, item 5, in headless Chromium: one test per layout defect class.

Download bars cover no title; the Monitor legend covers no panel title; signature labels stay left
of the first panel and come grouped SFT vs RL; Displacement's per-layer plots highlight one update
(legend inside the figure); one template and one colour map (four oracles, four colours); Flips'
top-k axis fitted to the data, forgot and gained in two colours, E and L spelled out; URL state on
Flips, Consolidation and Monitor; the Overview cell detail shows prompt, reply and expected answer;
Home summarises the store's keys; a figure's CSV keeps its error bars (the signatures' intervals).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from browser_helpers import wait_for_dash

pytestmark = pytest.mark.browser

# rectangles of the elements of one graph, in page pixels
RECTS = """([gid, sel]) => [...document.querySelectorAll('#' + gid + ' ' + sel)].map(e => {
    const r = e.getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height,
                                                  text: (e.textContent || '').trim()};
}).filter(r => r.w > 0 && r.h > 0)"""


def overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]


def rects(page, gid: str, sel: str) -> list[dict]:
    return page.evaluate(RECTS, [gid, sel])


def assert_bar_covers_nothing(page, gid: str) -> None:
    page.wait_for_selector(f"#{gid} .main-svg")
    page.wait_for_selector(f".data-download[data-target={gid}] button")
    bar = rects(page, gid, "> .data-download")
    assert bar, gid
    texts = rects(page, gid, ".gtitle") + rects(page, gid, ".legend") + rects(page, gid, ".annotation-text")
    assert texts, gid
    hit = [t["text"][:40] for t in texts if overlap(bar[0], t)]
    assert hit == [], (gid, hit)


# --- download bars -----------------------------------------------------------------------------


def test_download_bars_cover_no_title(fixture_run, serve, page, console_errors):
    from consolidation_helpers import consolidated_run

    run = consolidated_run(fixture_run)
    url = serve(run)
    page.goto(url + "/overview")
    wait_for_dash(page)
    for gid in ("overview-matrix", "overview-chain-scores"):
        assert_bar_covers_nothing(page, gid)
    page.goto(url + "/consolidation")
    wait_for_dash(page)
    page.get_by_label("heatmap").check()
    page.wait_for_function("() => document.querySelector('#consolidation-figure .gtitle')?.textContent"
                           ".includes('Consolidation methods')")
    assert_bar_covers_nothing(page, "consolidation-figure")
    assert console_errors == []


# --- Monitor legend ------------------------------------------------------------------------------

PROBES = ("monitor-math-long-name", "monitor-search-long-name", "monitor-ecom-long-name", "monitor-if-long-name",
          "razor-search-long-name", "razor-math-long-name")


def write_many_probes(run: Path, label: str = "seq-search-sft") -> None:
    """A monitored phase with six probes (a horizontal legend above the panels wrapped onto the first
    panel's title) and a warning."""
    from aclarena.diagnostics.monitor_metrics import METRICS, default_rules, rules_to_json
    from aclarena.results.monitor_series import (
        EVENT_COLUMNS,
        SESSION_COLUMNS,
        TRAIN_COLUMNS,
        MonitorStore,
        probe_columns,
        settings_bytes,
    )

    store = MonitorStore(run)
    for name, cols in (("sessions", SESSION_COLUMNS), ("train", TRAIN_COLUMNS), ("events", EVENT_COLUMNS),
                       *((f"probes/{p}", probe_columns(METRICS)) for p in PROBES)):
        store.declare(f"monitor/{label}/{name}", cols)
    assert store.acquire()
    store.append(f"monitor/{label}/sessions", {"session": 0, "step": 0, "time": 1.0, "settings": settings_bytes(
        {"every_n_steps": 2, "rules": rules_to_json(default_rules())})})
    for step in range(0, 12, 2):
        for k, p in enumerate(PROBES):
            store.append(f"monitor/{label}/probes/{p}", {"session": 0, "step": step, "time": 1.0,
                                                          **{m: 0.01 * (k + 1) for m in METRICS},
                                                          "fkl": 0.01 * step * (k + 1)})
        store.append(f"monitor/{label}/train", {"session": 0, "step": step, "time": 1.0, "loss": 1.0 / (step + 1)})
    store.append(f"monitor/{label}/events", {"session": 0, "step": 8, "time": 2.0, "series": PROBES[0].encode(),
                                             "metric": b"fkl", "value": 0.3, "rule": b"threshold", "limit": 0.165,
                                             "score": 0.3, "action": b"log"})
    store.release()


def test_monitor_legend_covers_no_panel_title(fixture_run, serve, page, console_errors):
    write_many_probes(fixture_run)
    url = serve(fixture_run)
    page.goto(url + "/monitor")
    wait_for_dash(page)
    page.wait_for_selector("#monitor-graph .legend")
    legend = rects(page, "monitor-graph", ".legend")[0]
    titles = [t for t in rects(page, "monitor-graph", ".annotation-text") if "threshold" not in t["text"]]
    assert len(titles) >= 4  # the panels' titles
    assert [t["text"] for t in titles if overlap(legend, t)] == []
    plots = rects(page, "monitor-graph", ".nsewdrag")
    assert [p for p in plots if overlap(legend, p)] == []  # nor a panel
    assert_bar_covers_nothing(page, "monitor-graph")
    assert console_errors == []


# --- signatures -----------------------------------------------------------------------------------


def signature_rows() -> list[dict]:
    """Rows as ``signature_rows`` reads them: RL names sort before SFT ones (rl-* < sft-*) and labels are long."""
    rows = []
    for k, (update, kind, child) in enumerate((("rl-search-phase-of-the-chain", "rl", "seq-search"),
                                               ("sft-search-phase-of-the-chain", "sft", "seq-search-sft"),
                                               ("rl-math-phase-of-the-chain", "rl", "seq-math"),
                                               ("sft-math-phase-of-the-chain", "sft", "seq-math-sft"))):
        row = {"update": update, "kind": kind, "parent": "p", "child": child, "domain": "math", "n_sequences": 40,
               "high_share": 0.2, "first_k_share": 0.1, "first_k": 8}
        for m in ("kl_share_high", "kl_share_first_k", "barely_moved_low", "concentration_area"):
            v = 0.1 + 0.15 * k
            row[m], row[f"{m}_low"], row[f"{m}_high"] = v, v - 0.05, v + 0.07
        rows.append(row)
    return rows


def draw(page, fig) -> None:
    """A figure of the dashboard's builders drawn by plotly.js in Chromium (the bundle plotly.py ships)."""
    from plotly.offline import get_plotlyjs

    page.set_content("<html><body><div id='g' style='width:1200px'></div></body></html>")
    page.add_script_tag(content=get_plotlyjs())
    page.evaluate("(f) => Plotly.newPlot('g', f.data, f.layout)", json.loads(fig.to_json()))
    page.wait_for_selector("#g .main-svg")


def test_signature_labels_stay_left_of_the_panels_grouped_sft_then_rl(page):
    from aclarena.figures.signatures import signatures_figure

    order = ["base", "seq-math-sft", "seq-math", "seq-search-sft", "seq-search"]
    draw(page, signatures_figure(signature_rows(), order))
    ticks = page.evaluate("""() => [...document.querySelectorAll('#g .yaxislayer-above text, #g .yaxislayer-above tspan')]
        .map(e => { const r = e.getBoundingClientRect(); return {x: r.left, w: r.width, y: r.top, h: r.height,
                                                                    text: e.textContent}; })
        .filter(r => r.w > 0)""")
    plots = page.evaluate("""() => [...document.querySelectorAll('#g .nsewdrag')].map(e => {
        const r = e.getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height}; })""")
    assert len(plots) == 4
    assert [t["text"] for t in ticks for p in plots if overlap(t, p)] == []  # no label under a panel
    labels = sorted((t for t in ticks if "phase" in t["text"]), key=lambda t: t["y"])
    assert [t["text"].split(" ")[0] for t in labels] == ["sft-math-phase-of-the-chain", "sft-search-phase-of-the-chain",
                                                         "rl-math-phase-of-the-chain", "rl-search-phase-of-the-chain"]
    groups = {t["text"] for t in ticks if t["text"] in ("SFT", "RL")}
    assert groups == {"SFT", "RL"}  # the group labels of the two-level axis


def test_figure_csv_keeps_error_bars(fixture_run, serve, page, console_errors):
    """The download bar's CSV of a figure with intervals (Overview's chain scores: bootstrap intervals)
    has their ends in `low` and `high`."""
    from flips_helpers import write_cells

    write_cells(fixture_run)
    url = serve(fixture_run)
    page.goto(url + "/overview")
    wait_for_dash(page)
    page.wait_for_selector(".data-download[data-target=overview-chain-scores] button")
    page.wait_for_selector("#overview-chain-scores .main-svg")
    with page.expect_download() as dl:
        page.click(".data-download[data-target=overview-chain-scores] button[data-what=CSV]")
    rows = list(csv.DictReader(io.StringIO(Path(dl.value.path()).read_text())))
    assert {"low", "high"} <= set(rows[0])
    with_bars = page.evaluate("""() => document.querySelector('#overview-chain-scores .js-plotly-plot')._fullData
        .filter(t => t.error_y && t.error_y.visible && t.error_y.type === 'data').length""")
    assert with_bars  # the chain's scores carry their bootstrap intervals
    filled = [r for r in rows if r["low"] and r["high"]]
    assert filled and all(float(r["low"]) <= float(r["y"]) <= float(r["high"]) for r in filled)
    assert any(float(r["low"]) < float(r["high"]) for r in filled)
    assert console_errors == []


def test_signatures_csv_keeps_the_intervals(page):
    from aclarena.figures.signatures import signatures_figure

    draw(page, signatures_figure(signature_rows()))
    # the same function the download bar runs (assets/download.js), on the drawn figure
    from aclarena.dashboard.app import ASSETS

    page.add_script_tag(content=(ASSETS / "download.js").read_text())
    page.evaluate("""() => { const g = document.getElementById('g'); g.id = 'sig';
        const w = document.createElement('div'); w.className = 'dash-graph'; w.id = 'sig-graph';
        g.parentNode.insertBefore(w, g); w.appendChild(g); }""")
    page.wait_for_selector(".data-download[data-target=sig-graph] button[data-what=CSV]")
    with page.expect_download() as dl:
        page.click(".data-download[data-target=sig-graph] button[data-what=CSV]")
    rows = list(csv.DictReader(io.StringIO(Path(dl.value.path()).read_text())))
    bars = [r for r in rows if r["trace"] in ("SFT", "RL")]
    assert len(bars) == 4 * 4
    for r in bars:
        v, lo, hi = float(r["x"]), float(r["low"]), float(r["high"])
        assert lo == pytest.approx(v - 0.05) and hi == pytest.approx(v + 0.07)


# --- Displacement ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_chain(tmp_path_factory):
    import contextlib

    from vectors_helpers import make_long_chain_run

    from aclarena.cli import main

    root = make_long_chain_run(tmp_path_factory.mktemp("chain") / "run", 40)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["displacement", "--run", str(root), "--json"]) == 0
    return root


def test_displacement_per_layer_plots_highlight_one_update(long_chain, serve, page, console_errors):
    url = serve(long_chain)
    page.goto(url + "/displacement")
    wait_for_dash(page)
    for gid in ("displacement-layers", "displacement-sparsity"):
        page.wait_for_selector(f"#{gid} .legend")
        widths = page.evaluate(f"""() => document.querySelector('#{gid} .js-plotly-plot')._fullData
            .map(t => t.line.width)""")
        assert len(widths) >= 48 and sum(w >= 3 for w in widths) == (1 if gid == "displacement-layers" else 2)
        legend = rects(page, gid, ".legend")[0]
        svg = rects(page, gid, ".main-svg")[0]
        assert legend["y"] + legend["h"] <= svg["y"] + svg["h"] + 1 and legend["x"] + legend["w"] <= svg["x"] + svg["w"] + 1
        assert page.evaluate(f"() => document.querySelectorAll('#{gid} .legend .traces').length") <= 5
    first = page.text_content("#displacement-layers .gtitle")
    page.click("#displacement-highlight")
    option = page.get_by_role("option", name=re.compile(r"^oracle.* \((sft|rl)\)$")).first  # not the checkbox
    name = option.inner_text().split(" (")[0]
    option.click()
    page.wait_for_function(f"() => document.querySelector('#displacement-layers .gtitle').textContent.includes("
                           f"'{name} highlighted')")
    assert first != page.text_content("#displacement-layers .gtitle")
    page.wait_for_function(f"() => window.location.search.includes('hl={name}')")
    page.reload()
    wait_for_dash(page)
    assert f"{name} highlighted" in page.text_content("#displacement-layers .gtitle")
    assert console_errors == []


# --- one template, one colour map -------------------------------------------------------------------


def test_one_template_on_every_page_and_each_oracle_its_colour(fixture_run, serve, page, console_errors):
    from consolidation_helpers import consolidated_run

    run = consolidated_run(fixture_run)
    url = serve(run)
    seen = {}
    for path in ("/", "/overview", "/consolidation", "/consolidation?view=radar", "/consolidation?view=heatmap"):
        page.goto(url + path)
        wait_for_dash(page)
        page.wait_for_selector(".js-plotly-plot .main-svg")
        for gid, bg in page.evaluate("""() => [...document.querySelectorAll('.dash-graph[id]')]
                .filter(g => g.querySelector('.js-plotly-plot') && g.querySelector('.js-plotly-plot')._fullLayout)
                .map(g => [g.id, g.querySelector('.js-plotly-plot')._fullLayout.template?.layout?.plot_bgcolor])"""):
            seen[f"{path} {gid}"] = bg
    assert len(seen) >= 5 and set(seen.values()) == {"white"}, sorted(seen.items())  # plotly_white everywhere


def test_four_oracles_four_colours():
    from aclarena.figures.consolidation import method_bars, row_colours
    from aclarena.results.comparison import CompareCell, CompareRow, Comparison

    cell = CompareCell(0.5, 0.1, 2, "replicates", ())
    rows = [CompareRow(f"oracle-{d}", "oracle", None, (), {"math/id": cell}, d) for d in ("math", "search", "ecom", "if")]
    rows += [CompareRow("seq-if", "end", None, (), {"math/id": cell}),
             CompareRow("merge-ties", "method", "merge-ties", (), {"math/id": cell})]
    cmp = Comparison(["math/id"], [], rows, "rule", "greedy")
    colours = row_colours(cmp)
    assert len(set(colours.values())) == len(rows)
    fig = method_bars(cmp)
    assert len({t.marker.color for t in fig.data}) == len(rows)
    assert fig.layout.template.layout.plot_bgcolor == "white"


# --- Flips ------------------------------------------------------------------------------------------


def test_flips_axis_fitted_two_colours_names_spelled_out_and_url_state(fixture_run, serve, page, console_errors):
    from flips_helpers import hand_made_result, write_result

    res = hand_made_result()
    res.items[0].l_topk[:] = [(" 41", 0.012), (" 42", 0.005)]
    res.items[0].e_topk[:] = [(" 42", 0.02), (" 41", 0.004)]
    write_result(fixture_run, res)
    url = serve(fixture_run)
    page.goto(url + "/flips")
    wait_for_dash(page)
    page.wait_for_selector("#flips-distributions .legend")  # the item's figure, not the empty one before it
    top = page.evaluate("() => document.querySelector('#flips-distributions .js-plotly-plot')._fullLayout.yaxis.range[1]")
    assert 0.02 < top < 0.05  # fitted to the largest probability, 0.02 (a fixed 0-1 hid 0.005)
    assert "earlier checkpoint (E) seq-math" in page.text_content("#flips-distributions .legend")
    assert "later checkpoint (L) seq-search" in page.text_content("#flips-distributions .legend")
    assert "E is the earlier checkpoint" in page.inner_text("#flips-el")
    assert page.inner_text("#flips-e-row").startswith("earlier (E) seq-math")
    colours = page.evaluate("""() => document.querySelector('#flips-recovery .js-plotly-plot')._fullData
        .map(t => [t.name, t.line.color])""")
    forgot = {c for n, c in colours if n.startswith("forgotten")}
    gained = {c for n, c in colours if n.startswith("gained")}
    assert len(forgot) == 1 and len(gained) == 1 and forgot != gained
    # the item in the URL
    page.click("#flips-item")
    page.get_by_role("option").filter(has_text="math/id/bbb").click()
    page.wait_for_function("() => window.location.search.includes('item=1')")
    page.reload()
    wait_for_dash(page)
    page.wait_for_function("() => document.querySelector('#flips-e-row')?.textContent.includes('Step')")
    assert "math/id/bbb" in page.inner_text("#flips-item")
    assert console_errors == []


# --- URL state: Consolidation and Monitor --------------------------------------------------------------


def test_consolidation_and_monitor_keep_their_view_in_the_url(fixture_run, serve, page, console_errors):
    from consolidation_helpers import consolidated_run

    run = consolidated_run(fixture_run)
    write_many_probes(run, "seq-math-sft")
    write_many_probes(run, "seq-search-sft")
    url = serve(run)
    page.goto(url + "/consolidation")
    wait_for_dash(page)
    page.get_by_label("radar").check()
    page.wait_for_function("() => window.location.search.includes('view=radar')")
    page.reload()
    wait_for_dash(page)
    assert page.locator("#consolidation-view input[value=radar]").is_checked()
    page.wait_for_function("() => document.querySelector('#consolidation-figure .gtitle')?.textContent"
                           ".includes('In-domain profile')")
    page.goto(url + "/monitor")
    wait_for_dash(page)
    shown = page.inner_text("#monitor-label").strip()
    other = "seq-math-sft" if shown == "seq-search-sft" else "seq-search-sft"
    page.click("#monitor-label")
    page.get_by_role("option", name=other, exact=True).click()
    page.wait_for_function(f"() => window.location.search.includes('phase={other}')")
    page.reload()
    wait_for_dash(page)
    assert page.inner_text("#monitor-label").strip() == other
    assert other in page.text_content("#monitor-graph .gtitle")
    assert console_errors == []


# --- Overview cell detail -------------------------------------------------------------------------------


def test_overview_cell_detail_shows_prompt_reply_and_expected_answer(fixture_run, serve, page, console_errors):
    from flips_helpers import CELL_SETTINGS, OUTCOMES

    from aclarena.envs import get_env, sample_tasks
    from aclarena.results.capability import cell_payload, write_cells

    tasks = sample_tasks("math/id", 4, seed=0)
    items = []
    for ck, o in OUTCOMES.items():
        items.append(cell_payload(checkpoint=ck, suite="math/id", domain="math", role="id", source="arena",
                                  settings=CELL_SETTINGS, greedy=np.array([o], dtype=float),
                                  item_ids=[t.id for t in tasks],
                                  transcripts=[f"[assistant] reply {k} of {ck}" for k in range(4)]))
    write_cells(fixture_run, items)
    url = serve(fixture_run)
    page.goto(url + "/overview")
    wait_for_dash(page)
    page.wait_for_selector("#overview-matrix .main-svg")
    x, y = page.evaluate("""() => {
        const gd = document.querySelector('#overview-matrix .js-plotly-plot'), fl = gd._fullLayout;
        const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
        const row = gd.data[0].y.find(v => String(v).startsWith('seq-search'));
        return [box.left + fl.xaxis.d2p('math/id'), box.top + fl.yaxis.d2p(row)]; }""")
    page.mouse.click(x, y)
    page.wait_for_selector("#overview-items-table")
    head = page.inner_text("#overview-items-table thead") if page.query_selector("#overview-items-table thead") \
        else page.inner_text("#overview-items-table")
    for col in ("prompt", "reply of seq-search", "expected answer"):
        assert col in head
    body = page.inner_text("#overview-items-table")
    assert tasks[0].prompt[:30] in body  # the item's prompt, not its hashed id only
    assert "reply 0 of seq-search" in body
    assert get_env("math").expert_actions(tasks[0])[0].split("Answer: ")[1] in body
    assert console_errors == []


# --- Home ---------------------------------------------------------------------------------------------


def test_home_summarises_the_store_keys(fixture_run, serve, page, console_errors):
    from aclarena.store import ResultsStore

    ResultsStore(fixture_run).write_many(
        [(f"examples/x{k}", {"v": np.arange(3)}, "example", "0.1.0", {}) for k in range(30)])
    url = serve(fixture_run)
    page.goto(url + "/")
    wait_for_dash(page)
    rows = page.locator("#home-results tr")
    assert rows.count() == 1 + 1  # the header and one group, not thirty keys
    assert "30" in page.inner_text("#home-results")
    assert not page.locator("#home-results-keys").is_visible()  # every key folded away
    assert console_errors == []
