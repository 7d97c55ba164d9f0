"""Scheduler: how many runs train at once on this server, and the queue for the rest.

At most ``SHARDING_LAB_MAX_JOBS`` runs train at once across the whole server; the next ones wait
their turn in a queue whose place they report ("queued — 3 runs ahead of you"), up to
``SHARDING_LAB_MAX_QUEUED`` of them; one more than that is refused with :class:`Busy`. The queue is first
come, first served, except that a run whose programs are compiled already goes before runs that must
compile first: on the simulated host a compiled layout's first loss comes within a second of its start and
an uncompiled one's after seconds of compiling (a class of twenty on a fresh server, logged on 2026-12-06: 8
compiled runs waited 18–34 s in line behind runs that compiled, then each had its first loss 0.0–0.4 s after
its start). A queue rather than "try again": a class pressing Train together would otherwise
keep re-clicking, and every click redraws a page on the same cores the runs need.
:func:`poll_interval` tells pages how often to look, slower as more runs share the server, for the
same reason. Policy only: the runs themselves are :mod:`sharding_lab.server.jobs`.
"""

from __future__ import annotations

import collections
import contextlib
import threading

from .. import settings

MAX_JOBS = settings.MAX_JOBS.get()
MAX_QUEUED = max(0, settings.MAX_QUEUED.get())
FASTEST_POLL_S, SLOWEST_POLL_S, QUEUED_POLL_S = 0.2, 3.0, 1.5

_turns = threading.Condition()  # guards _free and _queue
_free = MAX_JOBS
_queue: collections.deque = collections.deque()  # tickets, first come first
_compiled: set = set()  # the queued tickets whose programs are compiled: they go first


class Busy(RuntimeError):
    """Every training slot is taken; try again in a moment."""


def take_slot() -> None:
    """Claim a training slot now, or raise :class:`Busy` (also when runs are queued: no jumping
    the queue); pair with :func:`release_slot`."""
    global _free
    with _turns:
        if _free == 0 or _queue:
            raise Busy(f"all {MAX_JOBS} training slots are in use right now — try again in a moment")
        _free -= 1


def release_slot() -> None:
    global _free
    with _turns:
        _free += 1
        _turns.notify_all()


def wait_for_slot(ticket: object, cancelled, on_wait, compiled: bool = False) -> bool:
    """Queue ``ticket`` and block until it is first in line and a slot is free (then the slot is
    taken: True), or until ``cancelled()`` (False). ``on_wait(runs_ahead)`` is called as the line
    moves (at least every 0.5 s). ``compiled``: the run's programs are compiled, so it is served before
    the runs queued that must compile (first come, first served among each)."""
    global _free
    with _turns:
        _queue.append(ticket)
        if compiled:
            _compiled.add(id(ticket))
        try:
            while not ((line := _line_locked())[0] is ticket and _free > 0):
                if cancelled():
                    return False
                on_wait(line.index(ticket))
                _turns.wait(0.5)
            _free -= 1
            return True
        finally:
            _queue.remove(ticket)
            _compiled.discard(id(ticket))
            _turns.notify_all()


def _line_locked() -> list:
    """The queue in the order it is served: the compiled runs first, then the others, each first come first."""
    return [t for t in _queue if id(t) in _compiled] + [t for t in _queue if id(t) not in _compiled]


def load() -> tuple[int, int]:
    """(runs training, runs queued) on this server right now."""
    with _turns:
        return MAX_JOBS - _free, len(_queue)


def poll_interval(queued: bool = False) -> float:
    """How often a page should look at its run: 5× a second while one run has the server, slower
    as more share it (every 0.2 s × the runs training or queued, at most every 3 s), at least every
    1.5 s while waiting in the queue — so that the cores go to training, not to redrawing twenty
    students' charts (a poll that takes longer than its interval never lets the page catch up)."""
    running, waiting = load()
    interval = min(SLOWEST_POLL_S, FASTEST_POLL_S * max(1, running + waiting))
    return max(QUEUED_POLL_S, interval) if queued else interval


@contextlib.contextmanager
def slot():
    """A training slot for the duration of a ``with`` block (raises :class:`Busy` if none is free)."""
    take_slot()
    try:
        yield
    finally:
        release_slot()
