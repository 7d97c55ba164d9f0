"""A helper process at the lowest CPU priority, paused while the server is busy and gone when the server is.

The class warm-up (:mod:`.warm`) compiles most of its layouts in such a process. A compile in the server's own
process shares XLA's thread pools with the students' compiles and runs, at their priority (a thread cannot lower
its own without lowering the pools it starts: :mod:`.background`), and once started it cannot be paused. A child
process can be: :func:`run` stops it with SIGSTOP the moment ``busy()`` says so and resumes it with SIGCONT when
the server is idle; at nice 19, in a session (Linux autogroup) of its own also at 19, it yields the cores to
everything else on the machine; it is killed when its work is called off (the warm-up stopped, the server exiting
— XLA survives a process that ends); and :func:`leave_with_parent` makes it end when the server is killed
outright, stopped or not. POSIX only (:data:`AVAILABLE`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

AVAILABLE = hasattr(os, "killpg")  # process groups, SIGSTOP and SIGCONT: not on Windows
POLL_S = 0.2  # how often the server looks whether it needs the cores the child is using
# What the warm-up's child may hold: compiling layout after layout it grew to 5.9-8.2 GB, and held 7.4 GB while
# paused for ten minutes. Above the bound, or paused longer than RELEASE_IDLE_S, it is ended (the programs it
# compiled are in the disk cache) and a fresh one goes on from where it got, once the server is idle.
MEMORY_BOUND_BYTES = 1_500_000_000
RELEASE_IDLE_S = 60.0
RELEASED = -1000  # run()'s answer when it ended the child for its memory or its idleness (exit codes are ≥ -255)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where `sharding_lab` is, whatever the server's directory


def run(
    module: str,
    message: object,
    busy: Callable[[], bool],
    stopped: Callable[[], bool],
    on_line: Callable[[dict], None],
    on_state: Callable[..., None],
    memory_bound: int | None = None,
    release_idle_s: float | None = None,
) -> int | None:
    """Run ``python -m module`` with ``message`` as JSON on its standard input, each JSON line it prints handed to
    ``on_line``; paused while ``busy()`` once it has said its first line (by then it has called
    :func:`leave_with_parent`: a process stopped before that would outlive a server killed outright), killed once
    ``stopped()``. ``on_state(pid=…)`` when it starts, ``on_state(paused=…)`` as it is paused and resumed. Ended
    too, with ``on_state(released=why)``, once it holds more than ``memory_bound`` bytes or has been paused for
    ``release_idle_s``. Its exit status, None when it was killed as stopped, :data:`RELEASED` when it was released."""
    child = subprocess.Popen(
        [sys.executable, "-m", module, str(os.getpid())],  # the server's id: see leave_with_parent
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=PACKAGE_ROOT,
        start_new_session=True,  # its own session: its own autogroup, whose share of the CPU is lowered
    )
    lowest_priority(child.pid)  # at once, not after its imports: they take seconds of CPU too
    on_state(pid=child.pid, paused=False)
    with child:
        with contextlib.suppress(OSError):  # one that died on start says so by its exit status
            child.stdin.write(json.dumps(message).encode())
            child.stdin.close()
        ready = threading.Event()
        reader = threading.Thread(
            target=_read_lines, args=(child.stdout, on_line, ready), name="sharding-lab-idle-process"
        )
        reader.start()
        paused = killed = False
        released = None
        paused_since = 0.0
        while child.poll() is None:
            released = _why_release(child.pid, memory_bound, paused and release_idle_s, paused_since)
            if stopped() or released:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)  # a stopped process dies too
                killed = True
                break
            if ready.is_set() and busy() != paused:
                paused = not paused
                paused_since = time.monotonic()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGSTOP if paused else signal.SIGCONT)
                on_state(paused=paused)
            time.sleep(POLL_S)
        child.wait()
        reader.join()
    on_state(paused=False, **({"released": released} if released else {}))
    return RELEASED if released else None if killed else child.returncode


def _why_release(pid: int, memory_bound: int | None, release_idle_s, paused_since: float) -> str | None:
    """Why the child should be ended now to give its memory back: over its bound, or paused too long; else None."""
    if release_idle_s and time.monotonic() - paused_since > release_idle_s:
        return f"paused over {release_idle_s:.0f} s"
    if memory_bound:
        import psutil

        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).memory_info().rss > memory_bound:
                return f"over its {memory_bound / 1e9:.1f} GB"
    return None


def _read_lines(stream, on_line: Callable[[dict], None], ready: threading.Event) -> None:
    for line in stream:
        with contextlib.suppress(ValueError):
            on_line(json.loads(line))
            ready.set()


def lowest_priority(pid: int = 0) -> None:
    """Lower process ``pid`` (0: this one) to the lowest CPU priority: its main thread to nice 19, before JAX
    starts (XLA's thread pools inherit the priority of the thread that starts them), and its session's autogroup
    too (Linux shares the cores between sessions first, then between the threads of each by their nice)."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid or 'self'}/autogroup").write_text("19")


def leave_with_parent() -> None:
    """In the child: end when the server does. Linux kills it (SIGKILL reaches a stopped process too) when the
    server's thread that started it ends (``PR_SET_PDEATHSIG``); elsewhere a thread looks every second. A server
    that died before this call (the child's imports take seconds) is noticed by its id, which :func:`run` passed."""
    parent = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before that
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="sharding-lab-orphan", daemon=True).start()


def read_message() -> object:
    """In the child: the JSON message :func:`run` wrote on its standard input."""
    return json.loads(sys.stdin.read())


def say(values: dict) -> None:
    """In the child: one JSON line for :func:`run`'s ``on_line``."""
    print(json.dumps(values), flush=True)
