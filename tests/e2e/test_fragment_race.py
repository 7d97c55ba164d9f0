"""A fragment's poll that reaches a busy server just after a full run must not cut that run's end off.

Streamlit 1.67 starts a new ScriptRunner for such a poll and drops what the finished run had still to send
(the stale Train pages of the 40-session load test: no verdict, no "kept" note, "Bad delta path").
`tests/e2e/apps/fragment_race.py` opens that window on purpose; a real browser reads what arrived."""

import pytest

from tests.browser import Server
from tests.support import ROOT

pytestmark = pytest.mark.timeout(240)


def page_text(browser_tab, fixed: bool) -> str:
    env = {"FRAGMENT_RACE_FIX": "1" if fixed else "0", "PYTHONPATH": str(ROOT)}
    with Server(script="tests/e2e/apps/fragment_race.py", extra_env=env) as server:
        browser_tab.goto(server.url)
        browser_tab.wait_for_selector("text=fragment drawn", timeout=60_000)
        # the end of the run arrives at once or never: give a slow machine a few seconds
        try:
            browser_tab.wait_for_selector("text=the end of the full run", timeout=8_000)
        except Exception:  # Playwright's TimeoutError: the run's end was dropped
            pass
        return browser_tab.inner_text("body")


def test_without_the_fix_streamlit_drops_the_end_of_the_run(browser_tab):
    """The race is real in the pinned Streamlit (if this fails, Streamlit fixed it: drop
    app/runtime/fragment_race.py)."""
    assert "the end of the full run" not in page_text(browser_tab, fixed=False)


def test_with_the_fix_the_run_arrives_whole(browser_tab):
    text = page_text(browser_tab, fixed=True)
    assert "fragment drawn" in text and "the end of the full run" in text
