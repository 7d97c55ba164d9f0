"""``python -m tools.loadtest``: the load test's command line."""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import threading
import time
from pathlib import Path

from tests.browser import Server
from tools import loadtest
from tools.loadtest.abuse import abuse_report, adversary
from tools.loadtest.machine import RssSampler
from tools.loadtest.page import CLOSE_TIMEOUT_S
from tools.loadtest.plans import SessionResult
from tools.loadtest.report import last_resort, report, summarize
from tools.loadtest.sessions import SESSION_GRACE_S, run_load
from tools.loadtest.teacher import teacher_view


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.loadtest", description=loadtest.__doc__.split("\n\n")[0])
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
    parser.add_argument(
        "--abuse",
        action="store_true",
        help="one adversarial student besides the sessions: fuzzed links, a 70B model, rapid Train/Stop clicks, "
        "two Plan searches on one question and one on another (tools/loadtest/abuse.py)",
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
    found = {}  # the adversary's result (--abuse)

    def load(url: str) -> None:
        # After the server started (it keeps its priority): this process is not part of the server. Linux shares
        # the cores between sessions (autogroups) before niceness counts: the server started here runs in a
        # session of its own, so does Chromium (Playwright's doing; their share is --browser-session-nice), and
        # this process — an observer that must not be starved by what it measures — in the one it was started in.
        os.nice(args.browser_nice)
        if args.teacher_token:
            teacher["before"] = asyncio.run(teacher_view(url, args.teacher_token))["counts"]
        class_load = run_load(
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
        if args.abuse:

            async def with_adversary():
                _, found["adversary"] = await asyncio.gather(class_load, adversary(url, total))

            asyncio.run(with_adversary())
        else:
            asyncio.run(class_load)
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
    abuse = found.get("adversary")
    summary["teacher"] = teacher or None
    summary["adversary"] = dataclasses.asdict(abuse) if abuse else None
    print(report(results, summary))
    if abuse:
        print(abuse_report(abuse))
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
        and (not abuse or (not abuse.crashes and not abuse.errors and abuse.refused_huge and abuse.searches_shared))
    )
    return 0 if good else 1
