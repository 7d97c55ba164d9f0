"""Reading and driving one tab of the app: its state as the browser shows it (:data:`PAGE_STATE_JS`), the
errors on it, waiting for a condition, typing into a box, choosing a preset; where a session's pictures go."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from tools.loadtest.plans import ROOT, SessionResult

NO_LOSS = "—"
POLL_S = 0.5  # while a run is on (the page itself refreshes every 0.2-2 s)
IDLE_POLL_S = 1.0  # while setting up, queued, or waiting out a "busy"
EVALUATE_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 30.0  # a screenshot or a context/browser close that takes longer is abandoned
SCREENSHOTS: Path | None = ROOT / "artifacts" / "load"  # a session that does not finish is photographed


# Twenty tabs on the server's own two cores: spinners and transitions repainting in every tab would
# take the CPU the server needs. What the test reads (text, widgets) is unchanged.
NO_ANIMATIONS_JS = """document.addEventListener('DOMContentLoaded', () => {
    const style = document.createElement('style');
    style.textContent = '*, *::before, *::after { animation: none !important; transition: none !important; }';
    document.head.appendChild(style);
});"""


# One look at the page: what a student sees, read straight from the DOM.
PAGE_STATE_JS = """() => {
    const app = document.querySelector('[data-testid=stApp]');
    const text = el => (el ? el.innerText.trim() : '');
    const metrics = {};
    document.querySelectorAll('[data-testid=stMetric]').forEach(m => {
        const label = m.querySelector('[data-testid=stMetricLabel]');
        const value = m.querySelector('[data-testid=stMetricValue]');
        if (label && value) metrics[text(label)] = text(value);
    });
    const alerts = [...document.querySelectorAll('[data-testid=stAlertContainer]')].map(a => {
        const content = a.querySelector('[data-testid^=stAlertContent]');
        return {kind: content ? content.dataset.testid.replace('stAlertContent', '').toLowerCase() : '',
                text: text(a)};
    });
    const body = document.body ? document.body.textContent : '';  // no layout forced, unlike innerText
    return {
        script: app ? app.getAttribute('data-test-script-state') : null,
        connection: app ? app.getAttribute('data-test-connection-state') : null,
        metrics,
        progress: [...document.querySelectorAll('[data-testid=stProgress]')].map(text),
        alerts,
        captions: [...document.querySelectorAll('[data-testid=stCaptionContainer]')].map(text),
        headings: [...document.querySelectorAll('h1, h2, h3')].map(text),
        exceptions: document.querySelectorAll('[data-testid=stException]').length,
        traceback: body.includes('Traceback'),
        connectionError: body.includes('Connection error'),
        firstLossAt: window.labFirstLossAt || null,
        server: (() => { const mark = document.querySelector('.st-key-lab_tab input');
                         return mark && mark.value ? mark.value.split('|')[0] : null; })(),
    };
}"""


# When the tab itself first showed a loss (the clock of this machine, in ms). The test reads the page every
# POLL_S, through a browser busy with twenty tabs: its own look can come seconds after the tab changed.
WATCH_FIRST_LOSS_JS = """() => {
    window.labFirstLossAt = null;
    const shown = () => [...document.querySelectorAll('[data-testid=stMetric]')].some(m => {
        const label = m.querySelector('[data-testid=stMetricLabel]');
        const value = m.querySelector('[data-testid=stMetricValue]');
        return label && value && label.textContent.trim() === 'Last loss' && value.textContent.trim() !== '—';
    });
    const observer = new MutationObserver(() => {
        if (shown()) { window.labFirstLossAt = Date.now(); observer.disconnect(); }
    });
    observer.observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def page_errors(state: dict) -> list[str]:
    errors = []
    if state["exceptions"]:
        errors.append(f"{state['exceptions']} exception box(es)")
    if state["traceback"]:
        errors.append("'Traceback' on the page")
    if state["connectionError"]:
        errors.append("Streamlit 'Connection error'")
    errors += [
        f"{a['kind']}: {a['text'][:200]}"
        for a in state["alerts"]
        if a["kind"] == "error" or "failed" in a["text"].lower()
    ]
    return errors


async def read_state(page, result: "SessionResult | None" = None) -> dict:
    """Bounded: a renderer swamped by other tabs must not hang the load test. The server that drew the page
    (the app's own mark) is added to ``result.servers`` when new."""
    state = await asyncio.wait_for(page.evaluate(PAGE_STATE_JS), EVALUATE_TIMEOUT_S)
    if result is not None and state["server"] and state["server"] not in result.servers:
        result.servers.append(state["server"])
    return state


def crashes(state: dict) -> list[str]:
    """What must never show, even for a moment: an exception box or a traceback."""
    return [e for e in page_errors(state) if not e.startswith(("error:", "warning:", "info:", "success:"))]


async def wait_until(
    page, predicate, timeout: float, what: str, seen: list[str] | None = None, result: "SessionResult | None" = None
) -> dict:
    """Poll the page until ``predicate(state)``; raise TimeoutError saying ``what`` after ``timeout``.
    Exception boxes and tracebacks seen meanwhile are added to ``seen``, the servers to ``result``."""
    deadline = time.monotonic() + timeout
    while True:
        state = await read_state(page, result)
        if seen is not None:
            seen += [c for c in crashes(state) if c not in seen]
        if predicate(state):
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout:.0f} s waiting for {what}; page: "
                f"{json.dumps({k: state[k] for k in ('headings', 'captions', 'progress', 'alerts')})[:900]}"
            )
        await asyncio.sleep(IDLE_POLL_S)


async def set_input(page, label: str, value: str, force: bool = False, attempts: int = 5) -> None:
    """Type into an input and commit it (Enter). ``force``: commit another value first, so the
    server gets a fresh change even when the box already shows ``value``."""
    box = page.get_by_label(label, exact=True)
    if force:
        other = (value + "_") if not value.isdigit() else ("2" if value == "1" else "1")
        await box.fill(other)
        await box.press("Enter")
        await asyncio.sleep(0.3)
    for _ in range(attempts):
        if await box.input_value() == value:
            return
        await box.fill(value)
        await box.press("Enter")
        await asyncio.sleep(0.3)
    if await box.input_value() != value:
        raise RuntimeError(f"could not set {label!r} to {value!r}")


async def choose_preset(page, title: str, attempts: int = 5) -> None:
    """Pick the preset as a person would: open the menu, click the option — and if the menu closed
    before the option could be clicked (a rerun from an earlier edit redrew the sidebar), open it
    again, instead of waiting for an option that is no longer on the page."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    combo = page.get_by_role("combobox", name="Preset")
    for _ in range(attempts):
        if await combo.input_value() == title:
            return
        await combo.click()
        try:
            await page.get_by_role("option", name=title, exact=True).click(timeout=15_000)
        except PlaywrightTimeout:
            await page.keyboard.press("Escape")
        await asyncio.sleep(0.3)
    if await combo.input_value() != title:
        raise RuntimeError(f"could not choose preset {title!r}")
