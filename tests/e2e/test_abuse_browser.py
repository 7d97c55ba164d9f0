"""Abuse in a real browser (the rest is in tests/app/test_abuse.py, through AppTest): HTML in an axis name is
shown as the characters typed, never rendered or run."""

import time

import pytest

from tests.support import needs_chromium

pytestmark = [pytest.mark.browser, needs_chromium]


def test_html_in_an_axis_name_is_shown_as_text_in_the_browser(server, browser_tab):
    tab = browser_tab
    dialogs = []
    tab.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    tab.goto(server + "train")
    tab.wait_for_selector("text=Press", timeout=60_000)
    for name in ["<img src=x onerror=alert(1)>", "<b>bold</b>", "[x](javascript:alert(1))", "**x**"]:
        box = tab.get_by_label("Name 1", exact=True)
        box.fill(name)
        box.press("Enter")
        # the characters, as typed (waiting for this name's message, not the previous one's)
        alert = tab.locator("[data-testid=stAlertContentError]", has_text=name).first
        alert.wait_for(timeout=30_000)
        assert "is not allowed" in alert.inner_text()
        assert tab.locator("[data-testid=stAlertContainer] :is(img, b, a, script, em)").count() == 0
    time.sleep(0.5)
    assert dialogs == []  # no script ran
    box = tab.get_by_label("Name 1", exact=True)
    box.fill("data")
    box.press("Enter")
    tab.wait_for_selector("text=Press", timeout=30_000)
    tab.wait_for_function("() => !document.body.innerText.includes('is not allowed')", timeout=30_000)
    assert tab.locator("[data-testid=stException]").count() == 0


@pytest.mark.parametrize("mesh", ["5" * 5000, "²x4"])
def test_the_issues_bad_links_open_the_app_with_a_sentence(server, browser_tab, mesh):
    """Issue 49: a share link whose mesh size has 5,000 digits, or is `²x4`, showed a whole-page traceback (with
    the server's file paths); it opens the app, saying what of the link was ignored."""
    tab = browser_tab
    tab.goto(f"{server}?mesh={mesh}&axes=data,model")
    tab.wait_for_selector("text=Shard maps", timeout=60_000)
    tab.locator("[data-testid=stAlertContainer]", has_text="ignored").first.wait_for(timeout=30_000)
    body = tab.locator("body").inner_text()
    assert "mesh=" in body and "Traceback" not in body and "incident" not in body
    assert tab.locator("[data-testid=stException]").count() == 0
