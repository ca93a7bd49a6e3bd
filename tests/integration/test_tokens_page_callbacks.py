"""The Tokens page callbacks and figure builders, called directly on a scored run."""

import re
from collections import Counter
from html.parser import HTMLParser

import numpy as np
import plotly.graph_objects as go
import pytest
from tokens_helpers import make_token_run

from aclarena.dashboard.pages import tokens as page
from aclarena.figures import build_figures
from aclarena.figures.tokens import sequence_tokens
from aclarena.results.probes import read_probe_set
from aclarena.results.tokens import list_checkpoints, list_probes, reference_key, scores_key, summary_rows
from aclarena.store import ResultsStore
from aclarena.store.manifest import load_manifest


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


class _Spans(HTMLParser):
    """The top-level ``span.tok`` of the page's text HTML: attributes and visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[dict] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        if tag == "span":
            if self.depth == 0:
                self.spans.append({**dict(attrs), "text": ""})
            self.depth += 1

    def handle_endtag(self, tag):
        if tag == "span":
            self.depth -= 1

    def handle_data(self, data):
        if self.spans and self.depth:
            self.spans[-1]["text"] += data


def spans_of(markup: str) -> list[dict]:
    p = _Spans()
    p.feed(markup)
    return p.spans


def original_text(shown: str) -> str:
    """Undo the visible-whitespace marks of the page's text."""
    return shown.replace("↵\n", "\n").replace("→\t", "\t").replace("·", " ").replace("⟨bytes⟩", "\ufffd").replace("⟨b⟩", "")


def alpha(span: dict) -> float | None:
    m = re.search(r"rgba\(\d+,\d+,\d+,([\d.]+)\)", span.get("style", ""))
    return float(m[1]) if m else None


def test_view_callback_shows_stored_values(token_run):
    store = ResultsStore(token_run)
    probe = read_probe_set(store, "seq-math")
    render, legend = page.on_view(token_run, "seq-math", 1, "seq-search", "drift")
    spans = spans_of(render["a"])
    assert "b" not in render and render["seq"] == 1
    assert len(spans) == len(probe.ids[1]) and [int(s["data-i"]) for s in spans] == list(range(len(spans)))
    assert original_text("".join(s["text"] for s in spans)) == probe.texts[1]
    assert "·" in "".join(s["text"] for s in spans)  # spaces are visible
    scored = [s for s in spans if "title" in s]
    assert len(scored) == int(probe.scored[1].sum())
    with store.reader() as r:
        tokens = sequence_tokens(r, "seq-math", 1, "seq-search")
        kl = r.ragged(f"{scores_key('seq-math', 'seq-search')}/kl").row(1)
        h = r.ragged(f"{reference_key('seq-math')}/entropy").row(1)
    got = [t for t in tokens if t.scored]
    np.testing.assert_array_equal([t.kl for t in got], kl)
    np.testing.assert_array_equal([t.entropy for t in got], h)
    assert all(len(t.alternatives) == 5 and len(t.ref_alternatives) == 5 for t in got)
    assert f"KL {got[0].kl:.3g} nats" in scored[0]["title"]
    flips = [t.flipped for t in got]
    assert ["flip" in s["class"].split() for s in scored] == flips
    # drift colours follow the checkpoint, entropy colours do not
    other = spans_of(page.on_view(token_run, "seq-math", 1, "seq-ecom", "drift")[0]["a"])
    colours = lambda ss: [s.get("style") for s in ss]  # noqa: E731
    assert colours(other) != colours(spans)
    e1 = spans_of(page.on_view(token_run, "seq-math", 1, "seq-search", "entropy")[0]["a"])
    e2 = spans_of(page.on_view(token_run, "seq-math", 1, "seq-ecom", "entropy")[0]["a"])
    assert colours(e1) == colours(e2) != colours(spans)


def test_text_escapes_model_output():
    from aclarena.figures.token_explore import colour_scale, text_html  # noqa: F401
    from aclarena.figures.tokens import TokenView

    toks = [TokenView(text="<script>x</script>", scored=False),
            TokenView(text='"><b>', scored=True, entropy=0.5, ref_logprob=-0.1, logprob=-0.2, kl=0.01, js=0.001,
                      alternatives=(("<i>", -0.1),), ref_alternatives=(("&", -0.1),))]
    markup = text_html(toks, "drift", (1e-4, 1.0))
    assert "<script>" not in markup and "<b>" not in markup and "<i>" not in markup
    assert original_text("".join(s["text"] for s in spans_of(markup))) == '<script>x</script>"><b>'


def test_one_colour_scale_across_sequences_and_checkpoints(token_run):
    """The drift colour is KL on one log scale per probe set: only the position with the largest
    KL over every sequence and checkpoint reaches full colour."""
    store = ResultsStore(token_run)
    with store.reader() as r:
        kls = {c: r.ragged(f"{scores_key('seq-math', c)}/kl") for c in ("seq-search", "seq-ecom")}
        top = max(float(np.nanmax(v.all())) for v in kls.values())
        n_seq = kls["seq-ecom"].n_rows
        where = [(c, i) for c, v in kls.items() for i in range(n_seq) if float(np.nanmax(v.row(i))) == top]
    assert len(where) == 1
    legends = set()
    for c in kls:
        for i in range(n_seq):
            render, legend = page.on_view(token_run, "seq-math", i, c, "drift")
            legends.add(str(legend))
            peak = max(a for a in map(alpha, spans_of(render["a"])) if a is not None)
            assert (peak == pytest.approx(0.9)) == ((c, i) == where[0]), (c, i, peak)
    assert len(legends) == 1 and f"{top:.3g}" in legends.pop()
    # side by side: both texts on that scale, the second for the other checkpoint
    render, _ = page.on_view(token_run, "seq-math", where[0][1], "seq-search", "drift", "seq-ecom")
    assert render["title_a"] == "seq-search" and render["title_b"] == "seq-ecom"
    assert render["b"] == page.on_view(token_run, "seq-math", where[0][1], "seq-ecom", "drift")[0]["a"]


def _naive(run):
    """Per position, straight from the store: sequence, token index, entropy, KL, valid, flip."""
    m = load_manifest(run)
    out = {}
    with ResultsStore(run).reader() as r:
        ref = {k: r.ragged(f"{reference_key('seq-math')}/{k}") for k in ("entropy", "position", "top1", "token")}
        for c in list_checkpoints(r, "seq-math", m):
            ck = {k: r.ragged(f"{scores_key('seq-math', c)}/{k}") for k in ("kl", "js", "top1", "status")}
            thr = summary_rows(r, "seq-math", m)[list_checkpoints(r, "seq-math", m).index(c)]["entropy_threshold"]
            rows = []
            for i in range(ref["entropy"].n_rows):
                for j in range(len(ref["entropy"].row(i))):
                    h, kl = float(ref["entropy"].row(i)[j]), float(ck["kl"].row(i)[j])
                    ok = np.isfinite(h) and np.isfinite(kl) and ck["status"].row(i)[j] == 0
                    rows.append(dict(seq=i, pos=int(ref["position"].row(i)[j]), h=h, kl=kl, ok=ok,
                                     high=ok and h >= thr, flip=ok and ck["top1"].row(i)[j] != ref["top1"].row(i)[j],
                                     a=int(ref["top1"].row(i)[j]), b=int(ck["top1"].row(i)[j])))
            out[c] = rows
    return out


def test_rankings_and_substitutions_match_a_naive_count(token_run):
    from aclarena.figures.token_explore import rank_positions, rank_sequences, substitutions, token_label
    from aclarena.figures.tokens import vocab

    naive = _naive(token_run)
    with ResultsStore(token_run).reader() as r:
        voc = vocab(r, "seq-math")
        for c, rows in naive.items():
            seqs = rank_sequences(r, "seq-math", c)
            assert [s["kl_sum"] for s in seqs] == sorted((s["kl_sum"] for s in seqs), reverse=True)
            for s in seqs:
                mine = [x for x in rows if x["seq"] == s["seq"] and x["ok"]]
                total = sum(x["kl"] for x in mine)
                assert s["positions"] == len(mine) and s["kl_sum"] == pytest.approx(total)
                assert s["flips"] == sum(x["flip"] for x in mine)
                assert s["high_share"] == pytest.approx(sum(x["kl"] for x in mine if x["high"]) / total)
                assert s["pos"] == max(mine, key=lambda x: x["kl"])["pos"]
            top = rank_positions(r, "seq-math", c, n=10)
            want = sorted((x for x in rows if x["ok"]), key=lambda x: -x["kl"])[:10]
            assert [(t["seq"], t["pos"]) for t in top] == [(x["seq"], x["pos"]) for x in want]
            assert [t["flipped"] for t in top] == [x["flip"] for x in want]
            subs = substitutions(r, "seq-math", c)
            flips = [x for x in rows if x["flip"]]
            counts = Counter((token_label(voc, x["a"]), token_label(voc, x["b"])) for x in flips)
            assert {(s["from"], s["to"]): s["count"] for s in subs} == dict(counts)
            assert sum(s["share"] for s in subs) == pytest.approx(1.0 if flips else 0.0)
            for s in subs:  # its jump target is a flip of that pair with the pair's largest KL
                best = max((x for x in flips if (token_label(voc, x["a"]), token_label(voc, x["b"]))
                            == (s["from"], s["to"])), key=lambda x: x["kl"])
                assert (s["seq"], s["pos"]) == (best["seq"], best["pos"])


def test_detail_and_jumps(token_run):
    rows, _, _, _ = page.on_rank(token_run, "seq-math", "seq-ecom", "positions")
    first = rows[0]  # a click on its row pins it (in the browser: tests/browser/test_tokens_page.py)
    target = {"seq": first["seq"], "pos": first["pos"]}
    panel = str(page.on_detail(token_run, "seq-math", target, "seq-ecom", "seq-search"))
    assert f"Pinned: sequence #', '{first['seq']}'" in panel
    assert "KL rank in this sequence, seq-ecom'), Td('1 of " in panel  # the largest KL overall ranks first
    assert "seq-search's top-k" in panel and "reference's top-k" in panel
    assert "not scored" in str(page.on_detail(token_run, "seq-math", {"seq": 0, "pos": 0}, "seq-ecom"))


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
        assert list_probes(r) == ["seq-math"]
        assert list_checkpoints(r, "seq-math", m) == ["seq-search", "seq-ecom"]
        rows = summary_rows(r, "seq-math", m, with_flags=True)
        assert all(row["n_nonfinite"] == 0 and 0.5 < row["concentration_area"] <= 1 for row in rows)
        built = build_figures(r, m, "tokens/*")
    assert sorted(b.name for b in built) == sorted([
        "tokens-concentration-seq-math", "tokens-strata-seq-math", "tokens-summary-seq-math",
        "tokens-scatter-seq-math-seq-search", "tokens-scatter-seq-math-seq-ecom"])
