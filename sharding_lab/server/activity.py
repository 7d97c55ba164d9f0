"""When learners last asked this server for a page: the class warm-up's cue that the server is idle.

Every script run of the app (a page opened, a widget edited; not a fragment's poll, whose run is counted
as training by :mod:`.slots`) is wrapped in :func:`page_run`. The class warm-up (:mod:`.warm`) compiles
what a class *may* click later, so it runs only in the server's idle time — not while learners set up
their pages: XLA compiles and runs every program on thread pools shared by all threads at the server's
priority, so a warm-up compile that starts between two page runs takes the cores from the next ones
(measured on 2026-12-06, a fresh server and a class of 20 setting their pages up: 278 CPU seconds of the
server's with the warm-up compiling between page runs, about 100 once it waited for the server to be idle).
"""

from __future__ import annotations

import contextlib
import threading
import time

_lock = threading.Lock()
_state = {"running": 0, "ended": float("-inf")}


@contextlib.contextmanager
def page_run():
    """Count a script run while it lasts (nested uses are fine)."""
    with _lock:
        _state["running"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["running"] -= 1
            _state["ended"] = time.monotonic()


def quiet_for() -> float:
    """Seconds since the last page run ended; 0 while one is running (infinite before the first)."""
    with _lock:
        return 0.0 if _state["running"] else time.monotonic() - _state["ended"]
