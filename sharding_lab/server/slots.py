"""Training slots: how many runs train at once on this server, and the queue for the rest.

At most ``SHARDING_LAB_MAX_JOBS`` runs train at once across the whole server; the next ones wait
their turn in a queue whose place they report ("queued — 3 runs ahead of you"), up to
``SHARDING_LAB_MAX_QUEUED`` of them; one more than that is refused with :class:`Busy`. The queue is served
in :mod:`.priority`'s order (first come, first served, a run whose programs are compiled already before the
runs that must compile first). A queue rather than "try again": a class pressing Train together would otherwise
keep re-clicking, and every click redraws a page on the same cores the runs need.
:func:`poll_interval` tells pages how often to look, slower as more runs share the server, for the
same reason. Policy only: the runs themselves are :mod:`sharding_lab.server.jobs`."""

from __future__ import annotations

import collections
import contextlib
import threading

from .. import settings
from .priority import serve_order

MAX_JOBS = settings.MAX_JOBS.get()
MAX_QUEUED = max(0, settings.MAX_QUEUED.get())
FASTEST_POLL_S, SLOWEST_POLL_S, QUEUED_POLL_S = 0.2, 3.0, 1.5


class Busy(RuntimeError):
    """Every training slot is taken; try again in a moment."""


class Slots:
    """A server's training slots and its queue (the module's functions use :data:`SERVER`'s; a test may make
    its own)."""

    def __init__(self, max_jobs: int = MAX_JOBS):
        self.max_jobs = max_jobs
        self._turns = threading.Condition()  # guards _free, _queue and _compiled
        self._free = max_jobs
        self._queue: collections.deque = collections.deque()  # tickets, first come first
        self._compiled: set = set()  # the queued tickets whose programs are compiled (priority.serve_order)

    def take(self) -> None:
        """Claim a training slot now, or raise :class:`Busy` (also when runs are queued: no jumping
        the queue); pair with :meth:`release`."""
        with self._turns:
            if self._free == 0 or self._queue:
                raise Busy(f"all {self.max_jobs} training slots are in use right now — try again in a moment")
            self._free -= 1

    def release(self) -> None:
        with self._turns:
            self._free += 1
            self._turns.notify_all()

    def wait(self, ticket: object, cancelled, on_wait, compiled: bool = False) -> bool:
        """Queue ``ticket`` and block until it is first in line and a slot is free (then the slot is
        taken: True), or until ``cancelled()`` (False). ``on_wait(runs_ahead)`` is called as the line
        moves (at least every 0.5 s). ``compiled``: the run's programs are compiled, so it is served before
        the runs queued that must compile (:func:`.priority.serve_order`)."""
        with self._turns:
            self._queue.append(ticket)
            if compiled:
                self._compiled.add(id(ticket))
            try:
                while not ((line := serve_order(list(self._queue), self._compiled))[0] is ticket and self._free > 0):
                    if cancelled():
                        return False
                    on_wait(line.index(ticket))
                    self._turns.wait(0.5)
                self._free -= 1
                return True
            finally:
                self._queue.remove(ticket)
                self._compiled.discard(id(ticket))
                self._turns.notify_all()

    def load(self) -> tuple[int, int]:
        """(runs training, runs queued) right now."""
        with self._turns:
            return self.max_jobs - self._free, len(self._queue)


SERVER = Slots()  # this process's: every page's runs share it


def take_slot() -> None:
    """Claim one of this server's training slots now, or raise :class:`Busy` (:meth:`Slots.take`)."""
    SERVER.take()


def release_slot() -> None:
    SERVER.release()


def wait_for_slot(ticket: object, cancelled, on_wait, compiled: bool = False) -> bool:
    """Wait in this server's queue for a training slot (:meth:`Slots.wait`)."""
    return SERVER.wait(ticket, cancelled, on_wait, compiled)


def load() -> tuple[int, int]:
    """(runs training, runs queued) on this server right now."""
    return SERVER.load()


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
