"""What one student does in the load test: set the sidebar up, press Train, edit while the run trains, check
the finished page, solve a challenge."""

from __future__ import annotations

import asyncio
import random
import time

from tools.loadtest.page import (
    EVALUATE_TIMEOUT_S,
    IDLE_POLL_S,
    NO_LOSS,
    POLL_S,
    SCREENSHOTS,
    WATCH_FIRST_LOSS_JS,
    choose_preset,
    page_errors,
    read_state,
    set_input,
    wait_until,
)
from tools.loadtest.plans import SessionPlan, SessionResult, preset_titles
from tools.message_trace import MessageTrace

BUSY_RETRY_S = (2.0, 4.0)  # a student tries Train again after a few seconds


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
