"""The load test's verdict: the sessions' figures summarised, the table printed, the server's exceptions read
from its log."""

from __future__ import annotations

import collections
import os
import re
import statistics
import time

from tools.loadtest.plans import SessionResult

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
        f"max_finish={fmt(s['max_finish_s'])}s peak_rss={s['peak_rss_mb']}MiB errors={s['errors']} "
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
