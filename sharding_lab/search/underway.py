"""What the search is doing at this moment, for whoever shows its progress between candidates.

Why: a candidate's compile can take minutes (a 3B model's first full-depth probe took 11.5 minutes on a loaded
2-core machine) and the progress callback only speaks when a candidate is answered, so a search could print
nothing for that long. The search writes here what it screens and what each worker compiles (and since when);
the command line prints it when it has been silent for a while (:func:`sharding_lab.cli.plan.print_plan`), the
Plan page shows it under its progress bar. Thread-safe: the search writes from its own thread, a page reads from
another.
"""

from __future__ import annotations

import threading
import time

# What each of a candidate's compiles is, in words (sharding_lab.search.costing.compile_job's kinds).
KIND_WORDS = {
    "whole": "as `cost` compiles it",
    "looped": "its loop of blocks as it runs",
    "resumed": "its loop of blocks as it runs, again: it waited for a step that may rule it out",
    "probe": "at full depth, to the compiler's memory check",
    "probe_short": "at a quarter of its depth, to the compiler's memory check",
    "layers1": "at 1 layer",
    "layers2": "at 2 layers",
}


class Activity:
    """The search's current work: a phase ("screening", "compiling") and the compiles in flight, each with the
    moment it started (``time.monotonic()``)."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._phase = ""
        self._since = clock()
        self._compiles: tuple[tuple[str, float], ...] = ()

    def screening(self, done: int, total: int) -> None:
        with self._lock:
            if not self._phase.startswith("screening"):
                self._since = self._clock()
            self._phase = f"screening the candidates before any compile ({done} of {total} layouts)"

    def doing(self, what: str) -> None:
        """Another phase, said as ``what`` and for how long (the best compiled again at full depth to check it)."""
        with self._lock:
            self._phase, self._since, self._compiles = what, self._clock(), ()

    def compiling(self, compiles: list[tuple[str, float]]) -> None:
        """The compiles in flight now: (what, started at) each; an empty list when none runs."""
        with self._lock:
            self._phase = "compiling"
            self._compiles = tuple(compiles)

    def sentence(self) -> str:
        """'compiling 256 fsdp remat full (its loop of blocks as it runs) for 95 s; …', or '' before anything."""
        now = self._clock()
        with self._lock:
            if self._phase == "compiling":
                if not self._compiles:
                    return ""
                running = sorted(self._compiles, key=lambda c: c[1])
                return "compiling " + "; ".join(f"{what} for {now - since:.0f} s" for what, since in running)
            return f"{self._phase}, {now - self._since:.0f} s" if self._phase else ""


def compile_words(candidate_label: str, kind: str) -> str:
    """'256 fsdp remat full (its loop of blocks as it runs)'."""
    return f"{candidate_label} ({KIND_WORDS.get(kind, kind)})"
