"""Vectors and Displacement figures on a 40-stage synthetic run: sizes, filters, zero vectors,
colours, log axes and SFT/RL pairing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from vectors_helpers import make_long_chain_run

from aclarena.figures.vectors import (
    axis_type,
    distinct_colours,
    global_cosines_figure,
    layer_profile_figure,
    sft_rl_figure,
    stage_groups,
    vector_categories,
    vector_filter,
)
from aclarena.results.displacement import read_displacement_view
from aclarena.results.vectors import read_vectors_view
from aclarena.store import ResultsStore, load_manifest


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    return make_long_chain_run(tmp_path_factory.mktemp("long") / "run", 40)


@pytest.fixture(scope="module")
def summaries(long_run):
    with ResultsStore(long_run).reader() as r:
        return read_vectors_view(r), read_displacement_view(r), load_manifest(long_run)


def test_vector_filter_by_kind_and_phase(summaries):
    s, _, m = summaries
    cats = vector_categories(s, m)
    assert sum(k == "stage" for k, _ in cats) == 40 and sum(k == "oracle" for k, _ in cats) == 8
    assert sum(k == "cumulative" for k, _ in cats) == len(cats) - 48 >= 39
    rl_oracles = vector_filter(s, m, ["oracle"], ["rl"])
    assert [s.plus[i] for i in rl_oracles] == [f"oracle-{d}-rl" for d in ("math", "search", "ecom", "if")]
    assert len(vector_filter(s, m, ["stage", "oracle"], ["sft", "rl", "none"])) == 48


def test_heatmap_grows_with_rows_and_shows_zero_vectors(summaries):
    s, _, m = summaries
    small = global_cosines_figure(s, "all", vector_filter(s, m, ["oracle"]))
    big = global_cosines_figure(s, "all", vector_filter(s, m, ["stage", "oracle"]))
    huge = global_cosines_figure(s, "all")
    assert small.layout.height < big.layout.height < huge.layout.height
    assert big.layout.height >= 14 * 48  # at least 14 px a row
    assert small.data[-1].text[0][0] == "1.00"  # 8 rows: values in the cells
    assert big.data[-1].text is None  # 48 rows: on hover only (no matrix of empty strings sent)
    zero = [x for x in big.data[-1].y if x.endswith("[zero]")]
    assert zero == ["s07-if-rl - s06-if-sft [zero]"]
    grey = np.array(big.data[0].z, dtype=float)  # the grey layer: the zero vector's row and column only
    row = list(big.data[-1].y).index(zero[0])
    assert np.isfinite(grey[row]).all() and np.isfinite(grey[:, row]).all()
    assert np.isnan(np.delete(np.delete(grey, row, 0), row, 1)).all()


def test_colours_log_axes_and_paired_bars(summaries):
    _, d, _ = summaries
    assert len(set(distinct_colours(48))) == 48 and len(set(distinct_colours(90))) == 90
    profile = layer_profile_figure(d)  # one update highlighted (the furthest moved), the others faded by phase
    assert len(profile.data) == 48 and [t.line.width for t in profile.data].count(3.5) == 1
    top = profile.data[-1]
    assert top.name.startswith(d.children[int(np.nanargmax(d.norm))])
    assert len({t.line.color for t in profile.data[:-1]}) == len({p for p in d.phases})
    assert axis_type([1.0, 50.0]) == "linear" and axis_type([0.0, 1e-3, 1.0]) == "log"
    groups = stage_groups(d)
    bars = sft_rl_figure(d)
    sft, rl = (next(t for t in bars.data if t.name == n) for n in ("SFT", "RL"))
    assert list(sft.x) == list(rl.x)  # every stage has its SFT and RL bar side by side
    assert "math" in sft.x and "math #2" in sft.x and "oracle math" in sft.x and "oracle if" in rl.x
    assert len(set(groups)) == 20 + 4
    # RL updates 100x smaller than SFT: the bars switch to a log axis
    spread = dataclasses.replace(d, norm=np.where(np.array(d.phases) == "rl", np.asarray(d.norm) / 500, d.norm))
    assert bars.layout.yaxis.type == "linear" and sft_rl_figure(spread).layout.yaxis.type == "log"
