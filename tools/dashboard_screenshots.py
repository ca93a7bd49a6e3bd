"""Screenshots of every dashboard page on a run, for docs/dashboard.md.

    python tools/dashboard_screenshots.py --run /tmp/demo --out docs/img

Serves the run with ``aclarena-diag dashboard`` (127.0.0.1, its own port) and opens each page in
Debian's headless Chromium (/usr/bin/chromium, as the browser tests do), 1280 px wide; the Overview
is shown with a cell of its matrix clicked (the cell detail: prompt, reply, expected answer). Each
page is cut at ``--max-height`` pixels and written as an 8-bit palette PNG
(``docs/img/dashboard-<page>.png``, a few hundred kB each). A page without data is still shot: it
shows what it says instead.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("home:/", "overview:/overview", "tokens:/tokens", "flips:/flips", "vectors:/vectors",
         "displacement:/displacement", "monitor:/monitor", "consolidation:/consolidation", "router:/router")
IDLE = "() => !document.querySelector('[data-dash-is-loading=\"true\"]')"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--port", type=int, default=8797)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--max-height", type=int, default=2400)
    args = ap.parse_args()
    from PIL import Image
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    srv = subprocess.Popen([sys.executable, "-m", "aclarena", "dashboard", "--run", str(args.run), "--port",
                            str(args.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(url + "/", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
            page = browser.new_page(viewport={"width": args.width, "height": 900})
            for entry in PAGES:
                name, path = entry.split(":", 1)
                page.goto(url + path)
                page.wait_for_selector("main h2", timeout=240_000)
                page.wait_for_function(IDLE, timeout=240_000)
                page.wait_for_timeout(1500)  # the last figures' drawing
                page.wait_for_function(IDLE, timeout=240_000)
                if name == "overview" and page.query_selector("#overview-matrix .nsewdrag"):
                    x, y = page.evaluate("""() => {
                        const gd = document.querySelector('#overview-matrix .js-plotly-plot'), fl = gd._fullLayout;
                        const t = gd.data[0], box = gd.querySelector('.nsewdrag').getBoundingClientRect();
                        return [box.left + fl.xaxis.d2p(t.x[0]), box.top + fl.yaxis.d2p(t.y[t.y.length - 1])]; }""")
                    page.mouse.click(x, y)
                    page.wait_for_selector("#overview-items-title", timeout=120_000)
                    page.wait_for_function(IDLE, timeout=240_000)
                    page.wait_for_timeout(500)
                height = min(args.max_height, page.evaluate("document.documentElement.scrollHeight"))
                png = page.screenshot(full_page=True, clip={"x": 0, "y": 0, "width": args.width, "height": height})
                img = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256)
                target = args.out / f"dashboard-{name}.png"
                img.save(target, optimize=True)
                print(f"{target} {img.width}x{img.height} {target.stat().st_size // 1024} kB", flush=True)
            browser.close()
    finally:
        srv.terminate()
        srv.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
