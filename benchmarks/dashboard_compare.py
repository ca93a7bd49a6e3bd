"""Dashboard latency on a real run, this tree against another (today's main) side by side, every page.

    git worktree add --detach /tmp/base 387e406          # the code to compare with
    cp -r runs/demo /tmp/demo                            # the quick demo's run (never served in place)
    python benchmarks/dashboard_compare.py --run /tmp/demo --base /tmp/base --rounds 3 --changes 4 \\
        --json docs/results/dashboard_latency.json

Each tree serves the run from its own process (``PYTHONPATH=<tree>``, werkzeug, threaded), with
the same Chromium (Debian's /usr/bin/chromium, headless, Playwright) driving both. Rounds
alternate the order (base then head, head then base) so that the machine's load falls on both
alike; medians over every measured change (the first change of each control on each visit warms
caches and is not counted).

What a change is: a click on a control (a radio, a checkbox, a dropdown option, a heatmap cell,
a lineage node) or a key on the layer slider; a capture-phase listener stamps
``performance.now()``. The end is the first animation frame at which every figure the control
redraws has fired ``plotly_afterplot`` since the click (or, for text, the text changed) and no
Dash callback is pending. Where the time goes: ``server`` is from the click to the end of the
last ``_dash-update-component`` response (callback requests, their server time and transfer),
``draw`` the rest (React and plotly drawing); ``kB`` the callback responses' bodies. A page's
load is from navigation start to its figures drawn and no callback pending.

Targets (issue 46): Tokens <= 150 ms, every other page <= 300 ms, control change to figure drawn.
Nothing is asserted: the script reports what it measured, and the machine's load beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
IDLE = "!document.querySelector('[data-dash-is-loading=\"true\"]')"
TARGETS = {"tokens": 150.0, "other": 300.0}

# the server: create_app of the tree on PYTHONPATH, with the CLI's live helpers when the tree has them
SERVE = r"""
import inspect, logging, sys, threading
from werkzeug.serving import make_server
from aclarena.dashboard import create_app
kw = {}
params = inspect.signature(create_app).parameters
if "score_prompt" in params:
    from aclarena.analysis.prompt import score_prompt
    kw["score_prompt"] = score_prompt
if "describe_items" in params:
    from aclarena.analysis.items import describe_items
    kw["describe_items"] = describe_items
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = make_server("127.0.0.1", 0, create_app(sys.argv[1], **kw).server, threaded=True)
print(server.server_port, flush=True)
server.serve_forever()
"""

STAMP = """() => {
    if (window.__stamped) { return; }
    window.__stamped = true;
    const stamp = () => { window.__t0 = performance.now(); };
    document.addEventListener('click', stamp, true);
    document.addEventListener('keydown', stamp, true);
    performance.setResourceTimingBufferSize(100000);
}"""

ARM = """(ids) => {
    window.__drawn = {};
    for (const id of ids) {
        const gd = document.querySelector('#' + id + ' .js-plotly-plot');
        if (gd && gd.on && !gd.__benchHooked) {
            gd.on('plotly_afterplot', () => { window.__drawn[id] = performance.now(); });
            gd.__benchHooked = true;
        }
    }
    performance.clearResourceTimings();
}"""

SPLIT = """(t1) => {
    const t0 = window.__t0;
    const calls = performance.getEntriesByType('resource').filter(
        e => e.name.includes('_dash-update-component') && e.startTime >= t0 - 1 && e.responseEnd <= t1 + 1);
    const end = calls.length ? Math.max(...calls.map(e => e.responseEnd)) : t0;
    return {total: t1 - t0, server: end - t0, bytes: calls.reduce((a, e) => a + (e.encodedBodySize || 0), 0),
            requests: calls.length};
}"""


class Served:
    def __init__(self, tree: Path, run: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "TRANSFORMERS_VERBOSITY": "error"}
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE, str(run)], cwd=str(tree), env=env,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.proc.kill()
            raise SystemExit(f"the dashboard of {tree} did not start (got {line!r})")
        self.url = f"http://127.0.0.1:{line}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


# --- controls ---------------------------------------------------------------------------------------
# A control is (name, act) where act(page, i) performs the i-th change and returns (graph ids that must
# redraw, an extra JS condition or "true").


def _choose(page: Any, dropdown_id: str, i: int) -> str:
    """Open a dropdown and click an option other than the one shown; returns the option's text."""
    shown = {o.inner_text() for o in page.get_by_role("option").all()}  # radio items have the role too
    current = page.inner_text(f"#{dropdown_id}").strip()
    page.click(f"#{dropdown_id}")
    options = [t for t in (o.inner_text() for o in page.get_by_role("option").all()) if t not in shown]
    others = [t for t in options if t.strip() != current]
    if not others:  # choosing the shown option again redraws nothing: the wait would time out
        page.keyboard.press("Escape")
        raise LookupError(f"#{dropdown_id} has one option ({current!r}): nothing to change to on this run")
    name = others[i % len(others)]
    page.get_by_role("option", name=name, exact=True).click()
    return name


def dropdown(dropdown_id: str, graphs: list[str], text: str | None = None) -> Callable[..., Any]:
    """Choose another option; the figures ``graphs`` must redraw, or (``text``) an element's text change."""
    def act(page: Any, i: int) -> tuple[list[str], str]:
        if text:
            page.evaluate(f"() => {{ window.__prevText = document.querySelector('{text}')?.textContent || ''; }}")
        _choose(page, dropdown_id, i)
        return graphs, _text_changed(text) if text else "true"
    return act


def radio(radio_id: str, graphs: list[str]) -> Callable[..., Any]:
    """Cycle through a radio group's enabled options."""
    def act(page: Any, i: int) -> tuple[list[str], str]:
        boxes = page.locator(f"#{radio_id} input:not([disabled])")
        n = boxes.count()
        checked = next(k for k in range(n) if boxes.nth(k).is_checked())
        boxes.nth((checked + 1) % n).click()
        return graphs, "true"
    return act


def toggle(checklist_id: str, value: str, graphs: list[str]) -> Callable[..., Any]:
    def act(page: Any, i: int) -> tuple[list[str], str]:
        page.click(f"#{checklist_id} input[value='{value}']")
        return graphs, "true"
    return act


def slider(slider_id: str, graphs: list[str]) -> Callable[..., Any]:
    """One step right (left on every other change) with the keyboard on the slider's handle."""
    def act(page: Any, i: int) -> tuple[list[str], str]:
        handle = page.locator(f"#{slider_id} [role=slider]").first
        handle.focus()
        handle.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
        return graphs, "true"
    return act


def _text_changed(selector: str) -> str:
    return (f"(document.querySelector('{selector}')?.textContent || '') !== window.__prevText && "
            f"document.querySelector('{selector}') !== null")


def click_cell(graph_id: str, detail: str) -> Callable[..., Any]:
    """Click a heatmap cell (a different one each change); the detail panel's title must change."""
    def act(page: Any, i: int) -> tuple[list[str], str]:
        page.evaluate(f"() => {{ window.__prevText = document.querySelector('{detail}')?.textContent || ''; }}")
        x, y = page.evaluate("""([gid, i]) => {
            const gd = document.querySelector('#' + gid + ' .js-plotly-plot');
            const t = gd._fullData.find(d => d.type === 'heatmap' && d.z) || gd._fullData[0], fl = gd._fullLayout;
            const xs = t.x, ys = t.y, k = (7 * i + 3) % (xs.length * ys.length);
            const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
            return [box.left + fl.xaxis.d2p(xs[k % xs.length]), box.top + fl.yaxis.d2p(ys[Math.floor(k / xs.length)])];
        }""", [graph_id, i])
        page.mouse.click(x, y)
        return [], _text_changed(detail)
    return act


def click_node(graph_id: str, detail: str) -> Callable[..., Any]:
    """Click a scatter point of a figure (the lineage's checkpoints), another one each change."""
    def act(page: Any, i: int) -> tuple[list[str], str]:
        page.evaluate(f"() => {{ window.__prevText = document.querySelector('{detail}')?.textContent || ''; }}")
        x, y = page.evaluate("""([gid, i]) => {
            const gd = document.querySelector('#' + gid + ' .js-plotly-plot');
            const pts = [];
            gd._fullData.filter(d => d.mode && d.mode.includes('markers')).forEach(
                d => { for (let j = 0; j < d.x.length; j++) { pts.push([d.x[j], d.y[j]]); } });
            const [x, y] = pts[(i + 1) % pts.length], fl = gd._fullLayout;
            const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
            return [box.left + fl.xaxis.d2p(x), box.top + fl.yaxis.d2p(y)];
        }""", [graph_id, i])
        page.mouse.click(x, y)
        return [], _text_changed(detail)
    return act


def tokens_checkpoint(page: Any, i: int) -> tuple[list[str], str]:
    name = _choose(page, "tokens-checkpoint", i)
    return ["tokens-scatter"], (f"document.querySelector('#tokens-title-a')?.textContent?.startsWith('{name}') && "
                                f"document.querySelector('#tokens-text')?.dataset?.markup?.includes('|{name}|')")


def tokens_sequence(page: Any, i: int) -> tuple[list[str], str]:
    """Another sequence through the "most drifted" table (long dropdown lists are virtualised)."""
    rows = page.locator("#tokens-rank tbody tr")
    n = rows.count() - 1
    k = None
    for step in range(n):
        cell = rows.nth(1 + (i * 5 + step) % n).locator("td").first
        k = cell.inner_text().split(" ", 1)[0].lstrip("#")
        if page.evaluate("document.querySelector('#tokens-text').dataset.seq") != k:
            break
    cell.click()
    return [], (f"document.querySelector('#tokens-text')?.dataset?.seq === '{k}' && "
                f"document.querySelector('#tokens-detail-title')?.textContent?.includes('sequence #{k},') && "
                "document.querySelector('#tokens-text span.tok.pinned') !== null")


VECTOR_GRAPHS = ["vectors-heatmap", "vectors-layer-heatmap", "vectors-layer-oracle", "vectors-distances"]
DISPLACEMENT_GRAPHS = ["displacement-sft-rl", "displacement-layers", "displacement-sparsity"]
ALL_GRAPHS = ["home-lineage", "overview-matrix", "overview-chain-scores", "tokens-scatter", "flips-distributions",
              *VECTOR_GRAPHS, *DISPLACEMENT_GRAPHS, "monitor-graph", "consolidation-figure", "router-confusion"]

# page -> (path, what marks it as drawn, budget kind, [(control, act, needs: a selector that must exist)])
PAGES: dict[str, tuple[str, str, str, list[tuple[str, Callable[..., Any], str]]]] = {
    "home": ("/", "#home-lineage .main-svg", "other",
             [("lineage node", click_node("home-lineage", "#home-lineage-links"), "#home-lineage")]),
    "overview": ("/overview", "#overview-matrix .main-svg", "other",
                 [("matrix cell", click_cell("overview-matrix", "#overview-items-title, #overview-items p"),
                   "#overview-matrix"),
                  ("score", radio("overview-score", ["overview-matrix", "overview-chain-scores"]),
                   "#overview-score input[value=avg_k_mean]:not([disabled])")]),
    "tokens": ("/tokens", "#tokens-scatter .main-svg", "tokens",
               [("checkpoint", tokens_checkpoint, "#tokens-checkpoint"),
                ("sequence (table row)", tokens_sequence, "#tokens-rank")]),
    "flips": ("/flips", "#flips-recovery .main-svg", "other",
              [("item", dropdown("flips-item", [], "#flips-aligned"), "#flips-item")]),
    "vectors": ("/vectors", "#vectors-heatmap .main-svg", "other",
                [("weights view", radio("vectors-view", VECTOR_GRAPHS), "#vectors-view"),
                 ("cumulative", toggle("vectors-kinds", "cumulative", VECTOR_GRAPHS[:3]), "#vectors-kinds"),
                 ("layer slider", slider("vectors-layer-slider", ["vectors-layer-heatmap"]), "#vectors-layer-slider"),
                 ("oracle", dropdown("vectors-oracle", ["vectors-layer-oracle"]), "#vectors-oracle")]),
    "displacement": ("/displacement", "#displacement-sft-rl .main-svg", "other",
                     [("weights view", radio("displacement-view", DISPLACEMENT_GRAPHS), "#displacement-view"),
                      ("RL filter", toggle("displacement-phases", "rl", DISPLACEMENT_GRAPHS), "#displacement-phases")]),
    "monitor": ("/monitor", "#monitor-graph .main-svg", "other",
                [("phase", dropdown("monitor-label", ["monitor-graph"]), "#monitor-label")]),
    "consolidation": ("/consolidation", "#consolidation-figure .main-svg", "other",
                      [("view", radio("consolidation-view", ["consolidation-figure"]), "#consolidation-view")]),
    "router": ("/router", "#router-accuracy .main-svg", "other",
               [("router", dropdown("router-choice", ["router-confusion"]), "#router-choice")]),
}


def load_ms(page: Any, url: str, ready: str) -> float:
    """Navigation start to the page's figures drawn and no callback pending."""
    page.goto(url, wait_until="commit")
    page.wait_for_selector(f"{ready}, main [id$='-empty']", timeout=240_000)
    empty = page.query_selector("main [id$='-empty']")
    if empty is not None:
        raise LookupError("no data: " + empty.inner_text())
    done = page.wait_for_function(
        f"() => {IDLE} && [...document.querySelectorAll('.dash-graph')].every(g => g.querySelector('.main-svg')) "
        "? performance.now() : false", polling="raf", timeout=240_000)
    return float(done.json_value())


def measure(page: Any, act: Callable[..., Any], changes: int) -> list[dict[str, float]]:
    page.evaluate(STAMP)
    out = []
    for i in range(changes + 1):  # the first change warms caches and is not counted
        page.wait_for_function(f"() => {IDLE}", timeout=240_000)
        page.wait_for_timeout(150)  # let the previous change's stray frames settle
        page.evaluate(ARM, ALL_GRAPHS)  # hook every figure first: the act clicks, and its figures redraw after
        graphs, extra = act(page, i)
        ids = json.dumps(graphs)
        done = page.wait_for_function(
            f"() => {ids}.every(id => (window.__drawn[id] || 0) > window.__t0) && ({extra}) && {IDLE} "
            "? performance.now() : false", polling="raf", timeout=240_000)
        split = page.evaluate(SPLIT, float(done.json_value()))
        if i:
            out.append(split)
    return out




def summarise(samples: list[dict[str, float]]) -> dict[str, Any]:
    if not samples:
        return {"n": 0}
    tot = [s["total"] for s in samples]
    return {"n": len(tot), "median_ms": round(statistics.median(tot), 1), "min_ms": round(min(tot), 1),
            "max_ms": round(max(tot), 1),
            "server_ms": round(statistics.median(s["server"] for s in samples), 1),
            "draw_ms": round(statistics.median(s["total"] - s["server"] for s in samples), 1),
            "kB": round(statistics.median(s["bytes"] for s in samples) / 1024, 1),
            "requests": statistics.median(s["requests"] for s in samples)}


def machine_note(load_before: Sequence[float]) -> str:
    """What the load said about the machine: idle (the benchmark's own servers and Chromium aside) when the
    1-minute load average before was below 1.5 per 2 CPUs, else loaded by other jobs."""
    idle = load_before[0] < 0.75 * (os.cpu_count() or 1)
    said = ("otherwise idle (the load is the benchmark's two servers and Chromium)" if idle else
            "loaded by other jobs while this ran: absolute times are inflated")
    return f"{os.cpu_count()} CPUs, {said}; the two trees were measured alternately in one run, so compare them"


def git_commit(tree: Path) -> str:
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, type=Path, help="the run to serve (a copy: nothing is written to it)")
    ap.add_argument("--base", type=Path, help="a checkout of the code to compare with (e.g. a worktree of main)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, alternating which tree goes first")
    ap.add_argument("--changes", type=int, default=4, help="measured changes per control per visit (after a warm-up)")
    ap.add_argument("--pages", default=",".join(PAGES), help="comma-separated pages (default: all)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    trees = {"head": ROOT} | ({"base": args.base.resolve()} if args.base else {})
    pages = [p for p in args.pages.split(",") if p]
    load0 = os.getloadavg()
    started = time.time()
    print(f"load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} on {os.cpu_count()} CPUs; "
          f"{args.rounds} rounds x {args.changes} changes per control", flush=True)
    servers = {name: Served(tree, args.run.resolve()) for name, tree in trees.items()}
    got: dict[str, dict[str, dict[str, list[Any]]]] = {}
    skipped: dict[str, str] = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
            for rnd in range(args.rounds):
                order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
                for name in pages:
                    path, ready, _, controls = PAGES[name]
                    for tree in order:
                        page = browser.new_page(viewport={"width": 1400, "height": 1000})
                        try:
                            ms = load_ms(page, servers[tree].url + path, ready)
                        except Exception as e:  # noqa: BLE001 - a page without data: reported, not measured
                            skipped[name] = f"{tree}: {str(e).splitlines()[0]}"
                            page.close()
                            continue
                        got.setdefault(name, {}).setdefault("load", {}).setdefault(tree, []).append(
                            {"total": ms, "server": 0.0, "bytes": 0, "requests": 0})
                        for control, act, needs in controls:
                            if page.query_selector(needs) is None:
                                skipped.setdefault(f"{name}/{control}", f"not on this run's page ({needs})")
                                continue
                            try:
                                page.goto(servers[tree].url + path)
                                page.wait_for_selector(ready, timeout=240_000)
                                samples = measure(page, act, args.changes)
                            except Exception as e:  # noqa: BLE001
                                skipped[f"{name}/{control}/{tree}"] = str(e).splitlines()[0]
                                continue
                            got[name].setdefault(control, {}).setdefault(tree, []).extend(samples)
                            s = summarise(samples)
                            print(f"round {rnd}  {name:13s} {control:22s} {tree:4s} median {s['median_ms']:7.0f} ms"
                                  f"  (server {s['server_ms']:.0f}, draw {s['draw_ms']:.0f}, {s['kB']:.0f} kB)",
                                  flush=True)
                        page.close()
            browser.close()
    finally:
        for s in servers.values():
            s.close()
    load1 = os.getloadavg()
    result: dict[str, Any] = {
        "command": "python benchmarks/dashboard_compare.py " + " ".join(sys.argv[1:]),
        "made_by": {"command": "python benchmarks/dashboard_compare.py " + " ".join(sys.argv[1:]),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
                    "machine": f"{os.cpu_count()} CPUs, load average {load0[0]:.1f} before"},
        "what": "milliseconds from a control change to the figure drawn (median over changes), headless Chromium; "
                "server = click to the last callback response, draw = the rest; load = navigation to drawn",
        "targets_ms": TARGETS, "trees": {k: git_commit(v) for k, v in trees.items()},
        "machine": {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load0],
                    "load_after": [round(x, 2) for x in load1],
                    "note": machine_note(load0)},
        "seconds": round(time.time() - started), "rounds": args.rounds, "changes": args.changes, "pages": {},
        "not_measured": skipped,
    }
    print(f"\nload average after: {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f}")
    for name, controls in got.items():
        kind = PAGES[name][2]
        page_out: dict[str, Any] = {"target_ms": TARGETS[kind]}
        for control, by_tree in controls.items():
            row = {tree: summarise(v) for tree, v in by_tree.items()}
            if "base" in row and "head" in row and row["base"].get("median_ms"):
                row["head/base"] = round(row["head"]["median_ms"] / row["base"]["median_ms"], 2)
            if control != "load" and row.get("head", {}).get("median_ms") is not None:
                row["head meets the target"] = row["head"]["median_ms"] <= TARGETS[kind]
            page_out[control] = row
            print(f"{name:13s} {control:22s} " + "  ".join(
                f"{t}: {r['median_ms']:7.0f} ms (server {r['server_ms']:.0f}, draw {r['draw_ms']:.0f}, {r['kB']:.0f} kB)"
                for t, r in row.items() if isinstance(r, dict) and r.get("n")) +
                (f"  head/base {row['head/base']}" if "head/base" in row else ""))
        result["pages"][name] = page_out
    for k, v in skipped.items():
        print(f"not measured: {k}: {v}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
