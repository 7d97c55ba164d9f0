"""How long a search still needs: from the model's size and the machine's cores before any compile is seen, then
from the compiles seen.

Why: a search of a real model takes minutes (a compile is 95% of a candidate's time: ``py-spy`` of one ``cost`` of
llama3-8b on v5e-256, docs/measurements.md), and a class decides from the first sentence whether to wait. The
arithmetic is one rule, used by the command line and the Plan page alike:

    seconds left = seconds a candidate × candidates still to compile ÷ candidates compiled at once

- **seconds a candidate**: before any compile, :func:`prior_candidate_s` — a power law in the model's parameters
  through two measured searches (the lab's small transformer and llama3-8b, :data:`ANCHORS`); once compiles are
  seen, their mean (each compile's own wall time, as the workers saw it: the machine's load included);
- **candidates still to compile**: those the screens pass (:func:`to_compile`), less those compiled;
- **at once**: the workers, no more than the cores.
"""

from __future__ import annotations

import dataclasses
import math
import os

# (parameters, seconds one candidate's compiles took in a search, on one core of the 2-core machine): the lab's
# small transformer (2 layers, 64 wide; the Plan page's question on v5e-8: 10 compiles in 25 s) and llama3-8b on
# v5e-256 (remat full: its loop as it runs, compiled once, 48 s alone on the idle machine).
ANCHORS = ((103_000, 2.5), (8_030_000_000, 48.0))
# Candidates compiled per layout the first ranking keeps: its leanest variant, about once (the others are pruned when
# it does not fit, bounded when they cannot win, or compiled beside it; the lab's small question: 6 of 6).
COMPILED_SHARE = 1.0


def prior_candidate_s(parameters: int) -> float:
    """Seconds of one candidate's compiles before any is seen: ``a · parameters^p`` through :data:`ANCHORS`
    (clamped to their range's ends outside it)."""
    (n0, s0), (n1, s1) = ANCHORS
    p = math.log(s1 / s0) / math.log(n1 / n0)
    n = min(max(parameters, n0), n1 * 100)
    return s0 * (n / n0) ** p


def layouts(base, presets=None, remats=None) -> int:
    """How many layouts (mesh × preset) a question holds: the first ranking ranks at most that many."""
    from .candidates import candidates

    return len({(c.mesh, c.axes, c.preset) for c in candidates(base, presets, remats)})


def to_compile(screened: int | None, ranked: int | None, total: int, done: int = 0) -> int:
    """Candidates the search will compile: counted by the screens before Run where they were (a small model),
    else :data:`COMPILED_SHARE` for each of the first ranking's layouts, else every one not yet answered."""
    if screened:
        return screened
    if ranked:
        return max(1, math.ceil(ranked * COMPILED_SHARE))
    return max(0, total - done)


@dataclasses.dataclass(frozen=True)
class Progress:
    """What a search has done, as far as the estimate needs."""

    parameters: int
    to_compile: int
    compiled: int = 0
    compile_s: float = 0.0  # the compiled candidates' compile times, summed
    workers: int = 1
    cores: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def at_once(self) -> int:
        return max(1, min(self.workers, self.cores))

    @property
    def candidate_s(self) -> float:
        """Seconds one candidate's compiles take: the mean of those seen, else the prior."""
        return self.compile_s / self.compiled if self.compiled else prior_candidate_s(self.parameters)

    @property
    def seconds_left(self) -> float:
        return self.candidate_s * max(0, self.to_compile - self.compiled) / self.at_once

    @property
    def basis(self) -> str:
        """What the figure stands on, in words."""
        if self.compiled:
            return f"{self.compile_s / self.compiled:.0f} s a candidate over {self.compiled} compiled"
        return f"the model's size ({self.parameters / 1e6:,.1f}M parameters)"


def format_seconds_left(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
