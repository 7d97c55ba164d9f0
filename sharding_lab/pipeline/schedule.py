"""Pipeline schedules: which microbatch each stage works on at each tick — the table the pipelined
step runs, tick by tick, and the timeline and bubble the app shows are read from.

A *tick* is one microbatch's forward (F) or backward (B) through one stage; the pipelined step
(:mod:`.step`) runs the ticks in lockstep, each ending with the sends between neighbouring stages.
A schedule gives every stage an order of work, and :func:`build` places it greedily: at each tick a
stage does its next item as soon as what it needs was done at an earlier tick (F of microbatch k
needs the previous stage's F of k; B of k needs the next stage's B of k, or on the last stage its own
F of k), else it idles. The two orders:

- **GPipe** (Huang et al. 2019): every forward, then every backward. A stage holds the inputs of
  all m microbatches until their backward.
- **1F1B** (PipeDream-Flush, Narayanan et al. 2021): stage s runs p−s−1 forwards to fill the pipe,
  then alternates one forward and one backward, then drains. The same ticks, but a stage holds at
  most about p−s microbatches at a time.

With equal ticks both take 2(m+p−1) ticks and idle (p−1)/(m+p−1) of them — the bubble — which
:attr:`Schedule.bubble_fraction` counts from the table, not from the formula.

The table also assigns *slots*: where a stage keeps a microbatch's input (from its arrival to its
backward) and the gradient it receives. The step's buffers have as many slots as the busiest stage
needs, so the compiled program holds what the schedule keeps alive.
"""

from __future__ import annotations

import dataclasses
import functools

SCHEDULES = {
    "gpipe": "GPipe (all forwards, then all backwards)",
    "1f1b": "1F1B (one forward, one backward in the steady state)",
}
IDLE, FORWARD, BACKWARD = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Work:
    """One cell of the table: ``kind`` (``"F"`` or ``"B"``) of ``microbatch`` on a stage."""

    kind: str
    microbatch: int


def _order(name: str, stages: int, microbatches: int, stage: int) -> list[Work]:
    m = microbatches
    if name == "gpipe":
        return [Work("F", k) for k in range(m)] + [Work("B", k) for k in range(m)]
    warmup = min(stages - stage - 1, m)
    order = [Work("F", k) for k in range(warmup)]
    for i in range(m - warmup):
        order += [Work("F", warmup + i), Work("B", i)]
    return order + [Work("B", k) for k in range(m - warmup, m)]


@dataclasses.dataclass(frozen=True)
class Schedule:
    """``grid[t][s]``: the :class:`Work` stage ``s`` does at tick ``t`` (None: idle)."""

    name: str
    stages: int
    microbatches: int
    grid: tuple[tuple[Work | None, ...], ...]

    @property
    def ticks(self) -> int:
        return len(self.grid)

    @property
    def size_text(self) -> str:
        """ "4 stages × 8 microbatches" — "1 stage", "1 microbatch" when there is one."""
        return (
            f"{self.stages} stage{'s' if self.stages != 1 else ''} × "
            f"{self.microbatches} microbatch{'es' if self.microbatches != 1 else ''}"
        )

    @property
    def bubble_fraction(self) -> float:
        """Idle stage-ticks over all stage-ticks, counted in the table."""
        idle = sum(cell is None for row in self.grid for cell in row)
        return idle / (self.ticks * self.stages)

    @property
    def textbook_bubble(self) -> float:
        """(p−1)/(m+p−1): the bubble of equal stages on paper, to hold the table against."""
        p, m = self.stages, self.microbatches
        return (p - 1) / (m + p - 1)

    def tick_of(self, kind: str, stage: int, microbatch: int) -> int:
        return self._ticks[(kind, stage, microbatch)]

    @functools.cached_property
    def _ticks(self) -> dict[tuple[str, int, int], int]:
        return {
            (cell.kind, s, cell.microbatch): t
            for t, row in enumerate(self.grid)
            for s, cell in enumerate(row)
            if cell is not None
        }

    # -- what each stage keeps ---------------------------------------------------------------
    def held(self, stage: int) -> list[int]:
        """Per tick, how many microbatch inputs ``stage`` holds for a backward still to come: from
        the tick the input arrives (stage 0: its forward) up to and including its backward."""
        counts = []
        for t in range(self.ticks):
            counts.append(
                sum(self._arrival(stage, k) <= t <= self.tick_of("B", stage, k) for k in range(self.microbatches))
            )
        return counts

    def peak_held(self) -> list[int]:
        """Per stage, the most microbatch inputs it holds at once (the activation memory the
        schedule needs, in microbatches)."""
        return [max(self.held(s)) for s in range(self.stages)]

    def _arrival(self, stage: int, k: int) -> int:
        """The tick from which ``stage`` holds microbatch k's input: its own forward on stage 0,
        else the tick after the previous stage's forward (it arrives at that tick's end)."""
        return self.tick_of("F", 0, k) if stage == 0 else self.tick_of("F", stage - 1, k) + 1

    @functools.cached_property
    def slots(self) -> dict[tuple[str, int, int], int]:
        """(``"act"`` or ``"grad"``, stage, microbatch) → the buffer slot it lives in. A slot is
        taken when the input (or gradient) arrives and freed after the backward that uses it."""
        found = {}
        for buffer in ("act", "grad"):
            for s in range(self.stages):
                if buffer == "grad" and s == self.stages - 1:
                    continue  # the last stage makes its own gradient from the loss
                events = []  # (tick, 0 = free before 1 = take, microbatch)
                for k in range(self.microbatches):
                    take = self._arrival(s, k) if buffer == "act" else self.tick_of("B", s + 1, k) + 1
                    events += [(take, 1, k), (self.tick_of("B", s, k) + 1, 0, k)]
                free, used = [], 0
                for _tick, event, k in sorted(events):
                    if event == 0:
                        free.append(found[(buffer, s, k)])
                        continue
                    if free:
                        found[(buffer, s, k)] = min(free)
                        free.remove(min(free))
                    else:
                        found[(buffer, s, k)] = used
                        used += 1
        return found

    def slot_count(self, buffer: str) -> int:
        """Slots the step's buffer needs (the busiest stage's peak; at least 1)."""
        return 1 + max((v for (b, _, _), v in self.slots.items() if b == buffer), default=0)

    # -- the timeline the app draws ----------------------------------------------------------
    def timeline(self) -> list[dict]:
        """One row per stage and tick: ``{"stage", "tick", "kind": "F"/"B"/"idle", "microbatch"}``."""
        return [
            {
                "stage": s,
                "tick": t,
                "kind": cell.kind if cell else "idle",
                "microbatch": cell.microbatch if cell else None,
            }
            for t, row in enumerate(self.grid)
            for s, cell in enumerate(row)
        ]

    def to_json(self) -> dict:
        return {
            "schedule": self.name,
            "stages": self.stages,
            "microbatches": self.microbatches,
            "ticks": self.ticks,
            "bubble_fraction": self.bubble_fraction,
            "textbook_bubble": self.textbook_bubble,
            "peak_microbatches_held": self.peak_held(),
            "grid": [["idle" if c is None else f"{c.kind}{c.microbatch}" for c in row] for row in self.grid],
        }


@functools.lru_cache(maxsize=64)
def build(name: str, stages: int, microbatches: int) -> Schedule:
    """The schedule ``name`` (:data:`SCHEDULES`) for ``stages`` stages and ``microbatches``
    microbatches, placed greedily tick by tick (see the module docstring)."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}")
    orders = [_order(name, stages, microbatches, s) for s in range(stages)]
    done: dict[tuple[str, int, int], int] = {}
    grid, position = [], [0] * stages
    while any(position[s] < len(orders[s]) for s in range(stages)):
        t, row = len(grid), []
        for s in range(stages):
            work = orders[s][position[s]] if position[s] < len(orders[s]) else None
            if work is not None:
                k = work.microbatch
                need = (
                    (("F", s - 1, k) if s > 0 else None)
                    if work.kind == "F"
                    else (("B", s + 1, k) if s < stages - 1 else ("F", s, k))
                )
                if need is not None and done.get(need, t) >= t:
                    work = None
            row.append(work)
        for s, work in enumerate(row):
            if work is not None:
                done[(work.kind, s, work.microbatch)] = t
                position[s] += 1
        grid.append(tuple(row))
    return Schedule(name, stages, microbatches, tuple(grid))
