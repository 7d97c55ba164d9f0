#!/usr/bin/env python
"""Load test: N students at once against ONE `streamlit run app.py` on 127.0.0.1 — or, with ``--url``, a
server already running, such as the load balancer in front of several replicas (deploy/compose.yaml).

Each session is its own browser context (own cookies, own Streamlit session) in one headless
Chromium. Session i picks its own configuration in the sidebar — a preset and a mesh shape no other
session has (a class's default axis names ``data``/``model``; ``--own-axes``: names ``d<i>``/``m<i>``
that no other session uses) — opens the Train page, sets its own step count,
waits for every session to be ready (the teacher says "now press Train"), clicks **Train** and
watches until "layout verified on N devices". More clicks than ``SHARDING_LAB_MAX_JOBS`` wait in
the server's queue (the time there is recorded); a "The server is busy" answer (the queue is full)
is retried after a short wait, a bounded number of times, and counts as success once a run is
accepted. Half the sessions edit while their run trains, as students do (``--no-edits``: none):
session i with i mod 4 = 1 changes the learning rate, i mod 4 = 3 the preset, once the first loss shows
(or, when the run was over before its page showed a loss — 1-2 s on a warm cache — right after its verdict);
the run must go on with what it started with, the page must say so, and the final check expects the
edited settings in the sidebar and the run's own steps and devices in the progress and the verdict.

Recorded per session: time from the first Train click to the first loss point ("Last loss" no
longer "—"), the same from the accepted click, the same as the tab's own page changed (a MutationObserver's
clock: the test's look at twenty busy tabs comes 0.2-2 s later), time to finish, busy retries, errors (an exception
box, "Traceback", an error alert such as "Training failed") and cross-talk (the page must show this
session's own mesh, preset, step count and device count — on the Train page caption, the progress
bar, the verdict, and the sidebar widgets at the end). The server's peak RSS (itself and its
children, sampled every 0.2 s) is reported with the table. Also, from the app's hidden tab mark, the server
that drew each of the session's pages: a session seen on two servers (its load balancer was not sticky) fails
the run. ``--solve``: after its run, three sessions in four solve a challenge; ``--teacher-token``: the
teacher view is read before and after, and its counts must have grown by exactly what the sessions solved.

    .venv/bin/python -m tools.loadtest --sessions 20 --steps 300
    .venv/bin/python -m tools.loadtest --sessions 8 --max-jobs 2 --json artifacts/load.json
    .venv/bin/python -m tools.loadtest --url http://127.0.0.1:8501/ --sessions 5   # a server already running
    .venv/bin/python -m tools.loadtest --url http://127.0.0.1:8080/ --sessions 40 --steps 100 --solve \
        --teacher-token "$SHARDING_LAB_TEACHER_TOKEN"                            # replicas behind nginx

Exit status 0 when every session finished with no error, no cross-talk and no change of server, and the
teacher's counts (when read) were exact; 1 otherwise. A session that does not finish is photographed, and one
whose page reported an error also leaves its tab's last websocket messages, decoded
(:mod:`tools.message_trace`), beside the picture in ``artifacts/load/``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from tools.message_trace import MessageTrace

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PRESETS = ["seed", "replicated", "dp", "fsdp", "tp", "fsdp_tp"]
MESHES = [(2, 4), (4, 2), (1, 8), (8, 1), (2, 2), (4, 1), (1, 4), (2, 1)]
NO_LOSS = "—"
POLL_S = 0.5  # while a run is on (the page itself refreshes every 0.2-2 s)
IDLE_POLL_S = 1.0  # while setting up, queued, or waiting out a "busy"
BUSY_RETRY_S = (2.0, 4.0)  # a student tries Train again after a few seconds
EVALUATE_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 30.0  # a screenshot or a context/browser close that takes longer is abandoned
SESSION_GRACE_S = 90.0  # beyond --timeout, for the last look, the picture and closing
SCREENSHOTS: Path | None = ROOT / "artifacts" / "load"  # a session that does not finish is photographed


def preset_titles() -> dict[str, str]:
    """The preset names as the Preset combobox shows them (the app's own titles)."""
    sys.path.insert(0, str(ROOT))
    from sharding_lab.sharding.rules import PRESETS as APP_PRESETS

    return {name: preset.title for name, preset in APP_PRESETS.items()}


@dataclasses.dataclass
class SessionPlan:
    index: int
    preset: str
    shape: tuple[int, int]
    axes: tuple[str, str]
    steps: int
    edit: str | None = None  # "lr" or "preset": changed while the run trains
    edit_to: str = ""  # the new learning rate (as the box shows it) or preset name

    @property
    def label(self) -> str:  # as MeshSpec.label() prints it
        return "×".join(map(str, self.shape)) + " (" + ", ".join(self.axes) + ")"

    @property
    def devices(self) -> int:
        return self.shape[0] * self.shape[1]


EDIT_LR = "0.0200"  # the Learning rate box's format (%.4f); the default is 0.0100


def session_plans(sessions: int, steps: int, own_axes: bool = False, edits: bool = True) -> list[SessionPlan]:
    """Session i: preset i mod 6, mesh i mod 8 (distinct pairs up to 24), its own steps; axis names
    ``data``/``model`` as a class leaves them (``own_axes``: ``d<i>``/``m<i>``); with ``edits``, i mod 4 = 1
    changes the learning rate and i mod 4 = 3 the preset (to the next one) while its run trains."""
    plans = []
    for i in range(sessions):
        preset = PRESETS[i % len(PRESETS)]
        edit, edit_to = {1: ("lr", EDIT_LR), 3: ("preset", PRESETS[(i + 1) % len(PRESETS)])}.get(i % 4, (None, ""))
        plans.append(
            SessionPlan(
                i,
                preset,
                MESHES[i % len(MESHES)],
                (f"d{i}", f"m{i}") if own_axes else ("data", "model"),
                steps + 10 * i,
                *((edit, edit_to) if edits else (None, "")),
            )
        )
    return plans


@dataclasses.dataclass
class SessionResult:
    plan: SessionPlan
    status: str = "not started"  # "finished" when it all went well
    busy_retries: int = 0
    first_loss_s: float | None = None  # from the first Train click
    first_loss_accepted_s: float | None = None  # from the click the server accepted
    first_loss_shown_s: float | None = None  # from the first Train click to the moment the tab's page changed to it
    finish_s: float | None = None  # from the first Train click to "layout verified"
    queued_s: float | None = None  # time in the server's queue (None: it never waited there)
    setup_s: float | None = None
    reapplied: int = 0  # sidebar edits typed again because the server never showed them
    lost_edits: list[str] = dataclasses.field(default_factory=list)
    edited_s: float | None = None  # when the mid-run edit was made (from the first Train click)
    edit_noted: bool = False  # the page said the run keeps what it started with
    edited_after: bool = False  # the run was over before a loss showed: the edit came after it
    errors: list[str] = dataclasses.field(default_factory=list)
    crosstalk: list[str] = dataclasses.field(default_factory=list)
    servers: list[str] = dataclasses.field(default_factory=list)  # every server that drew this session's page
    solved: str | None = None  # the challenge this session solved (--solve), as its page said

    @property
    def ok(self) -> bool:
        return self.status == "finished" and not self.errors and not self.crosstalk


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


def own_caption(plan: SessionPlan, preset: str | None = None):
    prefix = f"{plan.label} · preset {preset or plan.preset} · "
    return lambda state: any(c.startswith(prefix) for c in state["captions"])


def final_preset(plan: SessionPlan, edited: bool = True) -> str:
    """The preset the sidebar shows at the end: the edited one for a session that changed it."""
    return plan.edit_to if plan.edit == "preset" and edited else plan.preset


async def edit_while_training(page, plan: SessionPlan, titles: dict[str, str]) -> None:
    """The student's edit during the run: a full rerun of the page while the run trains."""
    if plan.edit == "lr":
        await set_input(page, "Learning rate", plan.edit_to)
    elif plan.edit == "preset":
        await choose_preset(page, titles[plan.edit_to])


async def configure(
    page,
    url: str,
    plan: SessionPlan,
    title: str,
    result: "SessionResult",
    timeout: float,
    attempts: int = 4,
    trace: MessageTrace | None = None,
) -> None:
    """Open the app (Layout page), follow the link to Train, set this session's preset, mesh and
    axis names in the sidebar and its steps; done when the Train page's caption (drawn by the
    server) shows this session's mesh and preset. An edit the server never saw is typed again
    (counted in ``result.reapplied``)."""
    deadline = time.monotonic() + timeout
    seen = result.errors
    await page.goto(url, timeout=timeout * 1000)
    await wait_until(page, lambda s: "Sharding layout" in s["headings"], timeout, "the Layout page", seen, result)
    await page.get_by_role("link", name="Train", exact=True).click()
    await wait_until(
        page,
        lambda s: "Train" in s["headings"] and any(a["text"].startswith("Press Train") for a in s["alerts"]),
        deadline - time.monotonic(),
        "the Train page",
        seen,
        result,
    )
    for attempt in range(attempts):
        if plan.preset != "seed":
            await choose_preset(page, title)
        force = attempt > 0
        await set_input(page, "Size 1", str(plan.shape[0]), force)
        await set_input(page, "Size 2", str(plan.shape[1]), force)
        await set_input(page, "Name 1", plan.axes[0], force)
        await set_input(page, "Name 2", plan.axes[1], force)
        try:
            await wait_until(
                page,
                own_caption(plan),
                min(60.0, max(1.0, deadline - time.monotonic())),
                f"the Train page caption to show {plan.label} · preset {plan.preset}",
                seen,
                result,
            )
            break
        except TimeoutError:
            if attempt == attempts - 1 or time.monotonic() > deadline:
                raise
            result.reapplied += 1
            state = await read_state(page, result)
            boxes = {
                label: await page.get_by_label(label, exact=True).input_value()
                for label in ("Size 1", "Size 2", "Name 1", "Name 2")
            }
            drawn = [c for c in state["captions"] if " · preset " in c][:1]
            result.lost_edits.append(f"sidebar shows {boxes}, server drew {drawn}")
            if trace is not None and SCREENSHOTS is not None:  # what the tab and the server said, for the cause
                trace.write(
                    SCREENSHOTS / f"session-{plan.index:02d}-retyped-{attempt + 1}-messages.txt",
                    header=f"retyped: {result.lost_edits[-1]}",
                )
    await set_input(page, "Steps", str(plan.steps))


async def train(
    page,
    plan: SessionPlan,
    result: SessionResult,
    timeout: float,
    max_retries: int,
    titles: dict[str, str] | None = None,
) -> None:
    """Click Train (again while the server is busy); watch until the run's verdict — making the
    session's edit, if it has one, once the first loss shows."""
    train_button = page.get_by_role("button", name="Train", exact=True)
    deadline = time.monotonic() + timeout
    await asyncio.wait_for(page.evaluate(WATCH_FIRST_LOSS_JS), EVALUATE_TIMEOUT_S)
    first_click = clicked = time.monotonic()
    first_click_wall = time.time()
    await train_button.click()
    accepted_at = None
    saw_run = False
    while time.monotonic() < deadline:
        state = await read_state(page, result)
        now = time.monotonic()
        errors = page_errors(state)
        if errors:
            result.errors += errors
            result.status = "error"
            return
        saw_run = saw_run or state["script"] != "notRunning"
        if state["progress"]:
            if accepted_at is None:
                accepted_at = clicked
            waiting = state["progress"][0].startswith("queued")
            if waiting and result.queued_s is None:
                result.queued_s = 0.0
            elif not waiting and result.queued_s == 0.0:
                result.queued_s = now - accepted_at
            if result.first_loss_s is None and state["metrics"].get("Last loss", NO_LOSS) != NO_LOSS:
                result.first_loss_s = now - first_click
                result.first_loss_accepted_s = now - accepted_at
                if state["firstLossAt"]:
                    result.first_loss_shown_s = state["firstLossAt"] / 1000 - first_click_wall
            if plan.edit and result.first_loss_s is not None and result.edited_s is None:
                result.edited_s = now - first_click
                await edit_while_training(page, plan, titles or {})
                continue
            result.edit_noted = result.edit_noted or any(
                c.startswith("This run trains what it started with") for c in state["captions"]
            )
            verdict = [a["text"] for a in state["alerts"] if "layout verified on" in a["text"]]
            if state["progress"][0].startswith("stopped") and state["script"] == "notRunning":
                # the server stopped the run (nobody seemed to watch it, its time limit): say why, now
                why = [a["text"][:200] for a in state["alerts"] if a["kind"] == "info"]
                result.errors.append(f"the run was stopped: {state['progress'][0]}; {why[:1]}")
                result.status = "stopped by the server"
                return
            if verdict and state["script"] == "notRunning":
                if plan.edit and result.edited_s is None:
                    # the run was over before its page showed a loss (a warm cache: 1-2 s): the student
                    # edits now, and the page must say the same — the run kept what it started with
                    result.finish_s = now - first_click
                    result.edited_s, result.edited_after = now - first_click, True
                    await edit_while_training(page, plan, titles or {})
                    continue
                if result.edited_s is not None and not result.edit_noted and now - first_click - result.edited_s < 15:
                    # the edit's rerun may not have reached this page yet (a busy server: seconds); a student
                    # would look again — a page still without the note 15 s after the edit is stale
                    await asyncio.sleep(POLL_S)
                    continue
                result.finish_s = result.finish_s or now - first_click
                result.status = "finished"
                return
        elif (
            any("server is busy" in a["text"] for a in state["alerts"])
            and state["script"] == "notRunning"
            and (saw_run or now - clicked > 3)
            and now - clicked > 0.3
        ):
            if result.busy_retries >= max_retries:
                result.status = f"still busy after {max_retries} retries"
                return
            result.busy_retries += 1
            await asyncio.sleep(random.uniform(*BUSY_RETRY_S))
            clicked, saw_run = time.monotonic(), False
            await train_button.click()
            continue
        await asyncio.sleep(POLL_S if accepted_at is not None else IDLE_POLL_S)
    result.status = "timed out" + (" (never accepted)" if accepted_at is None else "")


async def check_final(page, plan: SessionPlan, title: str, result: SessionResult) -> None:
    """Cross-talk: everything on this page must be this session's own configuration and run."""
    state = await read_state(page, result)
    edited = bool(plan.edit) and result.edited_s is not None  # a run can finish before its first loss shows
    if not own_caption(plan, final_preset(plan, edited))(state):
        result.crosstalk.append(f"caption {state['captions'][:2]}")
    if plan.edit and not edited:
        result.errors.append(f"the {plan.edit} edit was never made")
    elif plan.edit:
        kept = {"lr": "learning rate 0.01", "preset": f"rules preset {plan.preset}"}[plan.edit]
        note = [c for c in state["captions"] if c.startswith("This run trains what it started with")]
        if not note or kept not in note[0]:
            result.crosstalk.append(
                f"after the {plan.edit} edit the page does not say the run kept {kept!r}: {note[:1]}"
            )
    want = f"finished — step {plan.steps:,} / {plan.steps:,}"
    if state["progress"] != [want]:
        result.crosstalk.append(f"progress {state['progress']} (want {want!r})")
    verified = f"layout verified on {plan.devices} devices"
    if not any(verified in a["text"] for a in state["alerts"]):
        result.crosstalk.append(f"verdict {[a['text'][:80] for a in state['alerts']]} (want {verified!r})")
    widgets = {
        "Size 1": str(plan.shape[0]),
        "Size 2": str(plan.shape[1]),
        "Name 1": plan.axes[0],
        "Name 2": plan.axes[1],
        "Steps": str(plan.steps),
    }
    if plan.edit == "lr" and edited:
        widgets["Learning rate"] = plan.edit_to
    for label, value in widgets.items():
        seen = await page.get_by_label(label, exact=True).input_value()
        if seen != value:
            result.crosstalk.append(f"{label}={seen!r} (want {value!r})")
    seen = await page.get_by_role("combobox", name="Preset").input_value()
    want_title = preset_titles()[plan.edit_to] if plan.edit == "preset" and edited else title
    if seen != want_title:
        result.crosstalk.append(f"Preset={seen!r} (want {want_title!r})")
    result.errors += page_errors(state)


SOLVABLE = ("eighth", "no-fallback", "explicit")  # checked on the plan: no compile, about a second each


def challenge_for(plan: SessionPlan) -> str | None:
    """With --solve: three sessions in four solve a challenge (i mod 4 = 2 does not), so that a teacher view counting
    every session, or none, is caught."""
    return None if plan.index % 4 == 2 else SOLVABLE[plan.index % len(SOLVABLE)]


async def solve(page, plan: SessionPlan, result: SessionResult, timeout: float) -> None:
    """After its run, the student opens Challenges, asks for a solution and checks it: solved, says the page."""
    challenge = challenge_for(plan)
    if challenge is None:
        return
    result.status = "solving"
    await page.get_by_role("link", name="Challenges", exact=True).click()
    await wait_until(
        page,
        lambda s: "Challenges" in s["headings"] and any(p.startswith("Solved 0 of") for p in s["progress"]),
        timeout,
        "the Challenges page",
        result.errors,
        result,
    )
    box = page.locator(f".st-key-challenge_{challenge}")
    await box.get_by_role("button", name="Show me a solution").click()
    await wait_until(
        page,
        lambda s: any("The sidebar now holds" in a["text"] for a in s["alerts"]),
        timeout,
        f"the solution of {challenge} in the sidebar",
        result.errors,
        result,
    )
    await box.get_by_role("button", name="Check").click()
    await wait_until(
        page,
        lambda s: any(p.startswith("Solved 1 of") for p in s["progress"]),
        timeout,
        f"{challenge} solved",
        result.errors,
        result,
    )
    result.solved = challenge
    result.status = "finished"


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


def nice_browser_session(nice: int) -> list[str]:
    """Lower the CPU share of the Chromium this process started; what could not be done, as notes.

    Niceness alone does not do it. Playwright starts Chromium in a session of its own (``setsid``), and with
    Linux's autogroup scheduling (on by default: ``/proc/sys/kernel/sched_autogroup_enabled``) the CPU is
    shared between sessions first and by niceness only inside one: twenty tabs at nice 19 still took half of
    the two cores from a server in another session (measured on 2026-12-06: the browsers' autogroup at nice 0
    while their processes were at 19). A session's share is set by its autogroup's niceness,
    ``/proc/<pid>/autogroup`` (raising it needs no privilege)."""
    import psutil

    browser_sessions = {}  # session id → one of its Chromium processes
    for child in psutil.Process().children(recursive=True):
        try:
            if "chrom" in child.name():
                browser_sessions[os.getsid(child.pid)] = child.pid
        except (psutil.Error, OSError):  # ended since the listing
            continue
    notes = []
    for sid, pid in browser_sessions.items():
        if sid == os.getsid(0) or not os.path.exists(f"/proc/{pid}/autogroup"):
            continue  # the same session as this process, or no autogroups: niceness alone counts
        try:
            with open(f"/proc/{pid}/autogroup", "w") as group:
                group.write(str(nice))
        except OSError as error:
            notes.append(f"note: the browsers' session keeps its CPU share ({error}); they compete with the server")
    if not browser_sessions:
        notes.append("note: no Chromium process found under this one; its CPU share is unchanged")
    return notes


class RssSampler:
    """Peak resident memory of a process and its children, sampled in a thread."""

    def __init__(self, pid: int, interval: float = 0.2):
        import psutil

        self.process = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        import psutil

        total = 0
        for proc in [self.process, *self.process.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self._sample())
            except Exception:
                return
            self._stop.wait(self.interval)

    def __enter__(self):
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`streamlit run app.py` on 127.0.0.1 only (a free port), output to a log file."""

    def __init__(
        self,
        max_jobs: int | None = None,
        devices: int = 8,
        extra_env: dict | None = None,
        script: str = "app.py",
        own_session: bool = False,
    ):
        """``own_session``: the server runs in a session of its own (``setsid``), so that Linux's autogroup
        scheduling gives it its own share of the cores — as a server on its own machine has — rather than
        one shared with the process that started it (the load test, which must not be what it measures)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = dict(os.environ, SHARDING_LAB_DEVICES=str(devices), **(extra_env or {}))
        if max_jobs is not None:
            env["SHARDING_LAB_MAX_JOBS"] = str(max_jobs)
        self.log = tempfile.NamedTemporaryFile("w+", prefix="sharding-lab-load-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                script,
                "--server.headless=true",
                f"--server.port={self.port}",
                "--server.address=127.0.0.1",
                "--browser.gatherUsageStats=false",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if urllib.request.urlopen(self.url + "_stcore/health", timeout=2).read() == b"ok":
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("streamlit did not start: " + self.output()[-2000:])

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()

    def __enter__(self):
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()


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


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def server_exceptions(log: str) -> list[str]:
    """The last line of every traceback in the server's log (Streamlit prints them boxed, coloured)."""
    lines = [ANSI.sub("", line).strip() for line in log.splitlines()]
    found, inside = [], False
    for line in lines:
        if "Traceback" in line:
            inside = True
        elif inside and re.match(r"^[A-Za-z_.]+(Error|Exception|Exit|Interrupt)\b", line):
            found.append(line[:300])
            inside = False
    return found


def summarize(results: list[SessionResult], peak_rss: int | None, wall: float, server_log: str | None = None) -> dict:
    first = [r.first_loss_s for r in results if r.first_loss_s is not None]
    accepted = [r.first_loss_accepted_s for r in results if r.first_loss_accepted_s is not None]
    shown = [r.first_loss_shown_s for r in results if r.first_loss_shown_s is not None]
    finish = [r.finish_s for r in results if r.finish_s is not None]
    return {
        "sessions": len(results),
        "ok": sum(r.ok for r in results),
        "median_first_loss_s": statistics.median(first) if first else None,
        "max_first_loss_s": max(first) if first else None,
        "median_first_loss_shown_s": statistics.median(shown) if shown else None,
        "median_first_loss_after_accept_s": statistics.median(accepted) if accepted else None,
        "max_first_loss_after_accept_s": max(accepted) if accepted else None,
        "max_finish_s": max(finish) if finish else None,
        "peak_rss_mb": round(peak_rss / 2**20) if peak_rss else None,
        "errors": sum(len(r.errors) for r in results),
        "crosstalk": sum(len(r.crosstalk) for r in results),
        "busy_retries": sum(r.busy_retries for r in results),
        "queued": sum(r.queued_s is not None for r in results),
        "max_queued_s": max((r.queued_s for r in results if r.queued_s is not None), default=None),
        "reapplied": sum(r.reapplied for r in results),
        "edits": sum(r.edited_s is not None for r in results),
        "edits_noted": sum(r.edit_noted for r in results),
        "edits_after": sum(r.edited_after for r in results),
        "server_exceptions": server_exceptions(server_log) if server_log is not None else None,
        "wall_s": wall,
        # which server drew each session (the app's own mark), and sessions that saw more than one
        "servers": dict(sorted(collections.Counter(r.servers[0] for r in results if r.servers).items())),
        "moved": sum(len(r.servers) > 1 for r in results),
        "solved": dict(sorted(collections.Counter(r.solved for r in results if r.solved).items())),
    }


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report(results: list[SessionResult], summary: dict) -> str:
    lines = [
        f"{'#':>3} {'preset':<10} {'mesh':<16} {'steps':>5} {'setup s':>7} {'busy':>4} "
        f"{'queued s':>8} {'1st loss s':>10} {'(accepted)':>10} {'finish s':>8} {'retyped':>7}  status / problems"
    ]
    for r in results:
        problems = "; ".join(r.errors + [f"cross-talk: {c}" for c in r.crosstalk])
        lines.append(
            f"{r.plan.index:>3} {r.plan.preset:<10} {r.plan.label:<16} {r.plan.steps:>5} "
            f"{fmt(r.setup_s):>7} {r.busy_retries:>4} {fmt(r.queued_s):>8} {fmt(r.first_loss_s):>10} "
            f"{fmt(r.first_loss_accepted_s):>10} {fmt(r.finish_s):>8} {r.reapplied:>7}  {r.status}"
            + (f" — {problems}" if problems else "")
        )
    s = summary
    lines.append(
        f"SUMMARY sessions={s['sessions']} ok={s['ok']} "
        f"first_loss median={fmt(s['median_first_loss_s'])}s max={fmt(s['max_first_loss_s'])}s "
        f"(after accepted click: median={fmt(s['median_first_loss_after_accept_s'])}s "
        f"max={fmt(s['max_first_loss_after_accept_s'])}s; as the tabs' pages changed: "
        f"median={fmt(s['median_first_loss_shown_s'])}s) "
        f"max_finish={fmt(s['max_finish_s'])}s peak_rss={s['peak_rss_mb']}MB errors={s['errors']} "
        f"crosstalk={s['crosstalk']} busy_retries={s['busy_retries']} queued={s['queued']} "
        f"(max {fmt(s['max_queued_s'])}s) retyped={s['reapplied']} "
        f"edits={s['edits']} (after the run: {s['edits_after']}; noted on the page: {s['edits_noted']}) "
        f"server_exceptions={len(s['server_exceptions']) if s['server_exceptions'] is not None else '-'} "
        f"wall={s['wall_s']:.1f}s"
    )
    lines.append(
        f"SERVERS sessions per server={s['servers']} sessions that changed server={s['moved']} "
        f"solved by the sessions={s['solved']}"
    )
    if s.get("teacher"):
        t = s["teacher"]
        lines.append(
            f"TEACHER counts before={t['before']} after={t['after']} expected={t['expected']} "
            f"exact={t['exact']} sessions_open={t['open']}"
        )
    lines += [f"  server: {e}" for e in (s["server_exceptions"] or [])]
    lines += [f"  session {r.plan.index} retyped: {note}" for r in results for note in r.lost_edits]
    return "\n".join(lines)


def last_resort(results: list[SessionResult], started: float) -> None:
    """The load test itself hung past every bound: report the sessions as they stand and exit 2."""
    for result in results:
        if result.status != "finished":
            result.errors.append(f"load test hung (last: {result.status})")
    print(report(results, summarize(results, None, time.monotonic() - started)), flush=True)
    os._exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=300, help="steps for session 0; session i runs steps + 10·i")
    parser.add_argument(
        "--max-jobs",
        type=int,
        default=None,
        help="SHARDING_LAB_MAX_JOBS for the server started here (default: the app's, 4)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per session, all included")
    parser.add_argument(
        "--total-timeout",
        type=float,
        default=None,
        help="seconds for all sessions together (default: arrival spread + timeout + 180): "
        "sessions still going then are reported as hung",
    )
    parser.add_argument("--max-retries", type=int, default=300, help="busy retries per session")
    parser.add_argument(
        "--arrive-over",
        type=float,
        default=None,
        help="students arrive at random over this many seconds (default: 0.5 s per session)",
    )
    parser.add_argument(
        "--staggered", action="store_true", help="click Train as soon as each session is set up (default: all at once)"
    )
    parser.add_argument(
        "--own-axes",
        action="store_true",
        help="each session names its axes d<i>/m<i> (no two programs alike: nothing a warm-up compiled can serve them)",
    )
    parser.add_argument("--no-edits", action="store_true", help="no session edits while its run trains")
    parser.add_argument(
        "--url",
        help="use this running server (its RSS is not measured) instead of starting one; "
        "or a load balancer in front of several",
    )
    parser.add_argument(
        "--solve",
        action="store_true",
        help="after its run, three sessions in four solve a challenge (checked on the plan)",
    )
    parser.add_argument(
        "--teacher-token",
        help="the server's SHARDING_LAB_TEACHER_TOKEN: read the teacher view "
        "before and after, and check its counts grew by exactly what the sessions solved",
    )
    parser.add_argument(
        "--browser-nice",
        type=int,
        default=19,
        choices=range(20),
        metavar="0-19",
        help="run this harness and the processes it starts at this niceness (default 19: the harness is not part "
        "of the server; its Chromium runs in a session of its own, whose share is --browser-session-nice)",
    )
    parser.add_argument(
        "--browser-session-nice",
        type=int,
        default=19,
        choices=range(20),
        metavar="0-19",
        help="the niceness of the browsers' session as a whole (Linux autogroup; Chromium runs in a session of "
        "its own). 19, the default: the server gets the cores it asks for and the twenty tabs what it leaves, as a "
        "server on its own machine does while its students' browsers run on their laptops; the tabs' lateness "
        "(they draw on what is left) still counts in the first loss. 0: the browsers and the server share the "
        "cores as equals — the server, 2-10 threads runnable on average, then got 0.1-0.9 of a core while the "
        "class set up (2026-12-06; docs/classroom-timing.md)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not 1 <= args.sessions <= 200:
        parser.error("--sessions must be 1..200")

    started = time.monotonic()
    results: list[SessionResult] = []
    # The last resort: if even the bounded run hangs (a wedged browser driver), print what is known.
    spread = 0.5 * args.sessions if args.arrive_over is None else args.arrive_over
    total = args.total_timeout or spread + args.timeout + 2 * SESSION_GRACE_S
    watchdog = threading.Timer(total + 4 * CLOSE_TIMEOUT_S + 60, last_resort, (results, started))
    watchdog.daemon = True
    watchdog.start()
    teacher = {}

    def load(url: str) -> None:
        # After the server started (it keeps its priority): this process is not part of the server. Linux shares
        # the cores between sessions (autogroups) before niceness counts: the server started here runs in a
        # session of its own, so does Chromium (Playwright's doing; their share is --browser-session-nice), and
        # this process — an observer that must not be starved by what it measures — in the one it was started in.
        os.nice(args.browser_nice)
        if args.teacher_token:
            teacher["before"] = asyncio.run(teacher_view(url, args.teacher_token))["counts"]
        asyncio.run(
            run_load(
                url,
                args.sessions,
                args.steps,
                args.timeout,
                args.max_retries,
                not args.staggered,
                args.arrive_over,
                total,
                results,
                args.own_axes,
                not args.no_edits,
                args.solve,
                args.browser_session_nice,
            )
        )
        if args.teacher_token:
            expected = collections.Counter(teacher["before"])
            expected.update(r.solved for r in results if r.solved)
            teacher["expected"] = dict(sorted(expected.items()))
            after = asyncio.run(teacher_view(url, args.teacher_token, teacher["expected"]))
            teacher.update(after=after["counts"], open=after["open"], exact=after["counts"] == teacher["expected"])

    if args.url:
        load(args.url)
        peak = None
    else:
        env = {"SHARDING_LAB_TEACHER_TOKEN": args.teacher_token} if args.teacher_token else {}
        with Server(args.max_jobs, extra_env=env, own_session=True) as server, RssSampler(server.proc.pid) as rss:
            load(server.url)
            peak = rss.peak
            log = server.output()
    watchdog.cancel()
    summary = summarize(results, peak, time.monotonic() - started, None if args.url else log)
    summary["teacher"] = teacher or None
    print(report(results, summary))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"summary": summary, "sessions": [{**dataclasses.asdict(r), "ok": r.ok} for r in results]}, indent=1
            )
        )
    good = (
        summary["ok"] == summary["sessions"]
        and not summary["server_exceptions"]
        and not summary["moved"]
        and (not teacher or teacher["exact"])
    )
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
