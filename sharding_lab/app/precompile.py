"""The layout a learner is looking at, compiled before they press Train.

Students read a layout for a while (the Layout page, the Train page's caption) before they train it; the
compiler can use that time. :func:`request` records, per session, the configuration its page shows; background
threads at the lowest CPU priority (one per core: a small program's compile keeps about one core busy) compile
what a first run of it needs before its first loss (the model's creation, the training chunk and the prediction:
:mod:`.first_run`), so the run Train starts finds its programs in memory (and in the
disk cache for other sessions and later servers). The layout check a run ends with is compiled after every
waiting request is served: what stands between a student and a first loss goes first. The class warm-up
(:mod:`.warm`) waits while there is anything to do here — it compiles layouts nobody is looking at.

A session that changes its layout replaces its request: one not yet started is dropped (cancelled). One
already compiling finishes — XLA cannot be interrupted mid-compile — and the thread moves on to what is asked
now. A run that starts while its layout is being compiled here does not compile it a second time: both call the
same jitted chunk, and JAX compiles a jitted function once when two threads call it at once (measured: one
compile log line). Requests are served oldest first, each
session's latest only; a layout compiled once is not compiled again. Off with ``SHARDING_LAB_WARM=off`` (the
test suite), as the warm-up is. The threads are stopped and joined at interpreter exit (:mod:`.background`).
"""

from __future__ import annotations

import collections
import os
import threading

from .. import settings
from . import background

MAX_REMEMBERED = 256  # layouts remembered as compiled (the trainer keeps 64 chunks in memory; the disk keeps all)
THREADS = max(1, min(2, os.cpu_count() or 1))  # one compile keeps ~1 core busy; more would only take turns

_cond = threading.Condition()
_wanted: collections.OrderedDict = collections.OrderedDict()  # session → the configuration it shows
_compiled: collections.OrderedDict = collections.OrderedDict()  # program key → None, the layouts done
_checks: collections.OrderedDict = collections.OrderedDict()  # program key → config: layout checks still to compile
_current: set = set()  # program keys being compiled now
_state: dict = {"threads": [], "done": 0, "dropped": 0}
_stop = threading.Event()


def enabled() -> bool:
    return settings.WARM.raw().lower() not in ("off", "0", "false", "no")


def request(session: str, config) -> bool:
    """Compile ``config`` for ``session`` in the background (replacing what the session asked before); False when
    there is nothing to do (off, not a training layout here, compiled already, or the same request)."""
    from ..training.trainer import program_key

    if not enabled() or config.target != "cpu" or _stop.is_set():
        return False
    key = program_key(config, config.chunk)
    with _cond:
        if key in _compiled or key in _current:
            return False
        previous = _wanted.pop(session, None)
        if previous is not None and program_key(previous, previous.chunk) != key:
            _state["dropped"] += 1  # the learner moved on before it was compiled: cancelled
        _wanted[session] = config
        _start_locked()
        _cond.notify_all()
    return True


def forget(session: str) -> None:
    """Drop ``session``'s request (it pressed Train: its own run compiles it now)."""
    with _cond:
        _wanted.pop(session, None)


def status() -> dict:
    """What the threads are doing: waiting (requests), compiled so far, dropped (cancelled) requests."""
    with _cond:
        return {
            "waiting": len(_wanted),
            "done": _state["done"],
            "dropped": _state["dropped"],
            "compiling": bool(_current),
        }


def busy() -> bool:
    """Whether a layout some learner is looking at waits to be compiled or is compiling (the class warm-up
    waits meanwhile)."""
    with _cond:
        return bool(_wanted or _current)


def stop() -> None:
    """Stop after the compiles in progress (interpreter exit)."""
    _stop.set()
    with _cond:
        _wanted.clear()
        _checks.clear()
        _cond.notify_all()


def _start_locked() -> None:
    threads = [t for t in _state["threads"] if t.is_alive()]
    for _ in range(THREADS - len(threads)):
        thread = threading.Thread(target=_serve, name="sharding-lab-precompile", daemon=True)
        background.track(thread, stop)
        threads.append(thread)
        thread.start()
    _state["threads"] = threads


def _next_locked():
    """The next job: (key, config, True) for a waiting request, (key, config, False) for a layout check once no
    request waits, or None after a minute with nothing to do (the thread ends; the next request starts one)."""
    from ..training.trainer import program_key

    while not _wanted and not _checks and not _stop.is_set():
        if not _cond.wait(timeout=60):
            return None
    if _stop.is_set():
        return None
    if _wanted:
        _, config = _wanted.popitem(last=False)
        key = program_key(config, config.chunk)
        if key in _compiled or key in _current:  # another session asked for the same layout first
            return _next_locked()
        return key, config, True
    key, config = _checks.popitem(last=False)
    return key, config, False


def _serve() -> None:
    from .first_run import compile_check, compile_first_loss

    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only (Linux): students first
    except (AttributeError, OSError):
        pass
    while True:
        with _cond:
            job = _next_locked()
            if job is None:
                return
            key, config, first_loss = job
            _current.add(key)
        try:
            (compile_first_loss if first_loss else compile_check)(config)
        except Exception:  # noqa: BLE001 - a bonus: the learner's own run reports its errors
            pass
        with _cond:
            _current.discard(key)
            if first_loss:
                _state["done"] += 1
                _compiled[key] = None
                _checks[key] = config
                while len(_compiled) > MAX_REMEMBERED:
                    _compiled.popitem(last=False)
                while len(_checks) > MAX_REMEMBERED:
                    _checks.popitem(last=False)
            _cond.notify_all()
