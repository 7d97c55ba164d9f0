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

MAX_REMEMBERED = 256  # layouts remembered as compiled (the trainer keeps 64 chunks in memory; the disk keeps all)
SETTLE_S = 2.0  # how long a layout stays on a learner's page before it is compiled
LOOK_AGAIN_S = 0.25  # how often the thread looks again while requests settle or runs are queued

_cond = threading.Condition()
_wanted: dict = {}  # session → (the configuration it shows, since when): served by age, not by insertion
_compiled: collections.OrderedDict = collections.OrderedDict()  # program key → None, the layouts done
_state: dict = {"thread": None, "current": None, "done": 0, "dropped": 0}
_stop = threading.Event()


def enabled() -> bool:
    return settings.WARM.on()


def request(session: str, config) -> bool:
    """Compile ``config`` for ``session`` in the background (replacing what the session asked before); False when
    there is nothing to do (off, not a training layout here, compiled already, or the same request)."""
    from ..training.trainer import program_key

    if not enabled() or config.target != "cpu" or _stop.is_set():
        return False
    key = program_key(config, config.chunk)
    with _cond:
        if key in _compiled or _state["current"] == key:
            return False
        previous = _wanted.pop(session, None)
        if previous is not None and program_key(previous[0], previous[0].chunk) == key:
            _wanted[session] = previous  # the same layout, drawn again: it keeps its age
            return False
        if previous is not None:
            _state["dropped"] += 1  # the learner moved on before it was compiled: cancelled
        _wanted[session] = (config, time.monotonic())
        _start_locked()
        _cond.notify_all()
    return True


def forget(session: str) -> None:
    """Drop ``session``'s request (it pressed Train: its own run compiles it now)."""
    with _cond:
        _wanted.pop(session, None)


def pending() -> bool:
    """Whether a layout a learner is reading is waiting to be compiled, or compiling now."""
    with _cond:
        return bool(_wanted) or _state["current"] is not None


def status() -> dict:
    """What the thread is doing: waiting (requests), compiled so far, dropped (cancelled) requests."""
    with _cond:
        return {
            "waiting": len(_wanted),
            "done": _state["done"],
            "dropped": _state["dropped"],
            "compiling": _state["current"] is not None,
        }


def stop() -> None:
    """Stop after the compile in progress (interpreter exit)."""
    _stop.set()
    with _cond:
        _wanted.clear()
        _cond.notify_all()


def _start_locked() -> None:
    thread = _state["thread"]
    if thread is None or not thread.is_alive():
        thread = threading.Thread(target=_serve, name="sharding-lab-precompile", daemon=True)
        background.track(thread, stop)
        _state["thread"] = thread
        thread.start()


def _serve() -> None:
    from ..training.trainer import compile_first_run, program_key

    while True:
        with _cond:
            while not _stop.is_set() and (session := _next_locked()) is None:
                if not _cond.wait(timeout=LOOK_AGAIN_S if _wanted else 60) and not _wanted:
                    _state["thread"] = None  # idle a minute: end; the next request starts another
                    return
            if _stop.is_set():
                return
            config, _ = _wanted.pop(session)
            key = program_key(config, config.chunk)
            _state["current"] = key
        try:
            compile_first_run(config)
        except Exception:  # noqa: BLE001 - a bonus: the learner's own run reports its errors
            pass
        with _cond:
            _state["current"] = None
            _state["done"] += 1
            _compiled[key] = None
            for other in [s for s, (c, _) in _wanted.items() if program_key(c, c.chunk) == key]:
                del _wanted[other]  # the same layout, asked by other sessions (a class opening the default)
            while len(_compiled) > MAX_REMEMBERED:
                _compiled.popitem(last=False)


def _next_locked():
    """The session whose request is served next: the oldest whose layout has settled — none while a run is queued."""
    if not _wanted or slots.load()[1] > 0:
        return None
    now = time.monotonic()
    settled = [(since, session) for session, (_, since) in _wanted.items() if now - since >= SETTLE_S]
    return min(settled)[1] if settled else None
