"""Big compiles started from pages: one queue for the server, a limit on how many compile at once.

The Communication and Compare pages, the cost panel and Train's "Ask XLA too" compile the training step of the
sidebar's model without allocating it. For a big model that is minutes of the server's cores and gigabytes of its
memory (Llama 3 70B's step: 349 s and 4.4 GB on Communication, 402 s on Compare; three students at once took the
server to 5.7 GB). So a page's compile of a **big program** — its inputs (weights, optimizer state, batch, over
all devices) hold at least ``SHARDING_LAB_BIG_COMPILE_MB`` — waits for one of ``SHARDING_LAB_MAX_PAGE_COMPILES``
turns (1 by default), first come, first served, and its page says its place ("1 compile ahead of this one") and
then that it compiles. A large model's Plan search starts in its turn of the same queue (:mod:`.searches`): it
does not start on top of the pages' big compiles; it does not hold the turn while it searches (minutes to hours,
its workers below the pages' priority, ``SHARDING_LAB_MAX_SEARCHES`` at once).

A small program never waits (a second of compiling, less than the wait would be explained in), and neither does
a program a cache already holds: the wait is taken around the compiler itself
(:func:`sharding_lab.training.step.compiles_wait_for`), for the page's own thread only, so a page redrawn from
its caches, a learner's training run and the class warm-up do not queue here (their order is :mod:`.priority`'s).
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
from typing import Callable

from .. import settings


def limit() -> int:
    return settings.MAX_PAGE_COMPILES.get()


def big_bytes() -> int:
    """From how many input bytes a program is big (``SHARDING_LAB_BIG_COMPILE_MB``, in MiB)."""
    return max(0, settings.BIG_COMPILE_MB.get()) * 2**20


def input_bytes(lowered) -> int:
    """What a lowered program's inputs hold, over all devices: its weights, optimizer state and batch."""
    import jax

    return sum(
        math.prod(arg.shape) * arg.dtype.itemsize
        for arg in jax.tree.leaves(lowered.args_info)
        if hasattr(arg, "shape") and hasattr(arg, "dtype")
    )


def is_big(lowered) -> bool:
    return input_bytes(lowered) >= big_bytes()


class PageCompiles:
    """A server's compile turns and the queue for them (the module's functions use :data:`SERVER`'s; a test may
    make its own)."""

    def __init__(self, limit_: Callable[[], int] = limit):
        self._limit = limit_
        self._turns = threading.Condition()  # guards the rest
        self._queue: collections.deque = collections.deque()  # tickets, first come first
        self.compiling = 0
        self.served = 0  # turns given since the server started (a test counts them)
        self.most_at_once = 0  # the most turns held at once

    def _free(self) -> bool:
        return self.compiling < max(1, self._limit())

    @contextlib.contextmanager
    def turn(self, on_wait: Callable[[int], None] = lambda ahead: None, cancelled: Callable[[], bool] = bool):
        """Wait for a compile turn and hold it for the ``with`` block. ``on_wait(ahead)`` is called while
        waiting (at least every 0.5 s, and whenever the line moves), with how many are before this one; an
        exception it raises (a page whose reader left: Streamlit stops its script) leaves the queue.
        ``cancelled()`` true: leave the queue, raising :class:`Cancelled`."""
        ticket = object()
        with self._turns:
            self._queue.append(ticket)
            try:
                while not (self._queue[0] is ticket and self._free()):
                    if cancelled():
                        raise Cancelled("left the compile queue")
                    ahead = self._queue.index(ticket) + self.compiling - max(1, self._limit()) + 1
                    self._turns.release()  # the page draws its place without holding up the others
                    try:
                        on_wait(max(0, ahead))
                    finally:
                        self._turns.acquire()
                    if not (self._queue[0] is ticket and self._free()):
                        self._turns.wait(0.5)
                self.compiling += 1
                self.served += 1
                self.most_at_once = max(self.most_at_once, self.compiling)
            finally:
                self._queue.remove(ticket)
                self._turns.notify_all()
        try:
            yield
        finally:
            with self._turns:
                self.compiling -= 1
                self._turns.notify_all()

    def load(self) -> tuple[int, int]:
        """(big compiles running, waiting)."""
        with self._turns:
            return self.compiling, len(self._queue)


class Cancelled(RuntimeError):
    """A wait for a compile turn given up before the turn came."""


SERVER = PageCompiles()  # this process's: every page's big compiles, and large models' searches


def load() -> tuple[int, int]:
    return SERVER.load()


def waiting_sentence(ahead: int) -> str:
    """A page's place in the queue, as its reader is told."""
    before = "next in line" if ahead == 0 else f"{ahead} compile{'s' if ahead > 1 else ''} ahead of this one"
    return (
        f"Waiting for the server's compile queue — {before} ({limit()} big program"
        f"{'s compile' if limit() > 1 else ' compiles'} at a time on this server, for the whole class)."
    )


@contextlib.contextmanager
def queued(
    on_wait: Callable[[int], None],
    on_compile: Callable[[int], None] = lambda size: None,
    on_done: Callable[[], None] = lambda: None,
):
    """Inside the block, every compile of a big program in this thread first waits for a turn of the server's
    queue (``on_wait(ahead)`` while it waits), then compiles holding the turn (``on_compile(input_bytes)`` before,
    ``on_done()`` after). A page wraps its run in this."""
    from ..training.step import compiles_wait_for

    @contextlib.contextmanager
    def turn(lowered):
        size = input_bytes(lowered)
        if size < big_bytes():
            yield
            return
        try:
            with SERVER.turn(on_wait):
                on_compile(size)
                yield
        finally:
            on_done()

    with compiles_wait_for(turn):
        yield
