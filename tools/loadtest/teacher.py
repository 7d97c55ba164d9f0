"""The teacher view as the load test reads it: its counts, waited for until they reach what is expected."""

from __future__ import annotations

import asyncio
import time

from tests.browser import CHROMIUM, CHROMIUM_FLAGS
from tools.loadtest.page import EVALUATE_TIMEOUT_S

TEACHER_JS = """() => {
    const metric = [...document.querySelectorAll('[data-testid=stMetric]')].find(m =>
        m.innerText.includes('Sessions open'));
    const table = [...document.querySelectorAll('[data-testid=stTable] table')].find(t =>
        t.innerText.includes('sessions that solved it'));
    const counts = {};
    if (table) table.querySelectorAll('tbody tr').forEach(row => {
        const cells = [...row.querySelectorAll('th, td')].map(c => c.innerText.trim());
        if (cells.length >= 2) counts[cells[0]] = parseInt(cells[cells.length - 1].replace(/,/g, ''), 10);
    });
    const none = document.body.innerText.includes('No challenges yet');
    return {ready: !!metric && (!!table || none), counts,
            open: metric ? metric.querySelector('[data-testid=stMetricValue]').innerText : null};
}"""


async def teacher_view(url: str, token: str, want: dict[str, int] | None = None, timeout: float = 60.0) -> dict:
    """The teacher view's counts (and sessions open) as its page shows them — when ``want`` is given, read again
    until they equal it or ``timeout`` has passed (the page refreshes itself every 5 s)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = await (await browser.new_context(viewport={"width": 1280, "height": 1400})).new_page()
        await page.goto(url.rstrip("/") + f"/teacher?teacher={token}", timeout=120_000)
        deadline = time.monotonic() + timeout
        while True:
            seen = await asyncio.wait_for(page.evaluate(TEACHER_JS), EVALUATE_TIMEOUT_S)
            if seen["ready"] and (want is None or seen["counts"] == want or time.monotonic() > deadline):
                break
            if time.monotonic() > deadline + 60:
                break
            await asyncio.sleep(1.0)
        await browser.close()
    return seen
