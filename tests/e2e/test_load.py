"""A short classroom load test in CI: a few browser sessions at once against one server.

The full run (20 sessions) is `python -m tools.loadtest`; this runs the same code with 4 sessions, a
few hundred steps each, and only 2 training slots so that the queue is exercised: every session must still
finish, see only its own configuration and
run (no cross-talk), and show no error.
"""

import asyncio
import time

import pytest

from tests.browser import Server
from tests.support import needs_chromium
from tools.loadtest import sessions  # noqa: E402
from tools.loadtest.machine import RssSampler
from tools.loadtest.page import page_errors
from tools.loadtest.plans import SessionResult, session_plans
from tools.loadtest.report import report, summarize

SESSIONS, STEPS, MAX_JOBS = 4, 100, 2
BUDGET_S = 85  # the whole test, server start included, must stay under 90 s

pytestmark = [pytest.mark.browser, needs_chromium]


def test_sessions_at_once_train_their_own_config_without_errors(capsys):
    started = time.monotonic()
    with Server(max_jobs=MAX_JOBS) as server, RssSampler(server.proc.pid) as rss:
        results = asyncio.run(sessions.run_load(server.url, SESSIONS, STEPS, timeout=BUDGET_S - 10, max_retries=100))
        log = server.output()
    wall = time.monotonic() - started
    summary = summarize(results, rss.peak, wall, log)
    table = report(results, summary)
    with capsys.disabled():
        print("\n" + table)

    assert [r.status for r in results] == ["finished"] * SESSIONS, table
    assert summary["errors"] == 0, table
    assert summary["crosstalk"] == 0, table
    # 4 clicks at once on 2 slots: somebody waited in the queue, and still finished
    assert summary["queued"] > 0 and summary["busy_retries"] == 0, table
    assert all(r.first_loss_s is not None and r.first_loss_s <= r.finish_s for r in results), table
    # The tab's own clock saw the loss appear after the click, and no later than the harness's look found it.
    assert all(0 < r.first_loss_shown_s <= r.first_loss_s + 0.05 for r in results), table
    assert summary["server_exceptions"] == [], log[-3000:]
    assert summary["edits"] == 2 and summary["edits_noted"] == 2, table  # sessions 1 and 3 edited, the page said so
    assert wall < BUDGET_S, table


def test_session_plans_are_all_different():
    plans = session_plans(24, 300)
    assert len({(p.preset, p.shape) for p in plans}) == 24 and len({p.steps for p in plans}) == 24
    assert {p.axes for p in plans} == {("data", "model")}  # as a class leaves them: a warm cache serves them
    assert all(p.devices <= 8 for p in plans)
    assert len({p.label for p in session_plans(24, 300, own_axes=True)}) == 24
    edits = [(p.edit, p.edit_to != p.preset) for p in plans if p.edit]
    assert edits.count(("lr", True)) == 6 and edits.count(("preset", True)) == 6  # half edit mid-run
    assert not any(p.edit for p in session_plans(24, 300, edits=False))


def test_page_errors_spots_failures_but_not_busy():
    quiet = {
        "exceptions": 0,
        "traceback": False,
        "connectionError": False,
        "alerts": [
            {"kind": "warning", "text": "The server is busy: all 4 training slots are in use"},
            {"kind": "success", "text": "Finished — layout verified on 8 devices"},
        ],
    }
    assert page_errors(quiet) == []
    broken = {**quiet, "exceptions": 1, "alerts": [{"kind": "error", "text": "Training failed: XlaRuntimeError: boom"}]}
    assert len(page_errors(broken)) == 2


def test_a_session_that_hangs_is_reported_and_does_not_hang_the_load_test(monkeypatch):
    """A browser call that never returns (here: a context that never opens) ends as 'hung' within
    the session's bound, so the load test still reaches its summary."""

    class NeverOpens:
        async def new_context(self, **_):
            await asyncio.Event().wait()

    monkeypatch.setattr(sessions, "SESSION_GRACE_S", 0.5)
    plan = session_plans(1, 100)[0]
    result = SessionResult(plan)
    started = time.monotonic()
    asyncio.run(
        sessions.watched_session(
            NeverOpens(),
            "http://127.0.0.1:9/",
            plan,
            "Seed",
            None,
            timeout=0.5,
            max_retries=0,
            arrive_at=0.0,
            result=result,
        )
    )
    assert time.monotonic() - started < 5
    assert result.status.startswith("hung") and not result.ok
    assert any("no verdict within" in e for e in result.errors)
    summary = summarize([result], None, 1.0)
    assert summary["ok"] == 0 and "hung" in report([result], summary)
