"""The README's picture: the Tokens page on the demo's run (seq-search against seq-math, a token pinned).

    aclarena-diag demo --out runs/demo && python docs/img/tokens_page_screenshot.py

Serves `runs/demo` on 127.0.0.1, opens the page in Debian's headless Chromium (as the browser tests
do), pins the second most-drifted sequence's largest-KL token and writes docs/img/tokens-page.png.
"""
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, "tests")
from browser_helpers import wait_for_dash
from playwright.sync_api import sync_playwright

port = 8791
srv = subprocess.Popen([sys.executable, "-m", "aclarena", "dashboard", "--run", "runs/demo", "--port", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            break
        except OSError:
            time.sleep(0.5)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"], headless=True)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/tokens?checkpoint=seq-search")
        wait_for_dash(page, 60_000)
        time.sleep(2)
        try:
            page.locator("#tokens-rank tbody tr").nth(1).locator("td").first.click()
            page.wait_for_selector("#tokens-text span.tok.pinned", timeout=20_000)
            wait_for_dash(page, 60_000)
        except Exception as e:  # noqa: BLE001 - the picture is still worth taking
            print("no token pinned:", e)
        time.sleep(1)
        page.screenshot(path="docs/img/tokens-page.png", full_page=True)
        b.close()
finally:
    srv.terminate()
