"""The layout a learner is looking at, compiled before they press Train.

Students read a layout for a while (the Layout page, the Train page's caption) before they train it; the
compiler can use that time. :func:`request` records, per session, the configuration its page shows; one
background thread (at the server's priority: :mod:`.background` says why) compiles what a first run of it
would (the model's creation, the training chunk, the prediction and the layout check:
:func:`sharding_lab.training.trainer.compile_first_run`), so the run Train starts finds its programs in memory
(and in the disk cache for other sessions and later servers). The server's class warm-up waits while a request
is pending: what learners read now comes before what a class may click later.

A session that changes its layout replaces its request: one not yet started is dropped (cancelled). One
already compiling finishes — XLA cannot be interrupted mid-compile — and the thread moves on to what is asked
now. Requests are served oldest first, each session's latest only; a layout compiled once is not compiled
again, whichever session asked (a class opening the app asks twenty times for the default layout: each extra
first run cost 0.1–2.8 s of the thread's time while the class set up). A request waits until its layout has
stayed :data:`SETTLE_S` on the learner's page (one typing a mesh passes through layouts nobody reads: 3 of the
first 8 compiles of a fresh 20-session class were such intermediate layouts, 6–14 s each while the class set
up), and none starts while a run waits in the queue for a training slot (that run's own compile comes first:
it is what a learner is waiting for now). Off with ``SHARDING_LAB_WARM=off`` (the test suite), as the warm-up
is. The thread is stopped and joined at interpreter exit (:mod:`.background`).
"""

from __future__ import annotations

import collections
import threading
import time

from .. import settings
from . import background, slots
from .priority import LAYOUT_READ, Load, may_compile

MAX_REMEMBERED = 256  # layouts remembered as compiled (the trainer keeps 64 chunks in memory; the disk keeps all)
SETTLE_S = 2.0  # how long a layout stays on a learner's page before it is compiled
LOOK_AGAIN_S = 0.25  # how often the thread looks again while requests settle or runs are queued


def enabled() -> bool:
    return settings.WARM.on()


class Precompiler:
    """One server's requests and the thread that serves them (the module's functions use :data:`SERVER`'s)."""

    def __init__(self):
        self.lock = threading.Condition()  # guards the rest; held, it keeps the thread from taking a request
        self.wanted: dict = {}  # session → (the configuration it shows, since when): served by age
        self.compiled: collections.OrderedDict = collections.OrderedDict()  # program key → None, the layouts done
        self.thread: threading.Thread | None = None
        self.current = None  # the program key compiling now
        self.done = 0
        self.dropped = 0
        self.stopped = threading.Event()

    def request(self, session: str, config) -> bool:
        """Compile ``config`` for ``session`` in the background (replacing what the session asked before); False
        when there is nothing to do (off, not a training layout here, compiled already, or the same request)."""
        from ..training.trainer import program_key

        if not enabled() or config.target != "cpu" or self.stopped.is_set():
            return False
        key = program_key(config, config.chunk)
        with self.lock:
            if key in self.compiled or self.current == key:
                return False
            previous = self.wanted.pop(session, None)
            if previous is not None and program_key(previous[0], previous[0].chunk) == key:
                self.wanted[session] = previous  # the same layout, drawn again: it keeps its age
                return False
            if previous is not None:
                self.dropped += 1  # the learner moved on before it was compiled: cancelled
            self.wanted[session] = (config, time.monotonic())
            self._start_locked()
            self.lock.notify_all()
        return True

    def forget(self, session: str) -> None:
        """Drop ``session``'s request (it pressed Train: its own run compiles it now)."""
        with self.lock:
            self.wanted.pop(session, None)

    def pending(self) -> bool:
        """Whether a layout a learner is reading is waiting to be compiled, or compiling now."""
        with self.lock:
            return bool(self.wanted) or self.current is not None

    def status(self) -> dict:
        """What the thread is doing: waiting (requests), compiled so far, dropped (cancelled) requests."""
        with self.lock:
            return {
                "waiting": len(self.wanted),
                "done": self.done,
                "dropped": self.dropped,
                "compiling": self.current is not None,
            }

    def stop(self) -> None:
        """Stop after the compile in progress (interpreter exit)."""
        self.stopped.set()
        with self.lock:
            self.wanted.clear()
            self.lock.notify_all()

    def _start_locked(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._serve, name="sharding-lab-precompile", daemon=True)
            background.track(self.thread, self.stop)
            self.thread.start()

    def _serve(self) -> None:
        from ..training.trainer import compile_first_run, program_key

        while True:
            with self.lock:
                while not self.stopped.is_set() and (session := self._next_locked()) is None:
                    if not self.lock.wait(timeout=LOOK_AGAIN_S if self.wanted else 60) and not self.wanted:
                        self.thread = None  # idle a minute: end; the next request starts another
                        return
                if self.stopped.is_set():
                    return
                config, _ = self.wanted.pop(session)
                key = program_key(config, config.chunk)
                self.current = key
            try:
                compile_first_run(config)
            except Exception:  # noqa: BLE001 - a bonus: the learner's own run reports its errors
                pass
            with self.lock:
                self.current = None
                self.done += 1
                self.compiled[key] = None
                for other in [s for s, (c, _) in self.wanted.items() if program_key(c, c.chunk) == key]:
                    del self.wanted[other]  # the same layout, asked by other sessions (a class opening the default)
                while len(self.compiled) > MAX_REMEMBERED:
                    self.compiled.popitem(last=False)

    def _next_locked(self):
        """The session served next: the oldest whose layout has settled — none while a run waits for a slot
        (:mod:`.priority`)."""
        if not self.wanted or not may_compile(LAYOUT_READ, Load(*slots.load())):
            return None
        now = time.monotonic()
        settled = [(since, session) for session, (_, since) in self.wanted.items() if now - since >= SETTLE_S]
        return min(settled)[1] if settled else None


SERVER = Precompiler()  # this process's: every session's requests


def request(session: str, config) -> bool:
    """Ask this server to compile ``config`` for ``session`` (:meth:`Precompiler.request`)."""
    return SERVER.request(session, config)


def forget(session: str) -> None:
    SERVER.forget(session)


def pending() -> bool:
    return SERVER.pending()


def status() -> dict:
    return SERVER.status()


def stop() -> None:
    SERVER.stop()
