"""A two-process run started from the Train page, in a real browser (Playwright + Debian's Chromium)."""

import time

import psutil
import pytest

from tests.support import SHOTS, needs_chromium, poll


def workers_left() -> list[psutil.Process]:
    """Worker processes still alive below this test process (the server's children included)."""
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.is_running()
        and p.status() != psutil.STATUS_ZOMBIE
        and "sharding_lab.distributed.worker" in " ".join(p.cmdline())
    ]


@pytest.mark.browser
@needs_chromium
def test_browser_trains_with_two_processes(server, browser_tab):  # noqa: F811
    tab = browser_tab
    tab.goto(server + "train")
    tab.wait_for_selector("text=Press", timeout=60_000)
    tab.get_by_role("combobox", name="Processes").click()
    tab.get_by_role("option", name="2", exact=True).click()
    tab.wait_for_selector("text=2 JAX processes", timeout=30_000)
    tab.get_by_label("Steps").fill("500")
    tab.get_by_label("Steps").press("Enter")
    time.sleep(0.5)
    tab.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train").click()
    tab.wait_for_selector("text=across 2 processes", timeout=90_000)
    tab.wait_for_selector("text=Shard map of", timeout=30_000)
    expected = {d: d // 4 for d in range(8)}
    owners = poll(
        lambda: {
            int(d): p
            for d, p in tab.evaluate("""() => {
        const plots = [...document.querySelectorAll('.js-plotly-plot')];
        const out = {};
        for (const p of plots) for (const t of (p.data || []))
            if (t.meta && t.meta.process !== undefined) out[t.meta.device] = t.meta.process;
        return out;
    }""").items()
        },
        expected,
    )  # the charts draw a moment after the text
    tab.screenshot(path=str(SHOTS / "08-two-processes.png"), full_page=True)
    assert owners == expected
    assert not workers_left()
