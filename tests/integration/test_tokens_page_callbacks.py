"""The Tokens page callbacks and figure builders, called directly on a scored run."""

import numpy as np
import plotly.graph_objects as go
import pytest
from tokens_helpers import make_token_run

from aclarena.dashboard.pages import tokens as page
from aclarena.figures import build_figures
from aclarena.figures.tokens import sequence_tokens, summaries, token_checkpoints, token_probes
from aclarena.probes.probe_set import read_probe_set
from aclarena.store import ResultsStore
from aclarena.store.manifest import load_manifest
from aclarena.store.token_keys import reference_key, scores_key


@pytest.fixture(scope="module")
def token_run(tmp_path_factory, tokenizer):
    return make_token_run(tmp_path_factory.mktemp("callbacks") / "run", tokenizer, max_new_tokens=12)


def test_probe_callback_lists_sequences_checkpoints_and_summary(token_run):
    options, value, ckpts, ckpt, table = page.on_probe(token_run, "seq-math")
    probe = read_probe_set(ResultsStore(token_run), "seq-math", with_text=False)
    assert len(options) == probe.n_sequences and value == 0
    assert ckpts == ["seq-search", "seq-ecom"] and ckpt == "seq-ecom"  # manifest order, latest selected
    assert options[0]["label"].startswith(f"#0 ({int(probe.scored[0].sum())} scored) what is 3 + 4?")
    rows = table.children[1:]
    assert [r.children[0].children for r in rows] == ["seq-search", "seq-ecom"]


def test_view_callback_shows_stored_values(token_run):
    store = ResultsStore(token_run)
    probe = read_probe_set(store, "seq-math")
    spans, legend = page.on_view(token_run, "seq-math", 1, "seq-search", "drift")
    assert len(spans) == len(probe.ids[1]) and "seq-search" in legend
    assert "".join(s["props"]["children"] for s in spans) == probe.texts[1]
    scored = [s for s in spans if "title" in s["props"]]
    assert len(scored) == int(probe.scored[1].sum())
    with store.reader() as r:
        tokens = sequence_tokens(r, "seq-math", 1, "seq-search")
        kl = r.ragged(f"{scores_key('seq-math', 'seq-search')}/kl").row(1)
        h = r.ragged(f"{reference_key('seq-math')}/entropy").row(1)
    got = [t for t in tokens if t.scored]
    np.testing.assert_array_equal([t.kl for t in got], kl)
    np.testing.assert_array_equal([t.entropy for t in got], h)
    assert all(len(t.alternatives) == 5 and len(t.ref_alternatives) == 5 for t in got)
    assert f"KL {got[0].kl:.3g} nats" in scored[0]["props"]["title"]
    # drift colours follow the checkpoint, entropy colours do not
    other, _ = page.on_view(token_run, "seq-math", 1, "seq-ecom", "drift")
    colours = lambda ss: [s["props"].get("style", {}).get("backgroundColor") for s in ss]  # noqa: E731
    assert colours(other) != colours(spans)
    e1, _ = page.on_view(token_run, "seq-math", 1, "seq-search", "entropy")
    e2, _ = page.on_view(token_run, "seq-math", 1, "seq-ecom", "entropy")
    assert colours(e1) == colours(e2) != colours(spans)


def test_checkpoint_callback_figures(token_run):
    scatter, conc = page.on_checkpoint(token_run, "seq-math", "seq-ecom")
    probe = read_probe_set(ResultsStore(token_run), "seq-math", with_text=False)
    assert sum(len(t["x"]) for t in scatter["data"]) == probe.n_scored  # all points when few
    assert "seq-ecom" in scatter["layout"]["title"]["text"]
    names = [t["name"] for t in conc["data"]]
    assert len(names) == 3 and names[0].startswith("no concentration")
    widths = {t["name"].split(" ")[0]: t["line"]["width"] for t in conc["data"][1:]}
    assert widths == {"seq-search": 2, "seq-ecom": 4}
    go.Figure(scatter)  # valid plotly figures
    go.Figure(conc)
    assert page.on_checkpoint(token_run, None, None) == ({"data": [], "layout": {}}, {"data": [], "layout": {}})


def test_export_builders_and_summaries(token_run):
    m = load_manifest(token_run)
    with ResultsStore(token_run).reader() as r:
        assert token_probes(r) == ["seq-math"]
        assert token_checkpoints(r, "seq-math", m) == ["seq-search", "seq-ecom"]
        rows = summaries(r, "seq-math", m, with_flags=True)
        assert all(row["n_nonfinite"] == 0 and 0.5 < row["concentration_area"] <= 1 for row in rows)
        built = build_figures(r, m, "tokens/*")
    assert sorted(b.name for b in built) == sorted([
        "tokens-concentration-seq-math", "tokens-strata-seq-math", "tokens-summary-seq-math",
        "tokens-scatter-seq-math-seq-search", "tokens-scatter-seq-math-seq-ecom"])
