"""The Orders page's content and the order study's export figures, from a synthetic study in a store."""

from __future__ import annotations

import re

import pytest
from orders_helpers import HARM, synthetic_study, write_study

from aclarena.store.manifest import Manifest, write_manifest


def _run(tmp_path, design="latin"):
    write_manifest(Manifest(name="orders"), tmp_path)
    write_study(tmp_path, synthetic_study(design))
    return tmp_path


def test_figures_read_back_the_stored_study(tmp_path) -> None:
    from aclarena.dashboard.pages.orders import figures, study
    from aclarena.figures import build_figures
    from aclarena.store import ResultsStore
    from aclarena.store.manifest import load_manifest

    run = _run(tmp_path)
    data = study(run)
    assert data is not None and data["design"] == "latin"
    heat, ranking = figures(run, "interference", "bwt")
    z = heat.data[0].z
    ecom = data["domains"].index("ecom")
    # row = the earlier stage, column = the stage after it: the ecom column holds the largest drops
    # (truth: ecom lowers an earlier skill by 0.20, less 0.01 per seed index: mean 0.19 over seeds 0-2)
    assert [row[ecom] for i, row in enumerate(z) if i != ecom] == pytest.approx([HARM["ecom"] - 0.01] * 2)
    assert z[ecom][ecom] is None
    # orders ranked by mean BWT, worst first; one marker per seed
    means = list(ranking.data[0].x)
    assert means == sorted(means) and len(ranking.data[1].x) == 3 * len(means)
    # the Latin orders of 3: the most harmful stage first forgets least, last most
    assert ranking.data[0].y[-1] == "ecom → math → search" and ranking.data[0].y[0] == "math → search → ecom"
    with ResultsStore(run).reader() as r:
        built = build_figures(r, load_manifest(run), "orders/*")
    assert sorted(f.name for f in built) == ["orders-interference", "orders-ranking-bwt", "orders-ranking-final_avg"]


def test_no_study_no_figures(tmp_path) -> None:
    from aclarena.dashboard.pages.orders import figures
    from aclarena.figures import build_figures
    from aclarena.store.manifest import load_manifest

    write_manifest(Manifest(name="empty"), tmp_path)
    assert figures(tmp_path) == ({}, {})
    assert build_figures(None, load_manifest(tmp_path), "orders/*") == []


def test_summary_lines_name_the_harmful_stage(tmp_path) -> None:
    from aclarena.diagnostics.orders import summary_lines

    lines = summary_lines(synthetic_study("latin"))
    harm = next(line for line in lines if "most harmful stage" in line)
    assert "ecom" in harm and "positions 2, 3" in harm
    assert any("pairwise matrix predicts the orders' BWT" in line and "MAE 0.0" in line for line in lines)
    # correlations to two decimals with a sign (they printed every digit of the float)
    rs = [line for line in lines if "r = " in line or "Pearson r" in line]
    assert rs and all(re.search(r"r (= )?[+-]\d\.\d\d( |,)", line) for line in rs), rs


def test_docs_renderer_of_an_order_study() -> None:
    from tools.docs_results import orders_table

    data = synthetic_study("pairs")
    data["pairs"] = [{"first": "math", "second": "ecom", "p_drop": [0.01, 0.02, 0.03], "cos": [-0.05, 0.04, None],
                      "sft_rl": [16.83, 20.7, 19.9], "kl_share_high": [0.271, 0.4, 0.53]}]
    text = orders_table(data)
    assert "| math → ecom | 0.19 [" in text  # interference of math by ecom, with its t interval over 3 seeds
    # and the pair's three diagnostics per seed, a missing one as "-"
    assert "| -0.05, 0.04, - | 16.8, 20.7, 19.9 | 0.27, 0.40, 0.53 |" in text
    assert "| 0.20, 0.19, 0.18 |" in text  # its value per seed (0.20 less 0.01 per seed index)
    assert "- most harmful stage (positions 2, each weighed the same): ecom" in text


def test_docs_renderer_of_a_latin_study() -> None:
    from tools.docs_results import orders_ranking

    text = orders_ranking(synthetic_study("latin"))
    # the harm per stage, position controlled, with the share of seed resamples in which it is the most harmful
    assert "| stage (positions 2, 3" in text and "| ecom | " in text and "| 100% |" in text
    # each domain's final forgetting by its position (the last position forgets nothing)
    assert "| domain's final forgetting, by its position | 1 | 2 | 3 |" in text
    by_position = [line for line in text.splitlines() if line.startswith(("| math |", "| search |", "| ecom |"))
                   and line.count("[") == 3]
    assert len(by_position) == 3 and all(line.endswith("| 0.00 [0.00, 0.00] |") for line in by_position)
    # every order with its measured BWT beside the pairs' prediction (the synthetic truth is additive: close)
    rows = [line for line in text.splitlines() if line.startswith("| ") and " → " in line]
    assert len(rows) == 3
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert abs(float(cells[2].split(" [")[0]) - float(cells[4].split(" [")[0])) <= 0.02, row
    assert "- interference" not in text  # the pairs' lines belong to the pairs design's table
