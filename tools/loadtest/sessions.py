"""The sessions of a load test: each in its own browser context, all pressing Train together (:class:`StartLine`),
each bounded in time and photographed when it does not finish (:func:`run_load`)."""

from __future__ import annotations

import asyncio
import random
import sys
import time

from tests.browser import CHROMIUM, CHROMIUM_FLAGS
from tools.loadtest.machine import nice_browser_session
from tools.loadtest.page import CLOSE_TIMEOUT_S, NO_ANIMATIONS_JS, SCREENSHOTS
from tools.loadtest.plans import SessionPlan, SessionResult, preset_titles, session_plans
from tools.loadtest.student import check_final, configure, solve, train
from tools.message_trace import MessageTrace

SESSION_GRACE_S = 90.0  # beyond --timeout, for the last look, the picture and closing


class StartLine:
    """Where sessions wait until every one is set up (or has given up): then all press Train."""

    def __init__(self, sessions: int):
        self.left = sessions
        self.all_here = asyncio.Event()

    def arrive(self) -> None:
        self.left -= 1
        if self.left <= 0 and not self.all_here.is_set():
            print(
                f"every session is set up: all press Train now ({time.strftime('%H:%M:%S')})",
                file=sys.stderr,
                flush=True,
            )
            self.all_here.set()

    async def wait(self) -> None:
        await self.all_here.wait()


async def screenshot(page, index: int) -> None:
    if SCREENSHOTS is not None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        try:
            await page.screenshot(
                path=str(SCREENSHOTS / f"session-{index:02d}.png"), full_page=True, timeout=CLOSE_TIMEOUT_S * 1000
            )
        except Exception:  # noqa: BLE001 - a picture is a bonus
            pass


async def bounded(awaitable, seconds: float, what: str, result: "SessionResult | None" = None):
    """``awaitable`` within ``seconds``; a hang becomes a note on ``result`` (a browser call that never
    returns must not keep the load test from its summary)."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except Exception as error:  # noqa: BLE001 - closing and photographing are best effort
        if result is not None:
            result.errors.append(f"{what}: {type(error).__name__} after at most {seconds:.0f} s")
        return None


async def run_session(
    browser,
    url: str,
    plan: SessionPlan,
    title: str,
    ready: StartLine | None,
    timeout: float,
    max_retries: int,
    arrive_at: float = 0.0,
    result: SessionResult | None = None,
    solve_after: bool = False,
) -> SessionResult:
    result = result if result is not None else SessionResult(plan)
    context = await browser.new_context(viewport={"width": 1280, "height": 800}, reduced_motion="reduce")
    await context.add_init_script(NO_ANIMATIONS_JS)
    page = await context.new_page()
    page.set_default_timeout(min(120_000, timeout * 1000))  # a loaded 2-core machine is slow to draw
    trace = MessageTrace()  # the tab's last websocket frames, written out when the page reports an error
    page.on("websocket", trace.attach)

    def page_error(error) -> None:
        result.errors.append(f"page error: {error}")
        if SCREENSHOTS is not None:
            trace.write(SCREENSHOTS / f"session-{plan.index:02d}-messages.txt", header=f"page error: {error}")

    page.on("pageerror", page_error)
    deadline = time.monotonic() + timeout
    try:
        await asyncio.sleep(arrive_at)  # students do not all arrive in the same second
        started = time.monotonic()
        result.status = "configuring"
        await configure(page, url, plan, title, result, timeout=max(5.0, deadline - time.monotonic()), trace=trace)
        result.setup_s = time.monotonic() - started
        result.status = "waiting for the others"
        if ready is not None:
            ready.arrive()
            await asyncio.wait_for(ready.wait(), timeout=max(1.0, deadline - time.monotonic()))
        result.status = "training"
        await train(page, plan, result, max(5.0, deadline - time.monotonic()), max_retries, preset_titles())
        if result.status == "finished":
            await check_final(page, plan, title, result)
        if result.status == "finished" and solve_after and not result.crosstalk:
            await solve(page, plan, result, max(30.0, deadline - time.monotonic()))
        if result.status != "finished":
            await screenshot(page, plan.index)
    except Exception as error:  # a session that breaks is a result, not a crash of the load test
        result.errors.append(f"{type(error).__name__}: {str(error)[:500]}")
        await screenshot(page, plan.index)
        if ready is not None and result.status in ("configuring", "not started"):
            ready.arrive()  # do not keep the others waiting for a session that will never be ready
        result.status = result.status if result.status != "finished" else "error"
    finally:
        await bounded(context.close(), CLOSE_TIMEOUT_S, "closing the browser context", result)
    return result


async def watched_session(
    browser,
    url: str,
    plan: SessionPlan,
    title: str,
    ready: StartLine | None,
    timeout: float,
    max_retries: int,
    arrive_at: float,
    result: SessionResult,
    solve_after: bool = False,
) -> None:
    """One session, given up (and said so) past its own time plus a grace for the last look, the
    picture and closing — whatever the browser or the server does meanwhile."""
    limit = arrive_at + timeout + SESSION_GRACE_S
    try:
        await asyncio.wait_for(
            run_session(browser, url, plan, title, ready, timeout, max_retries, arrive_at, result, solve_after), limit
        )
    except asyncio.TimeoutError:
        result.errors.append(f"hung: no verdict within {limit:.0f} s (last: {result.status})")
        result.status = f"hung ({result.status})"
        if ready is not None and not ready.all_here.is_set():
            ready.arrive()


async def run_load(
    url: str,
    sessions: int,
    steps: int,
    timeout: float,
    max_retries: int = 200,
    together: bool = True,
    arrive_over: float | None = None,
    total_timeout: float | None = None,
    results: list[SessionResult] | None = None,
    own_axes: bool = False,
    edits: bool = True,
    solve_after: bool = False,
    browser_nice: int = 0,
) -> list[SessionResult]:
    """All sessions in one Chromium, arriving at random times over ``arrive_over`` seconds (default
    0.5 s per session) and — when ``together`` — pressing Train at the same moment once all are set
    up; returns one result per session, in order. Each session is bounded by ``timeout`` (+ a grace)
    and all of them by ``total_timeout``: a session still going then is reported as hung. Pass
    ``results`` to see them fill in (the caller's watchdog reports them if even this hangs). ``browser_nice``:
    the browsers' session as a whole runs at this niceness (:func:`nice_browser_session`)."""
    from playwright.async_api import async_playwright

    titles = preset_titles()
    plans = session_plans(sessions, steps, own_axes, edits)
    results = results if results is not None else []
    results[:] = [SessionResult(plan) for plan in plans]
    ready = StartLine(sessions) if together else None
    spread = 0.5 * sessions if arrive_over is None else arrive_over
    total_timeout = total_timeout or spread + timeout + 2 * SESSION_GRACE_S
    p = await async_playwright().start()
    try:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        if browser_nice:
            for note in nice_browser_session(browser_nice):
                print(note, flush=True)
        tasks = [
            asyncio.create_task(
                watched_session(
                    browser,
                    url,
                    plan,
                    titles[plan.preset],
                    ready,
                    timeout,
                    max_retries,
                    random.uniform(0, spread),
                    result,
                    solve_after,
                )
            )
            for plan, result in zip(plans, results)
        ]
        _, late = await asyncio.wait(tasks, timeout=total_timeout)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=CLOSE_TIMEOUT_S)
        for task, result in zip(tasks, results):
            if task in late:
                result.errors.append(
                    f"hung: still running when the whole load test's {total_timeout:.0f} s "
                    f"were up (last: {result.status})"
                )
                result.status = f"hung ({result.status})"
        await bounded(browser.close(), CLOSE_TIMEOUT_S, "closing the browser")
    finally:
        await bounded(p.stop(), CLOSE_TIMEOUT_S, "stopping Playwright")
    return results
