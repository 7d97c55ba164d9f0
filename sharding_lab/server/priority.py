"""Who compiles first on a class's server: the one rule the queue, the precompile and the class warm-up follow.

Three kinds of work compile programs on the server's cores, and XLA shares those cores among whoever asks, so
the server decides who asks. In this order:

1. **A learner's run** — the learner pressed Train and is waiting now. It always may compile. Among the runs
   queued for a training slot (:mod:`.slots`), those whose programs are compiled already are served before the
   ones that must compile (first come, first served within each): a compiled layout's first loss comes within
   a second of its start, an uncompiled one's only after seconds of compiling, so a compiled run behind one that
   compiles would wait for nothing.
2. **The layout a learner is reading** (:mod:`.precompile`) — compiled before Train is pressed, but not while a
   run waits in the queue: that run's own compile is what a learner is waiting for now.
3. **The class warm-up** (:mod:`.warm`) — what a class *may* click later, so only in the server's idle time: no
   run training or queued, no layout a learner reads waiting to be compiled, and no page drawn for
   :data:`IDLE_BEFORE_WARMING_S` (learners setting up their pages need the cores the warm-up would take).

Pure: the callers say what the server is doing (:class:`Load`) and whether a run is compiled; this module
decides. ``tests/core/test_priority.py`` holds the rule as a table.
"""

from __future__ import annotations

import dataclasses
import math

LEARNERS_RUN = "a learner's run"
LAYOUT_READ = "the layout a learner is reading"
CLASS_WARM_UP = "the class warm-up"
ORDER = (LEARNERS_RUN, LAYOUT_READ, CLASS_WARM_UP)  # who goes first

IDLE_BEFORE_WARMING_S = 3.0  # no page run for this long: the learners are reading, the class warm-up may go on


@dataclasses.dataclass(frozen=True)
class Load:
    """What the server is doing right now, as far as the rule cares."""

    training: int = 0  # runs holding a training slot
    queued: int = 0  # runs waiting for one
    layout_pending: bool = False  # a layout a learner reads is waiting to be compiled, or compiling
    quiet_for_s: float = math.inf  # seconds since the last page run ended (0 while one runs)


def may_compile(work: str, load: Load) -> bool:
    """Whether ``work`` (one of :data:`ORDER`) may compile now, given ``load``: only when nothing that comes
    before it is waiting."""
    if work == LEARNERS_RUN:
        return True
    if work == LAYOUT_READ:
        return load.queued == 0
    if work == CLASS_WARM_UP:
        return (
            load.training + load.queued == 0 and not load.layout_pending and load.quiet_for_s >= IDLE_BEFORE_WARMING_S
        )
    raise ValueError(f"unknown work {work!r}: one of {', '.join(ORDER)}")


def serve_order(queue: list, compiled: set) -> list:
    """The queued runs (oldest first) in the order they are served: the ones whose ``id`` is in ``compiled``
    first, then the others, each first come, first served."""
    return [t for t in queue if id(t) in compiled] + [t for t in queue if id(t) not in compiled]
