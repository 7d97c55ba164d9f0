"""How long a search still needs: from the model's size and the machine's cores before any compile is seen, then
from the compiles seen.

Why: a search of a real model takes minutes (a compile is 95% of a candidate's time: ``py-spy`` of one ``cost`` of
llama3-8b on v5e-256, docs/measurements.md), and a class decides from the first sentence whether to wait. The
arithmetic is one rule, used by the command line and the Plan page alike:

    seconds left = seconds a candidate × (candidates still to compile ÷ candidates compiled at once)

(with floors — workers, remat steps — the prior's rounds after the first count :data:`CHECK_SHARE` each: most
steps are answered at the compiler's memory check)

- **seconds a candidate**: before any compile, :func:`prior_candidate_s` — one compile's time alone, interpolated
  on a log-log scale through three measured compiles (:data:`ANCHORS`; on a machine with fewer cores than a
  compile's threads, about three, its CPU time over the cores), × (compiles at once)^:data:`CONTENTION` beside the
  others (llama3-8b: 66 s alone, 145 s with 12 at once on 13 cores), and in one process :data:`SERIAL_OVERHEAD_S`
  more; once compiles are seen, their times (each compile's own wall time, as the workers saw it) blended with the
  prior, counted as a round's worth of compiles of its own; before any answer at least :data:`ROUNDS` rounds;
- **candidates still to compile**: those the screens pass (:func:`to_compile`): each layout the first ranking keeps,
  its leanest variant (remat × attention) and :data:`COMPILED_SHARE` of the others — less those compiled;
- **at once**: :data:`IN_FLIGHT_SHARE` of the workers (no more than the cores), the share a search keeps busy.

Measured (docs/measurements.md, "the estimate against the time taken"): five questions on the TPU machine's 13
cores, after the first ranking the rule says 0.37–1.22× the time they took (four within 1.5×), after the first
compile 0.64–1.35× — fitted on those same runs, so no test of it; on the 2-core machine, not fitted on, the
small question 1.23× and llama3-8b 1.22× (1,644 s said, 1,346.5 s taken).
"""

from __future__ import annotations

import dataclasses
import math
import os

# (parameters, seconds one candidate's compile takes alone, seconds of CPU it takes): measured with nothing beside
# it on the TPU machine's 13 cores (tools/compile_alone.py, docs/measurements.md) — the lab's small transformer
# (2 layers, 64 wide, v5e-8), GPT-2 small (v5e-8, remat full: its loop as it runs) and llama3-8b (v5e-256, remat
# full, 4,096 tokens a sequence). On the 2-core machine, quiet, the rule below (CPU time over 2 cores) says 30.4 s
# and 91.4 s for the last two, and they took 28.8 s and 96.0 s.
ANCHORS = ((104_768, 3.0, 3.3), (124_337_664, 20.6, 60.7), (8_030_261_248, 66.4, 182.8))
# Of each ranked layout's variants (remat × attention) beyond its leanest (always compiled), the share compiled: the
# others are pruned when a leaner one does not fit or bounded when they cannot win (llama3-8b on v5e-256: 21 compiles
# for 10 layouts × 3 remats, 11 of the 20 others).
COMPILED_SHARE = 0.55
# Of the workers, the share compiling on average over a search: a twin's memory check, a deferred turn and the last
# compiles leave some idle (llama3-8b on 13 cores: 2,905 s of compiles in 340 s, 8.5 at once).
IN_FLIGHT_SHARE = 0.65


def alone(parameters: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one compile alone on the TPU machine: :data:`ANCHORS` interpolated on a log-log scale
    (held at the ends' values outside their range)."""
    n = min(max(parameters, ANCHORS[0][0]), ANCHORS[-1][0])
    for (n0, w0, c0), (n1, w1, c1) in zip(ANCHORS, ANCHORS[1:]):
        if n <= n1:
            f = math.log(n / n0) / math.log(n1 / n0)
            return w0 * (w1 / w0) ** f, c0 * (c1 / c0) ** f
    raise AssertionError("unreachable: n is clamped to the anchors' range")


# How a compile slows beside others: × (compiles at once)^CONTENTION — they share the cores (a compile runs on about
# three threads) and the memory bus. Fitted on the TPU machine's 13 cores (docs/measurements.md): GPT-2 small's
# 20.6 s alone took 44–60 s with 8–12 at once, an 8-layer 256-wide model's 9–11 s took 27–48 s, llama3-8b's 66 s
# took 145 s with 12 at once.
CONTENTION = 0.4
# The fewest rounds of compiles a search takes: a candidate's leaner twin (remat full, the splash kernel) passes the
# compiler's memory check before the candidate starts, so even with a worker for every candidate they come in two.
ROUNDS = 2
# With floors (workers, a question with looped remat steps: search.scheduler answers a step that fits but cannot win
# at the compiler's memory check), of a round of compiles beyond the first the share a candidate costs: the first
# round holds the best's code generation, the others mostly memory checks. Fitted on llama3-8b on v5e-256 (13 cores:
# 205.3 s taken, 214 s said; 2 cores: 411.3 s taken, 487 s said) and GPT-2 small on v5e-16 (13 cores: 48.9 s, 61 s).
CHECK_SHARE = 0.25
# Seconds a candidate takes in one process beyond its compile: lowered, its program read and priced (the small
# transformer on v5e-8: 3.25 s a candidate for 2.5 s compiles on the 2-core machine, 4.4 s for 3.0 on the TPU
# machine's). With workers the search's own process does it while they compile.
SERIAL_OVERHEAD_S = 1.0


def prior_candidate_s(parameters: int, in_flight: float = 1.0, cores: int | None = None) -> float:
    """Seconds of one candidate's compiles before any is seen, ``in_flight`` compiles at once on ``cores``: its
    time alone (on a machine with fewer cores than its threads, its CPU time over the cores), × ``in_flight`` ^
    :data:`CONTENTION`."""
    cores = cores or os.cpu_count() or 1
    wall, cpu = alone(parameters)
    return max(wall, cpu / cores) * in_flight**CONTENTION


def floors(base, remats=None, workers: int = 1) -> bool:
    """Whether a search of ``base`` answers steps at their memory check (:mod:`sharding_lab.cost.floor`): with a
    compiler that gives floors, in workers, for a family with remat, a question with a remat policy (the default holds
    two)."""
    from ..cost.floor import available

    has_remat = "remat" in base.family.step_only_fields
    return available() and workers > 1 and has_remat and (remats is None or any(r != "none" for r in remats))


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
    floors: bool = False  # steps that cannot win are answered at their memory check (:func:`floors`)
    # of ``compiled``, those answered at the compiler's memory check — refused there, or fitting but unable to win —
    # and their compiles' times, summed (in ``compile_s`` too); the others generated their code
    checked: int = 0
    checked_s: float = 0.0

    @property
    def at_once(self) -> int:
        return max(1, min(self.workers, self.cores))

    @property
    def in_flight(self) -> float:
        """Compiles under way on average: :data:`IN_FLIGHT_SHARE` of those at once (one process: 1)."""
        return max(1.0, IN_FLIGHT_SHARE * self.at_once)

    @property
    def prior_s(self) -> float:
        """Seconds one candidate's compiles take before any is seen, beside those in flight
        (:func:`prior_candidate_s`)."""
        overhead = SERIAL_OVERHEAD_S if self.at_once == 1 else 0.0
        return prior_candidate_s(self.parameters, self.in_flight, self.cores) + overhead

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
        """A candidate's seconds × the rounds of compiles left: those still to compile over those at once, and
        before any answer no fewer than :data:`ROUNDS` (while some remain)."""
        left = max(0, self.to_compile - self.compiled)
        rounds = left / self.in_flight
        if not self.compiled and left:
            rounds = max(rounds, min(ROUNDS, left))
        if not self.floors or not left:
            return self.candidate_s * rounds
        return self.floored_left(rounds)

    def floored_left(self, rounds: float) -> float:
        """With floors: until a step was compiled to the end, one round of whole compiles (the best's code generation,
        the others' memory checks beside it) and memory checks for the rounds after; then memory checks only. A whole
        compile's seconds and a check's are each the prior blended with those seen, as :attr:`candidate_s` does."""
        weight, whole = self.in_flight, self.compiled - self.checked
        check_s = (self.prior_s * CHECK_SHARE * weight + self.checked_s) / (weight + self.checked)
        if whole:
            return check_s * rounds
        return self.candidate_s + check_s * max(0.0, rounds - 1)

    @property
    def basis(self) -> str:
        """What the figure stands on, in words."""
        size = f"the model's size ({self.parameters / 1e6:,.1f}M parameters)"
        if self.compiled:
            return f"{self.compiled} compiled, {self.seen_s / self.compiled:.0f} s each, and {size}"
        return size


def format_seconds_left(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
