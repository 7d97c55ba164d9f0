"""One adversarial student among the class (``python -m tools.loadtest --abuse``): fuzzed share links, a model too
big for the server, rapid Train/Stop clicks and two Plan searches (three tabs: two on the same question, one on
another), all while the other sessions train as the load test drives them. What it checks is what it saw: every
page it opened drawn with sentences, no exception box and no traceback; the class's figures are the load test's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import urllib.parse

from tests.browser import CHROMIUM, CHROMIUM_FLAGS
from tools.loadtest.page import NO_ANIMATIONS_JS, crashes, read_state, wait_until

# Links a mischievous student writes by hand: each must open the app with a sentence about what was ignored.
FUZZED_LINKS = [
    {"mesh": "5" * 5000},
    {"mesh": "²x4"},
    {"mesh": "2x4", "axes": "None,True", "preset": "fsdp"},
    {"mesh": "2x4", "axes": "data,replicated"},
    {"mesh": "٣x2", "axes": "data,model"},
    {"steps": "9" * 5000, "lr": "nan", "decay": "-inf"},
    {"dmid": "-5", "hidden": "1e9", "batch": "²"},
    {"focus": "٣", "mb": "NaN", "schedule": "<script>alert(1)</script>"},
    {"preset": "custom", "rules": "embed:" + "x" * 5000 + ",mlp:None"},
    {"model": "transformer", "size": "llama3-70b", "layers": "-1", "seq": "1e400"},
    {"target": "../../etc/passwd", "opt": "eval('1')"},
    {"no_such_setting": "1", "teacher": "guess"},
]
HUGE = {"model": "transformer", "size": "llama3-70b"}  # Llama 3 70B's sizes on the simulated CPU
RAPID_CLICKS = 12


@dataclasses.dataclass
class AbuseResult:
    pages: int = 0  # pages the adversary opened and read once drawn
    crashes: list[str] = dataclasses.field(default_factory=list)  # exception boxes, tracebacks seen
    refused_huge: bool = False  # the 70B run was refused with a sentence
    clicks: int = 0
    searches_shared: bool | None = None  # the two tabs asking the same question followed one search
    queued_seen: bool = False  # the third tab's search waited in the queue with its place shown
    search_s: float | None = None
    errors: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0


def idle(state: dict) -> bool:
    return state["script"] == "notRunning" and state["connection"] == "CONNECTED"


async def opened(page, url: str, result: AbuseResult, timeout: float = 120) -> dict:
    """Open ``url`` and read it once its script has run; what must never show is recorded."""
    await page.goto(url, timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while True:  # a renderer slow to answer (a loaded machine) is asked again, within the page's time
        await asyncio.sleep(0.5)
        try:
            state = await read_state(page)
        except asyncio.TimeoutError:
            state = None
        if state is not None and idle(state):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url[:80]} not drawn within {timeout:.0f} s")
    result.pages += 1
    result.crashes += [f"{url[:100]}: {c}" for c in crashes(state)]
    return state


async def fuzzed_links(page, url: str, result: AbuseResult) -> None:
    for i, query in enumerate(FUZZED_LINKS):
        try:
            await opened(page, url + "?" + urllib.parse.urlencode(query), result, timeout=240)
        except Exception as error:  # noqa: BLE001 - one link's failure is a finding; the next link comes anyway
            result.errors.append(f"link {i} ({str(query)[:60]}): {type(error).__name__}: {str(error)[:200]}")


async def huge_run(page, url: str, result: AbuseResult) -> None:
    state = await opened(page, url + "train?" + urllib.parse.urlencode(HUGE), result)
    refused = [a["text"] for a in state["alerts"] if "Too big to train here" in a["text"]]
    result.refused_huge = bool(refused)
    button = page.get_by_role("button", name="Train", exact=True)
    if await button.is_enabled():
        result.errors.append("the 70B run's Train button was enabled")


async def rapid_clicks(page, url: str, result: AbuseResult) -> None:
    await opened(page, url + "train", result)
    for i in range(RAPID_CLICKS):
        name = "Train" if i % 2 == 0 else "Stop"
        try:
            await page.get_by_role("button", name=name, exact=True).click(timeout=3000)
            result.clicks += 1
        except Exception:  # noqa: BLE001 - a disabled or redrawn button: the next click comes anyway
            pass
        await asyncio.sleep(0.15)
    try:
        await page.get_by_role("button", name="Stop", exact=True).click(timeout=5000)
    except Exception:  # noqa: BLE001 - its run already ended
        pass
    state = await wait_until(page, idle, 120, "the Train page after rapid clicks")
    result.crashes += [f"rapid clicks: {c}" for c in crashes(state)]


async def plan_tab(browser, url: str, result: AbuseResult, batch_tokens: int | None):
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, reduced_motion="reduce")
    await context.add_init_script(NO_ANIMATIONS_JS)
    page = await context.new_page()
    page.set_default_timeout(120_000)
    await opened(page, url + "plan", result, timeout=300)
    if batch_tokens is not None:
        box = page.get_by_label("Batch (tokens)")
        await box.fill(str(batch_tokens))
        await box.press("Enter")
        await asyncio.sleep(1.0)
        await wait_until(page, idle, 300, "the Plan page's new question")
    await page.get_by_role("button", name="Run", exact=True).click()
    return context, page


async def searches(browser, url: str, result: AbuseResult, timeout: float) -> None:
    """Two tabs on the page's question, one on another: one search for the two, the third queued behind it."""
    started = time.monotonic()
    tabs = [await plan_tab(browser, url, result, None), await plan_tab(browser, url, result, None)]
    tabs.append(await plan_tab(browser, url, result, 4096))
    try:
        deadline = time.monotonic() + timeout
        shared = False
        while time.monotonic() < deadline:
            states = [await read_state(page) for _, page in tabs]
            for state in states:
                result.crashes += [f"Plan: {c}" for c in crashes(state) if f"Plan: {c}" not in result.crashes]
            shared = shared or any("Another tab asked the same question" in c for c in states[1]["captions"])
            result.queued_seen = result.queued_seen or any("Queued:" in p for p in states[2]["progress"])
            if all(not s["progress"] and idle(s) for s in states):
                break
            await asyncio.sleep(2.0)
        result.searches_shared = shared
        result.search_s = time.monotonic() - started
    finally:
        for context, _ in tabs:
            await context.close()


async def adversary(url: str, timeout: float = 900) -> AbuseResult:
    """The adversarial session, in a Chromium of its own."""
    from playwright.async_api import async_playwright

    result = AbuseResult()
    started = time.monotonic()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900}, reduced_motion="reduce")
            await context.add_init_script(NO_ANIMATIONS_JS)
            page = await context.new_page()
            page.set_default_timeout(120_000)
            for step in (fuzzed_links, huge_run, rapid_clicks):
                try:
                    await step(page, url, result)
                except Exception as error:  # noqa: BLE001 - a step that breaks is a finding, not the end
                    result.errors.append(f"{step.__name__}: {type(error).__name__}: {str(error)[:300]}")
            await context.close()
            try:
                await searches(browser, url, result, timeout)
            except Exception as error:  # noqa: BLE001
                result.errors.append(f"searches: {type(error).__name__}: {str(error)[:300]}")
        finally:
            await browser.close()
    result.seconds = time.monotonic() - started
    return result


def abuse_report(result: AbuseResult) -> str:
    return (
        f"adversary: {result.pages} pages opened, {len(result.crashes)} crash(es) seen, 70B run refused="
        f"{result.refused_huge}, {result.clicks} rapid clicks, same-question searches shared={result.searches_shared}, "
        f"queue place seen={result.queued_seen}, searches {result.search_s or 0:.0f} s, {result.seconds:.0f} s in all"
        + "".join(f"\n  crash: {c}" for c in result.crashes)
        + "".join(f"\n  error: {e}" for e in result.errors)
    )
