"""End to end: `streamlit run app.py` on 127.0.0.1, driven by Playwright in Debian's Chromium.

Screenshots land in artifacts/screenshots/ for a person to look at.
"""

import time

import pytest

from tests.support import SHOTS, needs_chromium

pytestmark = [pytest.mark.browser, needs_chromium]


def test_a_shared_link_to_a_page_works_on_a_fresh_server(fresh_server, browser_tab):
    # First request to this server: Streamlit must run app.py (navigation, defaults), not the
    # page file on its own — it did, while the pages lived in a folder named `pages/`.
    browser_tab.goto(fresh_server + "communication")
    browser_tab.wait_for_selector("text=Memory per device", timeout=60_000)
    browser_tab.get_by_role("link", name="Compare", exact=True).wait_for(timeout=30_000)
    name = browser_tab.get_by_label("Name 1")
    deadline = time.monotonic() + 30  # under load the sidebar's inputs can fill in after the page
    while name.input_value() != "data" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert name.input_value() == "data"
    browser_tab.screenshot(path=str(SHOTS / "05-communication.png"))
    browser_tab.get_by_role("link", name="Compare", exact=True).click()
    browser_tab.wait_for_selector("text=bytes sent / device / step", timeout=60_000)
    browser_tab.screenshot(path=str(SHOTS / "06-compare.png"))


def test_a_link_with_settings_opens_the_lesson_there(server, browser_tab):
    browser_tab.goto(server + "lesson?mesh=1x8&preset=tp")
    browser_tab.wait_for_selector("text=What changed", timeout=60_000)
    assert browser_tab.get_by_role("combobox", name="Preset").input_value() == "Tensor parallel"
    browser_tab.get_by_text("8 Auto vs Explicit").click()
    browser_tab.wait_for_selector("text=JAX refuses", timeout=30_000)
    browser_tab.screenshot(path=str(SHOTS / "07-lesson-explicit.png"))
    assert "preset=tp" in browser_tab.url and "mesh=1x8" in browser_tab.url


def loss_points(tab) -> int:
    """How many points the loss chart draws right now (read from Plotly's own data)."""
    return tab.evaluate("""() => {
        const plot = [...document.querySelectorAll('.js-plotly-plot')]
            .find(p => p.layout && p.layout.title && String(p.layout.title.text).includes('Training loss'));
        const x = plot && plot.data.length ? plot.data[0].x : null;
        if (!x) return 0;
        if (x.bdata !== undefined) return atob(x.bdata).length / Number(x.dtype.slice(1));
        return x.length;
    }""")


def test_change_preset_train_watch_and_stop(page):
    page.screenshot(path=str(SHOTS / "01-layout-seed.png"))
    # Change the preset to FSDP in the sidebar.
    page.get_by_role("combobox", name="Preset").click()
    page.get_by_role("option", name="FSDP (fully sharded)").click()
    page.wait_for_selector("text=params/w1  P(None, 'data')", timeout=30_000)
    page.screenshot(path=str(SHOTS / "02-layout-fsdp.png"))

    page.get_by_role("link", name="Train", exact=True).click()
    page.wait_for_selector("text=Press", timeout=30_000)
    page.get_by_label("Steps").fill("20000")
    page.get_by_label("Steps").press("Enter")
    time.sleep(0.5)
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train").click()

    counts, deadline = [], time.monotonic() + 60
    while time.monotonic() < deadline and len(set(c for c in counts if c)) < 4:
        counts.append(loss_points(page))
        time.sleep(0.25)
    page.screenshot(path=str(SHOTS / "03-training.png"))
    updates = sorted(set(c for c in counts if c))
    assert len(updates) >= 4, f"the loss chart updated only {updates}"

    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop").click()
    page.wait_for_selector("text=stopped", timeout=30_000)
    # The progress bar says "stopped" a moment before the same poll redraws the chart: let it land.
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=stApp]')"
        ".getAttribute('data-test-script-state').startsWith('running')"
    )
    time.sleep(1)
    stopped_at = loss_points(page)
    assert 0 < stopped_at < 20_000
    time.sleep(1.5)
    assert loss_points(page) == stopped_at  # nothing trains after Stop
    page.screenshot(path=str(SHOTS / "04-stopped.png"))
    # the preset survived the page switch
    assert page.get_by_role("combobox", name="Preset").input_value() == "FSDP (fully sharded)"
