"""The first page a visitor opens on a freshly started server: how long until it is there and settled.

    SHARDING_LAB_CACHE_DIR=/tmp/empty python -m tools.first_page     # a fresh server on an empty cache
    SHARDING_LAB_CACHE_DIR=/app/cache python -m tools.first_page     # … on a warmed cache

Starts ``streamlit run app.py`` (as the load test does), waits until it answers its health check, then
opens the app in headless Chromium and prints, from the moment the URL is opened: ``navigation`` — the page
list is drawn; ``settled`` — the Layout page's heading is there and the script has stopped running (every
chart drawn). A benchmark: it measures and prints, it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from tests.browser import CHROMIUM, CHROMIUM_FLAGS, Server
from tools.loadtest.page import PAGE_STATE_JS


async def open_first_page(url: str, timeout: float) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        started = time.monotonic()
        await page.goto(url)
        times: dict = {}
        while time.monotonic() - started < timeout:
            state = await page.evaluate(PAGE_STATE_JS)
            now = time.monotonic() - started
            if "navigation" not in times and await page.locator("[data-testid=stSidebarNav]").count():
                times["navigation"] = now
            if "Sharding layout" in state["headings"] and state["script"] == "notRunning":
                times["settled"] = now
                times["errors"] = state["exceptions"]
                break
            await asyncio.sleep(0.1)
        await browser.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    started = time.monotonic()
    with Server() as server:
        healthy = time.monotonic() - started
        times = asyncio.run(open_first_page(server.url, args.timeout))
    times = {
        "server_healthy_s": round(healthy, 1),
        **{f"{k}_s" if k != "errors" else k: round(v, 1) for k, v in times.items()},
    }
    print(json.dumps(times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
