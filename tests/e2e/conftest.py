"""The browser tests' shared parts: a real `streamlit run app.py` on 127.0.0.1 (one for the whole session, and a
fresh one for a test that needs a server nobody has opened yet), one headless Chromium per module with a new
tab (in its own browser context: no cookies or storage from another test) per test, the app's first page
loaded in it. Screenshots land in artifacts/screenshots/ for a person to look at.

One server for every module: each new one costs a Python process importing Streamlit and JAX and compiling
the default layout again; a test that trains leaves no run behind it (its runs end or are stopped), and each
tab is a new Streamlit session with its own settings."""

import pytest

from tests.browser import Server
from tests.support import CHROMIUM, CHROMIUM_FLAGS, SHOTS


def _streamlit(**env):
    """A `streamlit run app.py` on a free loopback port, healthy; its output goes to a log file (a pipe nobody
    reads would fill and stall the server)."""
    return Server(devices=8, extra_env=env)


@pytest.fixture(scope="session")
def server():
    """The tests on this server walk through the Plan and Compare pages without reading what they compile on
    opening (tests/app checks that, and test_browser's fresh server shows Compare's figures): they compile only
    when asked (SHARDING_LAB_PAGE_COMPILES=off; tests/app/test_app.py checks the switch)."""
    with _streamlit(SHARDING_LAB_PAGE_COMPILES="off") as running:
        yield running.url


@pytest.fixture
def fresh_server():
    """A server of this test's own, which no browser has asked anything yet."""
    with _streamlit() as running:
        yield running.url


@pytest.fixture(scope="module")
def chromium():
    """One Chromium per module, closed before the next: Playwright's sync API runs one instance per thread, and
    other modules start their own (tools/loadtest/, tests/e2e/test_scale_out.py) or run asyncio."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_tab(chromium):
    context = chromium.new_context(viewport={"width": 1500, "height": 2400})
    yield context.new_page()
    context.close()


@pytest.fixture
def page(server, browser_tab):
    browser_tab.goto(server)
    browser_tab.wait_for_selector("text=Shard maps", timeout=60_000)
    return browser_tab
