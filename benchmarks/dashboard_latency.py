"""Dashboard latency in the browser: from a control change to the updated figure (issue 19 targets).

    PYTHONPATH=tests python benchmarks/dashboard_latency.py                 # every part, 12 changes each
    PYTHONPATH=tests python benchmarks/dashboard_latency.py --part tokens-big --changes 20

Headless Debian Chromium (Playwright) drives the app served by werkzeug in this process.
A change is a click on a control (a dropdown option, a radio or a checkbox); a capture-phase
click listener in the page stamps ``performance.now()``; the end is the first animation
frame at which the page shows the new state (its figure titles or text follow the change)
and no Dash callback is pending. Medians over the changes; the time includes the server's
callbacks, JSON transfer, React and plotly drawing. Resolution: one animation frame (~16 ms).

Runs (all synthetic; there is no trained demo run on the development machine):

* ``tokens-demo``: a store shaped like the demo's Tokens data: 32 sequences × 128 tokens
  (64 scored) × 18 checkpoints, vocabulary 1,000; change the checkpoint, then the sequence.
* ``tokens-big``: 256 sequences × 1,024 tokens × 12 checkpoints, vocabulary 151,936
  (``benchmarks/token_scoring.py``'s store); the same changes.
* ``overview``: 19 checkpoints × 5 suites × 50 items, bootstrap intervals on; switch greedy/avg@k.
* ``vectors`` and ``displacement``: a 40-stage chain with 8 oracles (88 task vectors, 48
  updates); switch the weights view, toggle the cumulative updates / the RL phase.

Targets: ≤ 150 ms for Tokens, ≤ 300 ms for other pages. Nothing is asserted: the script
prints what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
IDLE = "!document.querySelector('[data-dash-is-loading=\"true\"]')"
TARGETS = {"tokens": 150.0, "other": 300.0}


# --- runs -----------------------------------------------------------------------------------------


def tokens_store(run: Path, n_seq: int, seq_len: int, n_ckpt: int, vocab: int) -> None:
    from token_scoring import build_big_store

    build_big_store(run, n_seq=n_seq, seq_len=seq_len, n_ckpt=n_ckpt, vocab=vocab)


def overview_store(run: Path, n_stages: int = 18, n_items: int = 50) -> None:
    import numpy as np

    from aclarena.results.capability import cell_payload, write_cells
    from aclarena.store.manifest import CheckpointSpec, Manifest, write_manifest

    rng = np.random.default_rng(0)
    m = Manifest(name="overview-bench", base="base")
    m.add(CheckpointSpec("base", "checkpoints/base", kind="base"))
    domains = ["math", "search", "ecom", "if"]
    prev = "base"
    names = ["base"]
    for i in range(n_stages):
        name = f"s{i:02d}-{domains[i % 4]}"
        m.add(CheckpointSpec(name, f"checkpoints/{name}", kind="stage", domain=domains[i % 4], parent=prev))
        names.append(name)
        prev = name
    write_manifest(m, run)
    settings = {"n": n_items, "seeds": [0], "samples": 4}
    items = []
    for ck in names:
        for suite in [f"{d}/id" for d in domains] + ["general"]:
            p = rng.uniform(0.05, 0.9)
            greedy = (rng.random((1, n_items)) < p).astype(float)
            samples = (rng.random((1, n_items, 4)) < p).astype(float)
            domain, _, variant = suite.partition("/")
            items.append(cell_payload(checkpoint=ck, suite=suite, domain=domain, role=variant or "general",
                                      source="arena", settings=settings, greedy=greedy, samples=samples,
                                      item_ids=[f"{suite}/{k}" for k in range(n_items)]))
    write_cells(run, items, overwrite=False)


def vectors_store(run: Path) -> None:
    from vectors_helpers import make_long_chain_run

    make_long_chain_run(run, 40)


# --- browser --------------------------------------------------------------------------------------


@contextlib.contextmanager
def served(run: Path) -> Iterator[str]:
    from werkzeug.serving import make_server

    from aclarena.dashboard import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", 0, create_app(run).server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


STAMP = ("() => { if (!window.__stamped) { window.__stamped = true; document.addEventListener('click', "
         "() => { window.__t0 = performance.now(); }, true); } }")


def measure(page: Any, act: Callable[[int], str], changes: int) -> list[float]:
    """Milliseconds from the click of ``act(i)`` to the first frame where the JS condition it
    returns holds and no callback is pending."""
    page.evaluate(STAMP)
    out = []
    for i in range(changes + 1):  # the first change warms caches and is not counted
        page.wait_for_function(f"() => {IDLE}", timeout=240_000)
        cond = act(i)
        done = page.wait_for_function(f"() => ({cond}) && {IDLE} ? performance.now() : false", polling="raf",
                                      timeout=240_000)
        if i:
            out.append(float(done.json_value()) - float(page.evaluate("window.__t0")))
    return out


def choose(page: Any, dropdown_id: str, option: str) -> None:
    page.click(f"#{dropdown_id}")
    page.get_by_role("option", name=option, exact=True).click()


def tokens_changes(page: Any, url: str, changes: int) -> dict[str, list[float]]:
    page.goto(url + "/tokens")
    page.wait_for_selector("#tokens-text span.tok[title]", timeout=120_000)
    page.wait_for_selector("#tokens-scatter .main-svg")
    # Dash 4's radio items have the option role too: keep what opening the dropdown added
    shown = {o.inner_text() for o in page.get_by_role("option").all()}
    page.click("#tokens-checkpoint")
    options = [t for t in (o.inner_text() for o in page.get_by_role("option").all()) if t not in shown]
    page.keyboard.press("Escape")

    def ckpt(i: int) -> str:
        name = options[i % len(options)]
        choose(page, "tokens-checkpoint", name)
        return (f"document.querySelector('#tokens-scatter .gtitle')?.textContent?.includes(': {name} against') && "
                f"document.querySelector('#tokens-title-a')?.textContent?.startsWith('{name}')")

    def seq(i: int) -> str:
        # another sequence through the "most drifted" table (long dropdown lists are virtualised)
        cell = page.locator("#tokens-rank tbody tr").nth(1 + (i * 5) % 10).locator("td").first
        k = cell.inner_text().split(" ", 1)[0].lstrip("#")
        if page.evaluate("document.querySelector('#tokens-text').dataset.seq") == k:
            cell = page.locator("#tokens-rank tbody tr").nth(1 + (i * 5 + 1) % 10).locator("td").first
            k = cell.inner_text().split(" ", 1)[0].lstrip("#")
        cell.click()
        return (f"document.querySelector('#tokens-text')?.dataset?.seq === '{k}' && "
                f"document.querySelector('#tokens-detail-title')?.textContent?.includes('sequence #{k},') && "
                "document.querySelector('#tokens-text span.tok.pinned') !== null")

    out = {"checkpoint": measure(page, ckpt, changes)}
    print(f"  (checkpoint: median {statistics.median(out['checkpoint']):.0f} ms)", flush=True)
    out["sequence (table row)"] = measure(page, seq, changes)
    return out


def overview_changes(page: Any, url: str, changes: int) -> dict[str, list[float]]:
    page.goto(url + "/overview")
    page.wait_for_selector("#overview-matrix .main-svg", timeout=120_000)

    def score(i: int) -> str:
        label, title = ("avg@k", "avg@k (sampled)") if i % 2 == 0 else ("greedy", "greedy accuracy")
        page.get_by_label(label).check()
        return f"document.querySelector('#overview-matrix .gtitle')?.textContent?.includes('{title}')"

    return {"score": measure(page, score, changes)}


def vectors_changes(page: Any, url: str, changes: int) -> dict[str, list[float]]:
    page.goto(url + "/vectors")
    page.wait_for_selector("#vectors-heatmap .main-svg", timeout=120_000)

    def view(i: int) -> str:
        label, title = ("without embeddings and head", "without embeddings") if i % 2 == 0 else \
            ("all weights", "all floating weights")
        page.get_by_label(label).check()
        return (f"document.querySelector('#vectors-heatmap .gtitle')?.textContent?.includes('{title}') && "
                f"document.querySelector('#vectors-layer-heatmap .gtitle')?.textContent?.includes('{title}')")

    def cumulative(i: int) -> str:
        box = page.get_by_label("cumulative")
        box.uncheck() if box.is_checked() else box.check()
        n = 48 if i % 2 else 48 + 39
        return f"document.querySelector('#vectors-heatmap .gtitle')?.textContent?.includes('{n} vectors')"

    return {"view": measure(page, view, changes), "cumulative": measure(page, cumulative, changes)}


def displacement_changes(page: Any, url: str, changes: int) -> dict[str, list[float]]:
    page.goto(url + "/displacement")
    page.wait_for_selector("#displacement-sft-rl .main-svg", timeout=120_000)

    def view(i: int) -> str:
        label, title = ("without embeddings and head", "without embeddings") if i % 2 == 0 else \
            ("all weights", "all floating weights")
        page.get_by_label(label).check()
        return f"document.querySelector('#displacement-layers .gtitle')?.textContent?.includes('{title}')"

    def rl(i: int) -> str:
        box = page.get_by_label("RL", exact=True)
        box.uncheck() if box.is_checked() else box.check()
        n = 1 if i % 2 == 0 else 2
        return f"document.querySelectorAll('#displacement-sft-rl .barlayer .trace').length === {n}"

    return {"view": measure(page, view, changes), "RL filter": measure(page, rl, changes)}


PARTS: dict[str, tuple[str, Callable[[Path], None], Callable[..., dict[str, list[float]]], str]] = {
    "tokens-demo": ("Tokens, demo-shaped store (32 seq x 128 tok x 18 ckpt, vocab 1,000)",
                    lambda run: tokens_store(run, 32, 128, 18, 1000), tokens_changes, "tokens"),
    "tokens-big": ("Tokens, 256 seq x 1,024 tok x 12 ckpt, vocab 151,936",
                   lambda run: tokens_store(run, 256, 1024, 12, 151_936), tokens_changes, "tokens"),
    "overview": ("Overview, 19 ckpt x 5 suites x 50 items", overview_store, overview_changes, "other"),
    "vectors": ("Vectors, 40-stage chain + 8 oracles (88 vectors)", vectors_store, vectors_changes, "other"),
    "displacement": ("Displacement, 40-stage chain + 8 oracles (48 updates)", vectors_store, displacement_changes,
                     "other"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="all", choices=("all", *PARTS))
    ap.add_argument("--changes", type=int, default=12, help="measured changes per control (after one warm-up)")
    args = ap.parse_args()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from playwright.sync_api import sync_playwright

    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs; "
          f"{args.changes} changes per control after one warm-up")
    parts = list(PARTS) if args.part == "all" else [args.part]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
        for part in parts:
            title, build, drive, kind = PARTS[part]
            with tempfile.TemporaryDirectory() as tmp:
                run = Path(tmp) / "run"
                run.mkdir()
                with contextlib.redirect_stdout(io.StringIO()):
                    build(run)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                with served(run) as url:
                    got = drive(page, url, args.changes)
                page.close()
            print(f"\n== {title} (target {TARGETS[kind]:.0f} ms)")
            for control, ms in got.items():
                med = statistics.median(ms)
                print(f"  {control:12s} median {med:6.0f} ms   min {min(ms):6.0f}   max {max(ms):6.0f}   "
                      f"(n = {len(ms)}; {'meets' if med <= TARGETS[kind] else 'misses'} the target)")
        browser.close()


if __name__ == "__main__":
    main()
