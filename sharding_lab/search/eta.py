"""How long a search still needs: from the model's size and the machine's cores before any compile is seen, then
from the compiles seen.

Why: a search of a real model takes minutes (a compile is 95% of a candidate's time: ``py-spy`` of one ``cost`` of
llama3-8b on v5e-256, docs/measurements.md), and a class decides from the first sentence whether to wait. The
arithmetic is one rule, used by the command line and the Plan page alike:

    seconds left = seconds a candidate × candidates still to compile ÷ candidates compiled at once

- **seconds a candidate**: before any compile, :func:`prior_candidate_s` — a power law in the model's parameters
  through two measured compiles alone (the lab's small transformer and llama3-8b, :data:`ANCHORS`), slowed by the
  compiles beside it (× √ of those at once: compiles share the memory bus — llama3-8b's 50 s alone took 138 s
  with 8.5 at once on the TPU machine's 13 cores); once compiles are seen, their mean (each compile's own wall
  time, as the workers saw it: the machine's load and the other compiles included);
- **candidates still to compile**: those the screens pass (:func:`to_compile`): each layout the first ranking keeps,
  its leanest variant (remat × attention) and :data:`COMPILED_SHARE` of the others — less those compiled;
- **at once**: :data:`IN_FLIGHT_SHARE` of the workers (no more than the cores), the share a search keeps busy.

Measured (docs/measurements.md, "the search compiles less"): the llama3-8b question on 13 cores took 340 s;
after the first ranking (3 s) the rule says 364 s (1.07×), after the first compile (157 s) 486 s (1.43×).
"""

from __future__ import annotations

import dataclasses
import math
import os

# (parameters, seconds one candidate's compiles take alone): the lab's small transformer (2 layers, 64 wide; the Plan
# page's question on v5e-8: 10 compiles in 25 s on the 2-core machine) and llama3-8b on v5e-256 (remat full: its
# loop as it runs, compiled once: 2,092 s of CPU for 21 compiles on the TPU machine, about 50 s a compile alone).
ANCHORS = ((103_000, 2.5), (8_030_000_000, 50.0))
# Of each ranked layout's variants (remat × attention) beyond its leanest (always compiled), the share compiled: the
# others are pruned when a leaner one does not fit or bounded when they cannot win (llama3-8b on v5e-256: 21 compiles
# for 10 layouts × 3 remats, 11 of the 20 others).
COMPILED_SHARE = 0.55
# Of the workers, the share compiling on average over a search: a twin's memory check, a deferred turn and the last
# compiles leave some idle (llama3-8b on 13 cores: 2,905 s of compiles in 340 s, 8.5 at once).
IN_FLIGHT_SHARE = 0.65


def prior_candidate_s(parameters: int) -> float:
    """Seconds of one candidate's compiles before any is seen: ``a · parameters^p`` through :data:`ANCHORS`
    (clamped to their range's ends outside it)."""
    (n0, s0), (n1, s1) = ANCHORS
    p = math.log(s1 / s0) / math.log(n1 / n0)
    n = min(max(parameters, n0), n1 * 100)
    return s0 * (n / n0) ** p


def question(base, presets=None, remats=None, attentions=None) -> tuple[int, int]:
    """How many layouts (mesh × preset) a question holds — the first ranking ranks at most that many — and how many
    variants (remat × attention) of each it searches."""
    from .candidates import candidates

    todo = candidates(base, presets, remats, attentions)
    return len({(c.mesh, c.axes, c.preset) for c in todo}), max(1, len({(c.remat, c.attention) for c in todo}))


def to_compile(screened: int | None, ranked: int | None, total: int, done: int = 0, variants: int = 1) -> int:
    """Candidates the search will compile: counted by the screens before Run where they were (a small model),
    else for each of the first ranking's layouts its leanest variant and :data:`COMPILED_SHARE` of its other
    ``variants``, else every one not yet answered."""
    if screened:
        return screened
    if ranked:
        return max(1, math.ceil(ranked * (1 + (variants - 1) * COMPILED_SHARE)))
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
    wall_s: float = 0.0  # seconds since the compiles began (0: not known)

    @property
    def at_once(self) -> int:
        return max(1, min(self.workers, self.cores))

    @property
    def in_flight(self) -> float:
        """Compiles under way on average: :data:`IN_FLIGHT_SHARE` of those at once (one process: 1)."""
        return max(1.0, IN_FLIGHT_SHARE * self.at_once)

    @property
    def prior_s(self) -> float:
        """Seconds one candidate's compiles take before any is seen: the prior slowed by the compiles beside it (× √
        of those in flight)."""
        return prior_candidate_s(self.parameters) * math.sqrt(self.in_flight)

    @property
    def candidate_s(self) -> float:
        """Seconds one candidate's compiles take: the prior and the compiles seen, the prior counted as
        :attr:`in_flight` compiles of its own (a pseudo-count). Why: the first compiles to answer are the short
        ones — a step refused at its memory check, a probe at a quarter of its layers — so their mean alone said
        84 s where the llama3-8b question's steps took 145 s each (13 cores); once a wave of compiles is in,
        what was seen outweighs the prior."""
        weight = self.in_flight
        return (self.prior_s * weight + self.seen_s) / (weight + self.compiled)

    @property
    def seen_s(self) -> float:
        """Seconds the compiled candidates took: their compiles, or in one process the wall time since the compiles
        began — there a candidate is also lowered, read and priced between compiles (the lab's small transformer on
        v5e-8: 2.5 s a compile, 3.25 s a candidate)."""
        if self.at_once == 1 and self.wall_s:
            return max(self.compile_s, self.wall_s)
        return self.compile_s

    @property
    def seconds_left(self) -> float:
        return self.candidate_s * max(0, self.to_compile - self.compiled) / self.in_flight

    @property
    def basis(self) -> str:
        """What the figure stands on, in words."""
        size = f"the model's size ({self.parameters / 1e6:,.1f}M parameters)"
        if self.compiled:
            return f"{self.compiled} compiled, {self.seen_s / self.compiled:.0f} s each, and {size}"
        return size


def format_seconds_left(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
