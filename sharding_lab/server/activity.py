"""When learners last asked this server for a page: the class warm-up's cue that the server is idle.

Every script run of the app (a page opened, a widget edited; not a fragment's poll, whose run is counted
as training by :mod:`.slots`) is wrapped in :func:`page_run`. The class warm-up (:mod:`.warm`) compiles
what a class *may* click later, so it runs only in the server's idle time — not while learners set up
their pages: XLA compiles and runs every program on thread pools shared by all threads at the server's
priority, so a warm-up compile that starts between two page runs takes the cores from the next ones (a class
setting its pages up cost the server about three times the CPU with the warm-up compiling between page runs:
docs/classroom-timing.md). When it may go on is :mod:`.priority`'s rule.
"""

from __future__ import annotations

import contextlib
import threading
import time


class PageRuns:
    """One server's page runs: how many run now, when the last one ended."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0
        self._ended = float("-inf")

    @contextlib.contextmanager
    def page_run(self):
        """Count a script run while it lasts (nested uses are fine)."""
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                self._ended = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds since the last page run ended; 0 while one is running (infinite before the first)."""
        with self._lock:
            return 0.0 if self._running else time.monotonic() - self._ended


SERVER = PageRuns()  # this process's: every session's page runs


def page_run():
    """Count a script run of this server while it lasts (:meth:`PageRuns.page_run`)."""
    return SERVER.page_run()


def quiet_for() -> float:
    """Seconds since this server's last page run ended (:meth:`PageRuns.quiet_for`)."""
    return SERVER.quiet_for()
