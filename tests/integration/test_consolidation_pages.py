"""Consolidation and Router pages (content functions called directly) and their exported figures."""

from __future__ import annotations

import pytest
from consolidation_helpers import consolidated_run

from aclarena.dashboard.pages import consolidation as cpage
from aclarena.dashboard.pages import router as rpage
from aclarena.figures import build_figures
from aclarena.store import ResultsStore, load_manifest


@pytest.fixture()
def run(fixture_run):
    return consolidated_run(fixture_run)


def test_consolidation_content(run):
    c = cpage.content(run)
    assert not c["empty"]
    assert c["headers"] == ["math/id (id)", "search/id (id)", "general"]
    labels = [r["label"] for r in c["rows"]]
    assert labels[:2] == ["oracle-math", "sequential end point (seq-search)"]
    assert {"merge-uniform", "merge-ties"} <= set(labels)
    ties = next(r for r in c["rows"] if r["label"] == "merge-ties")
    assert ties["cells"] == ["0.750", "0.000", "0.500"]
    bars = c["figure"]
    assert {t.name for t in bars.data} >= {"merge-uniform", "merge-ties", "oracle-math"}
    radar = cpage.content(run, view="radar")["figure"]
    assert radar.data[0].type == "scatterpolar"


def test_consolidation_content_empty_states(fixture_run):
    assert cpage.content(fixture_run)["empty"]  # no results.h5 yet
    assert rpage.router_content(fixture_run)["empty"]


def test_router_content(run):
    c = rpage.router_content(run, "learned")
    assert c["router"] == "learned" and c["routers"] == ["rule", "learned", "bandit"]
    types = [r["type"] for r in c["rows"]]
    assert types[0] == "held-out" and "foreign" in types
    held = c["rows"][0]
    assert held["n"] == 40 and held["chance"] == pytest.approx(0.5)  # two experts (math, search)
    assert c["confusion"].data[0].x == ("math", "search", "none")
    with ResultsStore(run).reader() as r:
        stored = r.read("routing/learned/confusion")
    assert c["confusion"].data[0].z.tolist() == stored.tolist()


def test_figures_are_registered_for_export(run):
    with ResultsStore(run).reader() as r:
        figs = build_figures(r, load_manifest(run), "consolidation/*,router/*")
    names = sorted(f.name for f in figs)
    assert names == ["consolidation-bars", "consolidation-radar", "consolidation-table", "router-accuracy",
                     "router-confusion-bandit", "router-confusion-learned", "router-confusion-rule"]
