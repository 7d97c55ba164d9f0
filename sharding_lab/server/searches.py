"""The Plan page's searches as a resource the class shares: one search per question, a limit on how many run
at once, a queue for the rest, and a search stopped only when nobody waits for it any more.

A search of a real model compiles hundreds of programs for minutes on the server's cores (Llama 3 70B on
v5e: 284 candidates). Two students pressing Run on the same question get the same search: the second tab
follows the first one's progress and gets its answer (the question is the search's whole input: base
configuration, dtype, presets, remats). At most ``SHARDING_LAB_MAX_SEARCHES`` run at once; the others wait
first come, first served, and each waiting tab is told its place. A tab that stops leaves its search; the
search stops (or leaves the queue) when its last tab has left. An answered question is kept for the next tab
that asks it (the :data:`KEEP_ANSWERED` most recent). The compile workers of a large model's search run
below the priority of the class's training (:data:`sharding_lab.search.pool.WORKER_NICE`).

``run`` (the search itself, :func:`sharding_lab.search.search` by default) is a parameter so that a test of
the queue's order can run searches that wait for it.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import time
from typing import Callable

from .. import settings
from . import background, page_compiles

KEEP_ANSWERED = 8


def max_searches() -> int:
    return settings.MAX_SEARCHES.get()


@dataclasses.dataclass(eq=False)
class SharedSearch:
    """One question's search: its progress, its answer once done (or its failure), the tabs that wait for it."""

    base: object  # LabConfig
    dtype: str
    presets: tuple[str, ...] | None
    remats: tuple[str, ...] | None
    to_compile: int = 0
    total: int = 0
    done: int = 0
    compiled: int = 0
    compile_s: float = 0.0  # the compiled candidates' compile times, summed (the time left is estimated from them)
    checked: int = 0  # of the compiled, those answered at their memory check (search.eta)
    checked_s: float = 0.0
    workers: int = 1  # candidates compiled at once
    compile_ahead: int | None = None  # while it waits for a turn of the server's compile queue: how many before it
    last: str = ""
    asked: float = 0.0
    started: float | None = None  # None while queued
    result: object | None = None  # search.Search
    first: list | None = None
    first_s: float | None = None
    # what it screens or compiles now (search.Activity), said under the progress bar
    activity: object = dataclasses.field(default_factory=lambda: _activity())
    error: str | None = None
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    finished: threading.Event = dataclasses.field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    watchers: dict = dataclasses.field(default_factory=dict)  # watcher → whether its tab is still open (or None)

    def abandoned(self) -> bool:
        """Every tab that waits for it has closed (as far as their sessions say): nobody will read its answer."""
        checks = list(self.watchers.values())
        return bool(checks) and all(check is not None and not check() for check in checks)

    @property
    def key(self) -> tuple:
        return (self.base, self.dtype, tuple(self.presets or ()), tuple(self.remats or ()))

    @property
    def queued(self) -> bool:
        return self.started is None and not self.finished.is_set()

    @property
    def running(self) -> bool:
        """Queued or searching: not answered yet."""
        return not self.finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)


class Searches:
    """The server's searches (one object per server; a test makes its own)."""

    def __init__(self, limit: Callable[[], int] = max_searches, run: Callable | None = None, workers=None):
        self._limit = limit
        self._run = run
        self._workers = workers
        self._lock = threading.Lock()
        self._active: dict[tuple, SharedSearch] = {}  # queued or running and not stopping, by question
        self._queue: collections.deque[SharedSearch] = collections.deque()
        self._running: set[SharedSearch] = set()
        self._answered: collections.OrderedDict[tuple, SharedSearch] = collections.OrderedDict()
        self._ids = itertools.count(1)
        self.started = 0  # searches started since the server did (a test counts them)

    def watcher(self) -> str:
        """A new id for a tab's wait on a search."""
        return f"w{next(self._ids)}"

    def ask(
        self, watcher: str, base, dtype: str, presets=None, remats=None, to_compile: int = 0, total: int = 0, open_=None
    ):
        """The search answering this question, joined by ``watcher``: the one already queued or running, the
        last answer to it, or a new one (started now, or queued behind the limit). ``open_``: a function that says
        whether the watcher's tab is still open (a search whose tabs have all closed stops at its next candidate)."""
        wanted = SharedSearch(base, dtype, presets, remats, to_compile, total, asked=time.monotonic())
        with self._lock:
            found = self._active.get(wanted.key)
            if found is not None and found.stop.is_set():  # stopping: its last tab left, its answer will be partial
                found = None
            if found is None:
                answered = self._answered.get(wanted.key)
                if answered is not None and answered.result is not None and not answered.result.stopped:
                    answered.watchers[watcher] = open_
                    return answered
                found = self._active[wanted.key] = wanted
                self._queue.append(found)
            found.watchers[watcher] = open_
            self._start_next()
            return found

    def leave(self, watcher: str, found: SharedSearch) -> None:
        """``watcher`` stops waiting; the search stops (or leaves the queue) when nobody waits for it."""
        with self._lock:
            found.watchers.pop(watcher, None)
            if found.watchers or found.finished.is_set():
                return
            found.stop.set()
            self._forget(found)
            if found in self._queue:  # never started: answered as stopped, with nothing in it
                self._queue.remove(found)
                found.finished.set()

    def place(self, found: SharedSearch) -> int:
        """0 while it searches (or is done), else its place in the queue: 1 = the next to start."""
        with self._lock:
            return next((i for i, s in enumerate(self._queue, 1) if s is found), 0) if found.queued else 0

    def counts(self) -> tuple[int, int]:
        """(searches running, searches queued)."""
        with self._lock:
            return len(self._running), len(self._queue)

    def _forget(self, found: SharedSearch) -> None:  # with the lock held: a new ask of its question starts anew
        if self._active.get(found.key) is found:
            del self._active[found.key]

    def _start_next(self) -> None:  # with the lock held
        while self._queue and len(self._running) < max(1, self._limit()):
            found = self._queue.popleft()
            self._running.add(found)
            found.started = time.monotonic()
            self.started += 1
            found.thread = threading.Thread(target=self._search, args=(found,), daemon=True, name="sharding-lab-plan")
            background.track(found.thread, found.stop.set)  # its workers killed, the thread joined before exit
            found.thread.start()

    def _search(self, found: SharedSearch) -> None:
        from .. import errors, search

        def progress(done, total, result):
            if found.abandoned():
                found.stop.set()
            found.done, found.total = done, total
            found.compiled += result.compiled
            found.compile_s += result.compile_s if result.compiled else 0.0
            if result.at_memory_check:
                found.checked += 1
                found.checked_s += result.compile_s
            name = f"{result.candidate.mesh_text} {result.candidate.preset} remat {result.candidate.remat}"
            found.last = f"{name}: " + (
                "fits, answered at its memory check: cannot be the best"
                if result.skipped == search.SKIP_FLOOR
                else f"skipped ({result.skipped})"
                if result.skipped
                else ("fits" if result.fits else "does not fit")
            )
            if result.candidate.preset == "-":  # the candidates counted without a layout, reported first
                found.last = f"skipped ({result.skipped})"

        def first(ranked, seconds):
            found.first, found.first_s = ranked, seconds

        run = self._run or search.search
        said = {} if self._run else {"activity": found.activity}  # a test's own run takes the classic arguments
        try:
            found.workers = _at_once(found.base, self._workers)
            if found.workers > 1:  # a large model's search (compile workers) starts in its turn of the compile queue
                _wait_for_turn(found)
            # workers: one process per core compiles a large model (at a lower priority), and Stop ends a
            # compile at once (it kills them); a small model compiles here
            found.result = run(
                found.base,
                found.dtype,
                found.presets,
                found.remats,
                progress,
                found.stop,
                workers=self._workers,
                first=first,
                **said,
            )
        except page_compiles.Cancelled:  # its last tab left while it waited for the compile queue
            found.result = search.Search(found.base, found.dtype, 0, [], stopped=True)
        except errors.ConfigError as error:
            found.error = str(error)
        except Exception as error:  # a compile worker that died included: one line on the page, no traceback
            found.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        finally:
            with self._lock:
                self._forget(found)
                self._running.discard(found)
                if found.result is not None and not found.stop.is_set():
                    self._answered[found.key] = found
                    self._answered.move_to_end(found.key)
                    while len(self._answered) > KEEP_ANSWERED:
                        self._answered.popitem(last=False)
                found.finished.set()
                self._start_next()


def _activity():
    from ..search.underway import Activity

    return Activity()


def _at_once(base, workers) -> int:
    """How many candidates the search of ``base`` compiles at once (1: in the server's own process)."""
    from ..search.search import compile_workers

    return compile_workers(base, workers) if hasattr(base, "family") else 1


def _wait_for_turn(found: SharedSearch) -> None:
    """Wait for a turn of the server's compile queue before ``found`` starts (its tabs told its place meanwhile),
    and give it back at once: the search does not start on top of the pages' big compiles, and it does not hold
    the turn while it searches — minutes to hours, during which every page's big compile would wait (the search's
    workers run at a lower priority than the pages, and ``SHARDING_LAB_MAX_SEARCHES`` bounds the searches)."""

    def on_wait(ahead: int) -> None:
        found.compile_ahead = ahead

    try:
        with page_compiles.SERVER.turn(on_wait, cancelled=found.stop.is_set):
            pass
    finally:
        found.compile_ahead = None


SEARCHES = Searches()
