"""Overview figures and page callbacks on a hand-made matrix, and their export."""

from __future__ import annotations

import json

import pytest
from capability_helpers import EXPECTED, write_fixture_matrix

from aclarena.figures import FIGURES, build_figures, load_all
from aclarena.figures.overview import capability_heatmap, chain_lines, metric_rows, row_groups
from aclarena.results.capability import load_matrix
from aclarena.store import ResultsStore, load_manifest


def test_overview_figures(fixture_run):
    write_fixture_matrix(fixture_run)
    m = load_manifest(fixture_run)
    with ResultsStore(fixture_run).reader() as r:
        matrix = load_matrix(r, m)
        assert row_groups(matrix, m) == [("base", "base"), ("seq-math", "stage"), ("seq-search", "stage"),
                                         ("oracle-math", "oracle"), ("lora-ecom", "consolidated")]
        fig = capability_heatmap(matrix, m)
        heat = fig.data[0]
        assert list(heat.y) == ["base", "seq-math", "seq-search", "oracle-math (oracle)", "lora-ecom (consolidated)"]
        assert list(heat.x) == ["math/id", "search/id", "math/ood", "general"]
        assert heat.z[1][0] == pytest.approx(0.75) and heat.text[4][2] == "error" and heat.text[3][1] == "not scored"
        lines = chain_lines(matrix, m)
        math_line = next(t for t in lines.data if t.name == "math/id")
        assert list(math_line.x) == ["base", "seq-math", "seq-search"]
        assert list(math_line.y) == pytest.approx([0.0, 0.75, 0.25])
        star = lines.data[[t.name for t in lines.data].index("math/id") + 1]
        assert list(star.x) == ["seq-math"]  # the math peak, lost at seq-search
        rows, notes = metric_rows(matrix, m, r)
        got = {row["key"]: row["value"] for row in rows}
        for k, v in EXPECTED.items():
            assert got[k] == pytest.approx(v), k
        sampled, _ = metric_rows(matrix, m, r, what="avg_k_mean")
        assert {row["key"]: row["value"] for row in sampled}["average_accuracy"] == pytest.approx(0.375 / 2)
        assert "stages: seq-math -> seq-search" in notes[0]


def test_overview_registered_and_empty_without_matrix(fixture_run):
    load_all()
    assert {"overview/capability-matrix", "overview/chain-scores", "overview/cl-metrics"} <= set(FIGURES)
    m = load_manifest(fixture_run)
    assert build_figures(None, m, "overview/*") == []
    write_fixture_matrix(fixture_run)
    with ResultsStore(fixture_run).reader() as r:
        names = [b.name for b in build_figures(r, m, "overview/*")]
    assert names == ["overview-capability-matrix", "overview-chain-scores", "overview-cl-metrics"]


def test_overview_callback_content(fixture_run):
    from aclarena.dashboard.pages.overview import overview_content

    assert overview_content(fixture_run)["empty"] is True
    write_fixture_matrix(fixture_run)
    out = overview_content(fixture_run, "avg_k_mean", "seq-search")
    assert out["matrix"].data[0].z[1][0] == pytest.approx(0.375)
    assert {r["key"]: r["value"] for r in out["rows"]}["backward_transfer"] == pytest.approx(-0.25)


def test_export_overview(fixture_run, cli, tmp_path):
    write_fixture_matrix(fixture_run)
    out = tmp_path / "figs"
    code, stdout, err = cli("export", "--run", str(fixture_run), "--figures", "overview/*", "--format", "svg,html",
                            "--out", str(out), "--json")
    assert code == 0, err
    files = {f["file"].rsplit("/", 1)[-1] for f in json.loads(stdout)["files"]}
    assert {"overview-capability-matrix.svg", "overview-chain-scores.svg", "overview-cl-metrics.svg"} <= files
    svg = (out / "overview-capability-matrix.svg").read_text()
    assert "seq-search" in svg and "oracle-math (oracle)" in svg
    html = (out / "report.html").read_text()
    assert "Capability matrix" in html and "Continual-learning metrics" in html


def _write_cells(run, outcomes):
    """Cells of ``{checkpoint: {suite: [item outcomes]}}`` (one seed)."""
    import numpy as np

    from aclarena.results.capability import cell_payload, write_cells

    settings = {"n": 1, "seeds": [0]}
    items = []
    for ck, suites in outcomes.items():
        for suite, values in suites.items():
            domain, _, variant = suite.partition("/")
            items.append(cell_payload(checkpoint=ck, suite=suite, domain=domain, role=variant or "general",
                                      source="arena", settings=settings, greedy=np.array([values], float),
                                      item_ids=[f"{suite}/{i}" for i in range(len(values))]))
    write_cells(run, items, overwrite=False)


def test_unscored_bridged_flat_and_intervals(fixture_run):
    """An unscored checkpoint is labelled and bridged, a flat suite gets no peak star, every score
    has its bootstrap interval, and a clicked cell lists its items against the parent's."""
    import numpy as np

    from aclarena.dashboard.pages.overview import items_content
    from aclarena.diagnostics.bootstrap import bootstrap_mean_ci

    general = {"base": [1] * 30 + [0] * 20, "seq-search": [0] * 50}  # seq-math not scored: the drop is 0.6 -> 0
    flat = {"base": [0] * 10, "seq-math": [0] * 10, "seq-search": [0] * 10}
    swap = {"base": [1, 1, 0, 0], "seq-math": [1, 0, 0, 1]}
    _write_cells(fixture_run, {ck: {**({"general": general[ck]} if ck in general else {}), "flat/id": flat[ck],
                                    **({"swap/id": swap[ck]} if ck in swap else {})}
                               for ck in ("base", "seq-math", "seq-search")})
    m = load_manifest(fixture_run)
    from aclarena.figures.overview import score_intervals

    with ResultsStore(fixture_run).reader() as r:
        matrix = load_matrix(r, m)
        intervals = score_intervals(r)
        heat = capability_heatmap(matrix, m, intervals=intervals).data[0]
        lines = chain_lines(matrix, m, intervals=intervals)
    row, col = list(heat.y).index("seq-math"), list(heat.x).index("general")
    assert heat.text[row][col] == "not scored" and "not scored" in heat.customdata[row][col][2]
    lo, hi = bootstrap_mean_ci(np.array(general["base"], float))
    assert intervals[("base", "general")] == (lo, hi, 50) and hi - lo > 0.2
    assert f"95% CI [{lo:.2f}, {hi:.2f}] over 50 items" in heat.customdata[0][col][2]
    names = [t.name for t in lines.data]
    g = lines.data[names.index("general")]
    assert g.connectgaps is True and np.isnan(g.y[1]) and list(g.y[[0, 2]]) == pytest.approx([0.6, 0.0])
    assert g.error_y.array[0] == pytest.approx(hi - 0.6) and g.error_y.arrayminus[0] == pytest.approx(0.6 - lo)
    assert names[names.index("general") + 1] is None  # general peaks (at base): a star follows it
    flat_at = names.index("flat/id")
    assert flat_at == len(names) - 1 or names[flat_at + 1] is not None  # flat suite: no star

    out = items_content(fixture_run, {"points": [{"customdata": ["seq-search", "general", ""]}]})
    assert out["parent"] is None and len(out["rows"]) == 50  # its parent seq-math has no general items
    out = items_content(fixture_run, {"points": [{"x": "swap/id", "y": "seq-math", "z": 0.5}]})  # as the browser sends
    assert out["note"] == "against its parent base on the same items: 1 lost, 1 gained"
    assert [r["change"] for r in out["rows"]] == ["", "lost", "", "gained"]
    nothing = items_content(fixture_run, {"points": [{"customdata": ["seq-math", "general", ""]}]})
    assert "not scored" in nothing["note"] and nothing["rows"] == []
    assert items_content(fixture_run, None) is None
    oracle = items_content(fixture_run, {"points": [{"x": "flat/id", "y": "oracle-math (oracle)"}]})
    assert oracle["checkpoint"] == "oracle-math" and "not scored" in oracle["note"]


def _second_math_suite(run):
    """A second in-domain math suite, `mathx`, on which seq-search forgot everything seq-math learnt."""
    import numpy as np

    from aclarena.results.capability import cell_payload, write_cells

    settings = {"n": 4, "seeds": [0]}
    items = []
    for ck, values in {"base": [0, 0, 0, 0], "seq-math": [1, 1, 1, 1], "seq-search": [0, 0, 0, 0]}.items():
        items.append(cell_payload(checkpoint=ck, suite="mathx", domain="math", role="id", source="arena",
                                  settings=settings, greedy=np.array([values], float),
                                  item_ids=[f"mathx/{i}" for i in range(4)]))
    write_cells(run, items, overwrite=False)


def test_export_and_the_page_choose_the_suite_of_a_domain(fixture_run, cli, tmp_path):
    """Issue 49: export and the dashboard took one suite of a domain (BWT -0.5 here) where
    `forgetting --suite-of math=mathx` gives -1.0, said nothing and offered no way to choose."""
    from aclarena.dashboard.pages.overview import overview_content, suite_options
    from aclarena.figures import FigureOptions

    write_fixture_matrix(fixture_run)
    _second_math_suite(fixture_run)
    m = load_manifest(fixture_run)

    from aclarena.figures.overview import METRIC_LABELS

    def bwt(fig):
        metric, value = fig.data[0].cells.values
        return float(value[list(metric).index(METRIC_LABELS["backward_transfer"])])

    with ResultsStore(fixture_run).reader() as r:
        (default,) = build_figures(r, m, "overview/cl-metrics")
        (chosen,) = build_figures(r, m, "overview/cl-metrics", FigureOptions(suite_of={"math": "mathx"}))
    assert bwt(default.figure) == pytest.approx(-0.5) and bwt(chosen.figure) == pytest.approx(-1.0)
    assert "several in-domain suites (math/id, mathx); using math/id" in default.figure.layout.title.text
    assert "suites: mathx, search/id" in chosen.figure.layout.title.text
    code, out, err = cli("forgetting", "--run", str(fixture_run), "--suite-of", "math=mathx", "--json")
    assert code == 0 and json.loads(out)["summary"]["backward_transfer"] == pytest.approx(-1.0), err
    figs = tmp_path / "figs"
    code, out, err = cli("export", "--run", str(fixture_run), "--figures", "overview/cl-metrics", "--format", "html",
                         "--out", str(figs), "--suite-of", "math=mathx", "--json")
    assert code == 0, err
    assert "suites: mathx, search/id" in (figs / "report.html").read_text()
    for bad, needle in (("math=nope", "suite for domain 'math'"), ("geo=mathx", "no stage of the chain trains"),
                        ("math", "DOMAIN=SUITE")):
        code, _, err = cli("export", "--run", str(fixture_run), "--format", "html", "--out", str(figs), "--suite-of", bad)
        assert code == 1 and needle in err and len(err.strip().splitlines()) == 1, err
    options, default_pick = suite_options(fixture_run, None)
    assert [o["value"] for o in options] == ["math=math/id", "math=mathx"] and default_pick == ["math=math/id"]
    rows = overview_content(fixture_run, "mean", None, {"math": "mathx"})["rows"]
    assert {r["key"]: r["value"] for r in rows}["backward_transfer"] == pytest.approx(-1.0)


def test_several_chains_are_not_guessed(fixture_run, cli):
    """Issue 49: the dashboard silently showed the first chain where the CLI and the API refuse to guess; and
    the API's refusal told a Python user to pass `--chain`."""
    import aclarena as acl
    from aclarena.dashboard.app import create_app
    from aclarena.dashboard.pages.overview import layout, overview_content
    from aclarena.errors import AclarenaError
    from aclarena.store.manifest import CheckpointSpec, write_manifest

    write_fixture_matrix(fixture_run)
    m = load_manifest(fixture_run)
    m.add(CheckpointSpec("seq-math-b", "checkpoints/seq-math", kind="stage", domain="math", phase="rl", parent="base"))
    write_manifest(m, fixture_run)
    with pytest.raises(AclarenaError) as e:
        acl.Run(fixture_run).forgetting()
    assert "chain=NAME" in str(e.value) and "--chain" not in str(e.value)
    code, _, err = cli("forgetting", "--run", str(fixture_run))
    assert code == 1 and "--chain NAME" in err
    out = overview_content(fixture_run, "mean", None)
    assert out["rows"] == [] and "chain menu" in out["notes"][0]
    with create_app(fixture_run).server.app_context():
        page = layout()
        chosen = layout(chain="seq-search")

    def chain_value(node):
        if getattr(node, "id", None) == "overview-chain":
            return node.value
        for child in node.children if isinstance(getattr(node, "children", None), list) else []:
            found = chain_value(child)
            if found is not None:
                return found
        return None

    assert chain_value(page) is None and chain_value(chosen) == "seq-search"
