"""The app's background threads, stopped and joined before the Python interpreter finalises.

The app compiles and trains off the script thread: the warm-up (:mod:`.warm`), the precompile of the layout a
learner is reading (:mod:`.precompile`), each training run (:mod:`.jobs`) and the plan searches
(:mod:`.searches`). Each is a daemon thread, so a server never waits on one to exit — but a daemon thread still
inside XLA when the interpreter finalises is torn down mid-call, and the process aborts: SIGABRT ("terminate
called after throwing an instance of '' / FATAL: exception not rethrown") or SIGSEGV — measured, 3 of 3 runs of
a script that opened the Layout page twice through AppTest and ended.

So every such thread is :func:`track`\\ ed with the function that asks it to stop, and :func:`stop_all` — run at
interpreter exit (``atexit``: after ``main`` returns, a ``sys.exit``, an uncaught KeyboardInterrupt on Ctrl+C,
or Streamlit's own SIGTERM/SIGINT handler stopping its server) — asks each to stop and joins it. A thread
stops at its next checkpoint (between chunks, layouts, candidates); a compile in progress is allowed to finish
(the app's are seconds). One that has still not stopped after :data:`JOIN_LIMIT_S` is abandoned the one way
XLA survives: the process leaves through ``os._exit(70)`` after flushing its output, skipping the finalisation
that would tear the thread down (70, not 0: the status the program meant is unknown there).

None of these threads lowers its CPU priority. XLA compiles and runs every program on thread pools it starts
the first time it needs them (``tf_XLAEigen`` when the backend starts, ``llvm-worker-*`` at the first program
big enough to split its code generation), and a thread Linux creates inherits its creator's priority: the
warm-up thread at nice 19 left those pools — every student's compile and training step included — at nice 19
for the server's life (a fresh class's layouts then took many times their own CPU time in wall clock:
docs/classroom-timing.md). What keeps the background work out of the learners' way is when it
runs — the precompile only for the layouts the learners are reading (:mod:`.precompile`) — and where: the
class warm-up compiles all but the default layout in a child process of its own at the lowest priority, paused
while the server is busy and killed when it stops (:func:`.warm._warm_in_child`).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Callable

JOIN_LIMIT_S = 120.0  # the longest stop_all waits for every thread together (a transformer's compile: ~30 s)


class Threads:
    """One server's background threads, each with the function that asks it to stop (the module's functions use
    :data:`SERVER`'s, which the interpreter's exit stops)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tracked: list[tuple[threading.Thread, Callable[[], None]]] = []
        self.exiting = threading.Event()  # set once the process is stopping its threads: start no new work

    def track(self, thread: threading.Thread, stop: Callable[[], None]) -> threading.Thread:
        """Have :meth:`stop_all` call ``stop()`` and join ``thread``; the thread, for chaining."""
        with self._lock:
            self._tracked[:] = [(t, s) for t, s in self._tracked if t.is_alive() or t is thread]
            self._tracked.append((thread, stop))
        return thread

    def alive(self) -> list[threading.Thread]:
        """The tracked threads still running."""
        with self._lock:
            return [t for t, _ in self._tracked if t.is_alive()]

    def stop_all(self, limit_s: float = JOIN_LIMIT_S) -> bool:
        """Ask every tracked thread to stop, then join them (all together at most ``limit_s``); True when every
        one ended. New threads may be tracked after."""
        with self._lock:
            tracked = list(self._tracked)
        for _, stop in tracked:
            try:
                stop()
            except Exception:  # noqa: BLE001 - one thread's stop must not keep the others running
                pass
        deadline = time.monotonic() + limit_s
        for thread, _ in tracked:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t, _ in tracked if t is not threading.current_thread())


SERVER = Threads()  # this process's


def track(thread: threading.Thread, stop: Callable[[], None]) -> threading.Thread:
    """Have :func:`stop_all` call ``stop()`` and join ``thread`` at exit; the thread, for chaining."""
    return SERVER.track(thread, stop)


def exiting() -> bool:
    """True once the process is stopping its threads: start no new work."""
    return SERVER.exiting.is_set()


def alive() -> list[threading.Thread]:
    """The tracked threads still running."""
    return SERVER.alive()


def stop_all(limit_s: float = JOIN_LIMIT_S) -> bool:
    """Stop and join this server's threads (:meth:`Threads.stop_all`). Called at interpreter exit; a test may
    call it too (new threads may be tracked after)."""
    return SERVER.stop_all(limit_s)


def _at_exit() -> None:
    SERVER.exiting.set()
    if stop_all():
        return
    names = ", ".join(t.name for t in alive())
    print(
        f"sharding-lab: background work still running after {JOIN_LIMIT_S:.0f} s ({names}); leaving without "
        "finalising the interpreter, which would tear it down inside XLA (exit status 70: the status the program "
        "meant is not known here, and 0 could hide a failure)",
        file=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(70)


atexit.register(_at_exit)
