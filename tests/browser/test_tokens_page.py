"""The Tokens page in headless Chromium, and the export of its figures."""

import json
import os
import re
import struct
from pathlib import Path

import pytest
from browser_helpers import wait_for_dash
from tokens_helpers import make_token_run

from aclarena.cli import main
from aclarena.dashboard.pages import tokens as tokens_page

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SIZES = {"concentration": (900, 560), "strata": (1000, 480), "scatter": (900, 560), "summary": (1100, 420)}


@pytest.fixture(scope="module")
def token_run(tmp_path_factory, tokenizer):
    return make_token_run(tmp_path_factory.mktemp("tokens-page") / "run", tokenizer)


def scored_colours(page):
    return page.eval_on_selector_all("#tokens-text span.tok[title]", "els => els.map(e => e.style.backgroundColor)")


SCATTER = "document.querySelector('#tokens-scatter .js-plotly-plot')"


def scatter_y(page):
    """The KL values the scatter draws (WebGL: no SVG points to read), as the page holds them."""
    return page.evaluate(f"() => {SCATTER}._fullData.flatMap(t => Array.from(t.y || []))")


def point_on_screen(page, trace, index):
    """Viewport coordinates of a point of the WebGL scatter (from its axes)."""
    return page.evaluate(f"""([trace, i]) => {{
        const gd = {SCATTER}; const t = gd._fullData[trace]; const L = gd._fullLayout;
        const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
        return {{x: box.left + L.xaxis.d2p(t.x[i]), y: box.top + L.yaxis.d2p(t.y[i])}};
    }}""", [trace, index])


def choose(page, dropdown_id, option):
    page.click(f"#{dropdown_id}")
    page.get_by_role("option", name=option, exact=True).click()


def test_tokens_page_switches_checkpoint(token_run, serve, page, console_errors):
    url = serve(token_run)
    page.set_viewport_size({"width": 1400, "height": 1100})
    page.goto(url + "/tokens")
    wait_for_dash(page)
    page.wait_for_selector("#tokens-text span.tok[title]")
    page.wait_for_selector("#tokens-scatter .main-svg")
    page.wait_for_selector("#tokens-summary-table")
    assert "seq-ecom" in page.text_content("#tokens-scatter .gtitle")
    # the export's tokens/strata: mean KL and flip rate at high- vs low-entropy positions, per checkpoint
    page.wait_for_selector("#tokens-strata .main-svg")
    assert "Drift on high- vs low-entropy positions" in page.text_content("#tokens-strata .gtitle")
    bars = page.evaluate("() => document.querySelector('#tokens-strata .js-plotly-plot').data.map(t => [t.name, t.x])")
    assert {n for n, _ in bars} == {"high entropy", "low entropy"} and len(bars) == 4  # 2 strata x (KL, flips)
    assert all("seq-ecom" in x for _, x in bars)
    summary = page.inner_text("#tokens-summary-table")
    assert "seq-search" in summary and "seq-ecom" in summary
    hover = page.get_attribute("#tokens-text span.tok[title]", "title")
    assert "reference entropy" in hover and "KL" in hover and "checkpoint's top" in hover and "log p(token)" in hover
    unscored = page.inner_text("#tokens-text").split("<|im_start|>assistant")[0]
    assert "what·is·3·+·4?" in unscored  # the prompt is shown, uncoloured, its spaces visible
    assert "0.0001" in page.inner_text("#tokens-colour-bar")  # the colour bar's low end
    before_colours, before_y = scored_colours(page), scatter_y(page)
    assert len(set(before_colours)) > 3 and len(before_y) > 50

    choose(page, "tokens-checkpoint", "seq-search")
    page.wait_for_function(
        "() => document.querySelector('#tokens-scatter .gtitle').textContent.includes('seq-search')")
    wait_for_dash(page)
    after_colours, after_y = scored_colours(page), scatter_y(page)
    assert len(after_colours) == len(before_colours) and after_colours != before_colours
    assert after_y != before_y
    assert page.inner_text("#tokens-title-a") == "seq-search"
    widths = page.evaluate("() => Object.fromEntries(document.querySelector('#tokens-concentration .js-plotly-plot')"
                           ".data.slice(1).map(t => [t.name.split(' ')[0], t.line.width]))")
    assert widths == {"seq-search": 4, "seq-ecom": 2}  # the highlight follows the checkpoint

    # coloured by reference entropy, the checkpoint no longer changes the text
    page.get_by_label("reference entropy").check()
    page.wait_for_function("() => document.querySelector('#tokens-legend').textContent.includes('entropy')")
    wait_for_dash(page)
    by_entropy = scored_colours(page)
    choose(page, "tokens-checkpoint", "seq-ecom")
    page.wait_for_function(
        "() => document.querySelector('#tokens-scatter .gtitle').textContent.includes('seq-ecom')")
    wait_for_dash(page)
    assert scored_colours(page) == by_entropy
    page.get_by_label("drift (KL)").check()
    page.wait_for_function("() => document.querySelector('#tokens-legend').textContent.includes('KL')")
    wait_for_dash(page)
    if os.environ.get("ACLARENA_SCREENSHOTS"):  # a picture of this synthetic case (the README's is the demo's)
        page.locator("#tokens-rank tbody tr").nth(1).locator("td").first.click()
        page.wait_for_selector("#tokens-text span.tok.pinned")
        wait_for_dash(page)
        page.screenshot(path=str(ROOT / "docs" / "img" / "tokens-page-synthetic.png"), full_page=True)
    assert console_errors == []


def pinned(page):
    return page.eval_on_selector_all("#tokens-text span.tok.pinned", "els => els.map(e => Number(e.dataset.i))")


def wait_pinned(page, pos):
    page.wait_for_function(f"() => !!document.querySelector('#tokens-text span.tok.pinned[data-i=\"{pos}\"]')")
    wait_for_dash(page)


def test_tokens_page_drill_down(token_run, serve, page, console_errors):
    """Rank table, token click, scatter click, side by side: each lands on the right token."""
    url = serve(token_run)
    page.set_viewport_size({"width": 1400, "height": 1100})
    page.goto(url + "/tokens")
    wait_for_dash(page)
    page.wait_for_selector("#tokens-text span.tok[title]")
    page.wait_for_selector("#tokens-rank tbody td")
    assert page.is_visible("#tokens-rank button.export") and page.is_visible("#tokens-subst button.export")
    assert page.locator("#tokens-subst tbody tr").count() >= 2  # header + at least one substitution

    # the positions ranking: its first row is the largest KL; a click opens that token
    page.get_by_label("positions (top 200)").check()
    page.wait_for_function("() => document.querySelector('#tokens-rank').innerText.includes('ref top')")
    wait_for_dash(page)
    top = page.locator("#tokens-rank tbody tr").nth(1).locator("td")
    seq, pos = int(top.nth(0).inner_text()), int(top.nth(1).inner_text())
    kl = float(top.nth(4).inner_text())
    top.nth(2).click()
    wait_pinned(page, pos)
    assert page.inner_text("#tokens-sequence").startswith(f"#{seq} ")
    assert pinned(page) == [pos]
    title = page.inner_text("#tokens-detail-title")
    assert f"sequence #{seq}, token {pos}" in title
    values = page.inner_text("#tokens-detail-values")
    assert "KL rank in this sequence, seq-ecom\t1 of" in values
    assert f"{kl:.3g}"[:4] in values

    # a click on a substitution opens its instance with the largest KL
    subst = tokens_page.on_rank(token_run, "seq-math", "seq-ecom", "positions")[3][0]
    page.locator("#tokens-subst tbody tr").nth(1).locator("td").first.click()
    wait_pinned(page, subst["pos"])
    assert f"sequence #{subst['seq']}, token {subst['pos']}" in page.inner_text("#tokens-detail-title")

    # a click on another token pins it instead
    other = page.locator("#tokens-text span.tok[title]").nth(2)
    other_pos = int(other.get_attribute("data-i"))
    other.click()
    wait_pinned(page, other_pos)
    assert pinned(page) == [other_pos]
    assert f"token {other_pos}" in page.inner_text("#tokens-detail-title")

    # a click on a scatter point opens the token it stands for
    page.wait_for_selector("#tokens-scatter .gl-container", state="attached")
    page.locator("#tokens-scatter").scroll_into_view_if_needed()
    xy = point_on_screen(page, 1, 0)  # the first high-entropy point
    box = {"x": xy["x"], "y": xy["y"], "width": 0, "height": 0}
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#tokens-scatter .hoverlayer .hovertext")
    hover = page.text_content("#tokens-scatter .hoverlayer")
    m = re.search(r"sequence #(\d+), token (\d+)", hover)
    assert m, hover
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    wait_pinned(page, int(m[2]))
    assert page.inner_text("#tokens-sequence").startswith(f"#{m[1]} ")
    assert f"sequence #{m[1]}, token {m[2]}" in page.inner_text("#tokens-detail-title")

    # side by side: the second checkpoint's text, same tokens, its own colours, one colour bar
    assert not page.is_visible("#tokens-text-b")
    choose(page, "tokens-checkpoint-b", "seq-search")
    page.wait_for_selector("#tokens-text-b span.tok[title]")
    wait_for_dash(page)
    a = page.eval_on_selector_all("#tokens-text span.tok", "els => els.map(e => e.textContent)")
    b = page.eval_on_selector_all("#tokens-text-b span.tok", "els => els.map(e => e.textContent)")
    assert a == b and page.inner_text("#tokens-title-b") == "seq-search"
    colours_b = page.eval_on_selector_all("#tokens-text-b span.tok[title]", "els => els.map(e => e.style.backgroundColor)")
    assert colours_b != scored_colours(page)
    assert "seq-search's top-k" in page.inner_text("#tokens-detail")
    assert page.locator(".colour-bar").count() == 1
    assert console_errors == []


def test_tokens_page_without_scores(fixture_run, serve, page, console_errors):
    url = serve(fixture_run)
    page.goto(url + "/tokens")
    wait_for_dash(page)
    assert "aclarena-diag tokens" in page.inner_text("#tokens-empty")
    assert console_errors == []


def test_export_tokens_figures_and_report(token_run, tmp_path, page, console_errors, capsys):
    out = tmp_path / "figs"
    code = main(["export", "--run", str(token_run), "--figures", "tokens/*", "--out", str(out), "--json"])
    assert code == 0
    files = {Path(r["file"]).name for r in json.loads(capsys.readouterr().out)["files"]}
    stems = {"tokens-concentration-seq-math", "tokens-strata-seq-math", "tokens-summary-seq-math",
             "tokens-scatter-seq-math-seq-search", "tokens-scatter-seq-math-seq-ecom"}
    assert files == {f"{s}.{ext}" for s in stems for ext in ("png", "svg", "pdf")} | {"report.html"}
    for stem in stems:
        width, height = SIZES[stem.split("-")[1]]
        png = (out / f"{stem}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (width, height), stem
        svg = (out / f"{stem}.svg").read_text()
        assert svg.lstrip().startswith("<svg") and f'width="{width}"' in svg and f'height="{height}"' in svg
        pdf = (out / f"{stem}.pdf").read_bytes()
        assert pdf[:5] == b"%PDF-" and pdf.rstrip().endswith(b"%%EOF")
        box = re.search(rb"/MediaBox\s*\[\s*0\s+0\s+([\d.]+)\s+([\d.]+)\s*\]", pdf)
        assert box and float(box[1]) / float(box[2]) == pytest.approx(width / height, rel=0.01), stem
    page.goto((out / "report.html").as_uri())
    page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(stems)}",
                           timeout=30_000)
    text = page.inner_text("body")
    assert "Where drift concentrates" in text and "Entropy vs drift" in text
    assert console_errors == []


def test_tokens_page_state_in_url(token_run, serve, page, console_errors):
    """The view (sequence, checkpoints, colour, ranking, pinned token) survives a reload from its URL."""
    url = serve(token_run)
    page.set_viewport_size({"width": 1400, "height": 1100})
    page.goto(url + "/tokens")
    wait_for_dash(page)
    page.wait_for_selector("#tokens-text span.tok[title]")
    page.click("#tokens-sequence")
    page.get_by_role("option").nth(3).click()
    page.wait_for_function("() => document.querySelector('#tokens-text').dataset.seq === '3'")
    choose(page, "tokens-checkpoint", "seq-search")
    choose(page, "tokens-checkpoint-b", "seq-ecom")
    page.get_by_label("reference entropy").check()
    page.get_by_label("positions (top 200)").check()
    page.wait_for_selector("#tokens-text-b span.tok[title]")
    wait_for_dash(page)
    tok = page.locator("#tokens-text span.tok[title]").nth(4)
    pos = int(tok.get_attribute("data-i"))
    tok.click()
    wait_pinned(page, pos)
    page.wait_for_function(f"() => window.location.search.includes('pin=3%3A{pos}')")
    shared = page.url
    assert "seq=3" in shared and "checkpoint=seq-search" in shared and "b=seq-ecom" in shared
    assert "color=entropy" in shared and "rank=positions" in shared
    title = page.inner_text("#tokens-detail-title")

    fresh = page.context.new_page()
    fresh.set_viewport_size({"width": 1400, "height": 1100})
    fresh.goto(shared)
    wait_for_dash(fresh)
    fresh.wait_for_selector("#tokens-text-b span.tok[title]")
    fresh.wait_for_selector(f"#tokens-text span.tok.pinned[data-i='{pos}']")
    wait_for_dash(fresh)
    assert fresh.inner_text("#tokens-sequence").startswith("#3 ")
    assert fresh.inner_text("#tokens-checkpoint") == "seq-search" and fresh.inner_text("#tokens-title-b").startswith("seq-ecom")
    assert fresh.is_checked("input[value=entropy]") and fresh.is_checked("input[value=positions]")
    assert fresh.inner_text("#tokens-detail-title") == title
    assert fresh.url == shared
    fresh.close()
    assert console_errors == []


def _naive_kl(run: Path, text: str, ref: str, ckpt: str) -> list[float]:
    """KL(p_ref ‖ p_ckpt) at every position after the first, from both models' full logits (no chunking)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(run / "checkpoints" / ref)
    ids = torch.tensor([tok(text)["input_ids"]])
    lp = {}
    for name in (ref, ckpt):
        model = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / name, dtype=torch.float32).eval()
        with torch.no_grad():
            lp[name] = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
    return (lp[ref].exp() * (lp[ref] - lp[ckpt])).sum(-1).tolist()


def _add_unloadable(run: Path, name: str, config: dict) -> None:
    """A manifest entry whose folder has a config.json and no weights."""
    folder = run / "checkpoints" / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    with (run / "aclarena.toml").open("a") as f:
        f.write(f'\n[checkpoints.{name}]\npath = "checkpoints/{name}"\nkind = "stage"\nparent = "seq-math"\n')


def test_tokens_page_scores_a_typed_prompt_live(token_run, serve, page, console_errors, tmp_path):
    """The prompt box scores typed text with the reference and a checkpoint (KL as a full-logits
    computation gives it), keeps two models loaded, and refuses an empty prompt, a model above the
    size limit (read from config.json) and a checkpoint without weights, each in one line."""
    import shutil

    from aclarena.analysis.prompt import MODELS

    run = tmp_path / "run"
    shutil.copytree(token_run, run)
    _add_unloadable(run, "big", {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
                                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
                                 "head_dim": 128, "intermediate_size": 12288, "tie_word_embeddings": False})
    cfg = json.loads((run / "checkpoints" / "seq-ecom" / "config.json").read_text())
    _add_unloadable(run, "no-weights", cfg)
    url = serve(run)
    page.set_viewport_size({"width": 1400, "height": 1100})
    page.goto(url + "/tokens")
    wait_for_dash(page)
    page.wait_for_selector("#tokens-text span.tok[title]")
    page.click("#tokens-prompt summary")

    def score(text: str | None, checkpoint: str | None) -> str:
        if text is not None:
            page.fill("#tokens-prompt-text", text)
        if checkpoint is not None:
            choose(page, "tokens-prompt-checkpoint", checkpoint)
        before = page.inner_text("#tokens-prompt-note")
        page.click("#tokens-prompt-go")
        page.wait_for_function(f"() => document.querySelector('#tokens-prompt-note').textContent !== {before!r}",
                               timeout=120_000)
        wait_for_dash(page)
        return page.inner_text("#tokens-prompt-note")

    assert score("", None) == "not scored: type a prompt to score (the box is empty)"
    loads = MODELS.loads
    text = "what is 12 + 9? search the capital city"
    note = score(text, "seq-ecom")
    assert note.startswith("seq-ecom against seq-math:"), note
    titles = page.eval_on_selector_all("#tokens-prompt-html span.tok[title]", "els => els.map(e => e.title)")
    shown = [float(re.search(r"KL ([-\d.e+]+) nats", t).group(1)) for t in titles]
    want = _naive_kl(run, text, "seq-math", "seq-ecom")
    assert len(shown) == len(want) >= 5
    assert shown == pytest.approx(want, rel=5e-3, abs=1e-6)  # the hover rounds to 3 significant digits
    assert max(want) > 1e-3  # the drifted head: a comparison that can fail
    assert page.locator("#tokens-prompt-html span.tok.unscored").count() == 1  # the first token has no prediction
    assert "click to pin" not in titles[0]
    assert MODELS.loads == loads + 2 and MODELS.names() == ["seq-math", "seq-ecom"]
    score("please cancel my order", "seq-ecom")  # the same pair, another prompt: nothing loaded
    assert MODELS.loads == loads + 2
    score(None, "seq-search")  # a third model: the least recently used (seq-ecom... after seq-math) goes
    assert MODELS.names() == ["seq-math", "seq-search"] and MODELS.loads == loads + 3

    note = score(None, "big")
    assert note.startswith("not scored: big has about ") and "above the 500M" in note and "\n" not in note
    assert MODELS.loads == loads + 3  # refused before loading
    note = score(None, "no-weights")
    assert note.startswith("not scored: no-weights cannot be loaded:") and "no weights" in note
    assert page.inner_text("#tokens-prompt-html") == ""
    assert console_errors == []
