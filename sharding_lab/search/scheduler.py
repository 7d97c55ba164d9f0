"""Running the search's queue of candidates: one after another in this process (:func:`run_serial`), or
compiled by worker processes (:func:`run_pool`, the mechanism in :mod:`.pool`), each candidate after its
leaner twins — remat full, a selective policy, splash attention — (:func:`pruned`), and what a lower bound may
rule out (XLA's attention, layouts whose devices repeat each other's work) after the rest, skipped when the bound
shows it cannot be faster than a compiled candidate that fits (:mod:`~sharding_lab.search.bound`)."""

from __future__ import annotations

import collections
import math
import time

from ..cost.compiled import canonical
from ..cost.floor import available, step_floor
from ..hardware import targets
from ..training.config import LabConfig
from ..training.config import plan as make_plan
from ..units import format_seconds
from .bound import bounded, defer
from .candidates import (
    SKIP_FLOOR,
    SKIP_MEMORY_INPUTS,
    SKIP_REMAT_FULL_REFUSED,
    Candidate,
    Result,
    gb,
    label,
    leaner,
    screen,
)
from .costing import cached, compile_job, cost_candidate, fill, first_jobs, prediction_of, remember, short_probe_layers
from .underway import Activity, compile_words


def pruned(candidate: Candidate, base: LabConfig, dtype: str, done: dict) -> Result | None:
    """A candidate one of whose leaner twins (:func:`~sharding_lab.search.candidates.leaner`: remat full, the
    splash kernel's attention) does not fit — compiled and refused or over HBM, or ruled out by the block inputs
    it must keep — is skipped, said why: it keeps all that twin keeps, and more."""
    for twin in (done.get(other) for other in leaner(candidate)):
        if twin is None or twin.fits or (twin.skipped is not None and twin.skipped != SKIP_MEMORY_INPUTS):
            continue
        result = screen(candidate, base, dtype)
        if result.skipped is None:
            result.skipped = SKIP_REMAT_FULL_REFUSED
            result.detail = f"{label(twin.candidate)}: " + (
                twin.refused or twin.detail or f"{gb(twin.hbm_per_chip)} per chip"
            )
        return result
    return None


def waits_for(candidate: Candidate) -> list[Candidate]:
    """The leaner twins a candidate's compiles wait for in the pool: remat full's and splash's memory check (the
    first seconds of their compiles). A step without remat does not wait for the selective policies' (a chain of
    two checks, each a minute under load): it starts beside them and is stopped, and skipped, should one of them
    not fit (:func:`pruned`)."""
    return [t for t in leaner(candidate) if candidate.remat != "none" or t.remat in ("none", "full")]


def run_serial(queue, base, dtype, stop, results, progress, activity: Activity | None = None) -> bool:
    done: dict[Candidate, Result] = {}
    searched = set(queue)
    for n, candidate in enumerate(sorted(queue, key=lambda c: defer(c, base, dtype, searched))):
        if stop is not None and stop.is_set():
            return True
        if activity is not None:
            activity.compiling([(compile_words(label(candidate), "whole"), time.monotonic())])
        result = (
            pruned(candidate, base, dtype, done)
            or bounded(candidate, base, dtype, done)
            or cost_candidate(candidate, base, dtype)
        )
        done[candidate] = result
        results.append(result)
        if progress:
            progress(n + 1, len(queue), result)
    return False


EARLY_START_WORKERS = 4  # from this many workers, an idle one compiles a deferred candidate before its turn


def run_pool(
    queue, base, dtype, stop, results, progress, workers: int, activity: Activity | None = None, floors: bool = True
) -> bool:
    """The queue compiled by ``workers`` processes (:mod:`sharding_lab.search.pool`), each candidate
    screened here first (a skip never leaves this process). Each compile is watched to the compiler's memory
    check: a looped step (remat full) is compiled once, as it runs; a full-depth
    probe of a step without remat that passes it is abandoned (its worker replaced) for 1 and 2 layers,
    extended — a refusal is the compiler's own answer at full depth. A candidate starts once its leaner twins
    have passed that check (:func:`waits_for`), and is stopped — its compiles killed — when one of them turns
    out not to fit, or when its answer is in while a compile of it still runs (a refused 1-layer compile). libtpu in
    several processes at once: :func:`sharding_lab.hardware.targets.quiet_libtpu` allows it.

    With :data:`EARLY_START_WORKERS` workers or more, a worker with nothing to do compiles a deferred candidate
    (:func:`~sharding_lab.search.bound.defer`) before its turn, or a candidate before its leaner twins passed the
    memory check (stopped, as above, should one of them not fit): on 13 cores the deferred candidates' turns and
    the twins' checks were chains of compiles one after the other while most cores waited (the llama3-8b question:
    6.2 of 13 cores busy on average). The turn still decides — the bound is held
    against the answers it would have met — so the answer is the one the search gives in turn; with fewer workers
    (the 2-core machine) every core already has a compile, and an early one would only slow those.

    With ``floors``, a looped step past its memory check is priced from the program its compiler decided, before
    code generation (:meth:`_Pool.weigh`): code generation goes on only for the steps that may still be the best.
    The best is the one every step compiled to the end gives — a floor never exceeds its step — and every step
    still says whether it fits."""
    targets.quiet_libtpu()
    state = _Pool(queue, base, dtype, results, progress, workers, floors)
    try:
        while state.waiting or state.pending:
            if stop is not None and stop.is_set():
                return True
            state.prune_pending()
            state.unpark()
            state.decide_early()
            state.kill_unneeded()
            state.start_waiting()
            state.send_jobs()
            state.collect()
            if activity is not None:
                activity.compiling(in_flight(state.pool, state.timeline))
            time.sleep(0.1)
        return False
    finally:  # a worker only compiles: nothing to flush, and stopping each politely took ~1 s apiece
        for worker in state.pool:
            worker.kill()


class _Pool:
    """:func:`run_pool`'s state — the workers, the candidates waiting, started (``pending``) and answered
    (``done``), the compile jobs queued, each compile's timeline — and what it does at each turn of its loop."""

    def __init__(self, queue, base, dtype, results, progress, workers: int, floors: bool = True):
        from ..hardware.chips import chip as get_chip
        from . import pool as sw

        self.queue, self.base, self.dtype, self.results, self.progress = queue, base, dtype, results, progress
        self.workers, self.sw = workers, sw
        self.capacity = get_chip(base.on.chip).capacity
        self.context = sw.context()
        self.pool = [sw.Worker(self.context) for _ in range(workers)]
        self.done: dict[Candidate, Result] = {}
        self.passed_check: dict[Candidate, bool] = {}  # a leaner twin that passed the compiler's memory check
        self.pending: dict[Candidate, Result] = {}
        self.parts: dict[Candidate, dict] = {}
        self.checked: set = set()
        self.jobs: collections.deque = collections.deque()
        # kind → [sent, memory check passed, answered] (perf_counter seconds)
        self.timeline: dict[Candidate, dict] = {}
        self.waiting = list(queue)
        self.count = 0
        self.searched = set(queue)
        self.ranks: dict[Candidate, int] = {}
        self.early: set = set()  # deferred candidates an idle worker compiles before their turn (many workers only)
        self.held: dict = {}  # their answers, kept until their turn: (runs, depths)
        # a looped step past its memory check: its program priced before code generation (cost.floor); those
        # generating code; those stopped at the check, waiting for a lower floor's answer (parked)
        self.use_floors = floors
        self.floors: dict[Candidate, float] = {}
        self.generating: set = set()
        self.parked: set = set()

    def later(self, candidate) -> int:
        if candidate not in self.ranks:
            self.ranks[candidate] = defer(candidate, self.base, self.dtype, self.searched)
        return self.ranks[candidate]

    def record(self, candidate, result) -> None:
        self.early.discard(candidate)
        self.held.pop(candidate, None)
        self.generating.discard(candidate)
        self.parked.discard(candidate)
        self.done[candidate] = result
        self.results.append(result)
        self.count += 1
        if self.progress:
            self.progress(self.count, len(self.queue), result)

    def enqueue(self, candidate, kind, urgent=False) -> None:
        job = self.sw.Job((candidate, kind), compile_job, (kind, candidate.config(self.base), self.dtype))
        self.jobs.appendleft(job) if urgent else self.jobs.append(job)

    def finish(self, candidate, runs, depths) -> None:
        if candidate in self.early:  # compiled before its turn: its answer waits for the turn's bound (decide_early)
            self.held[candidate] = (runs, depths)
            return
        result = self.pending.pop(candidate)
        self.parts.pop(candidate, None)
        fill(result, prediction_of(candidate.config(self.base), self.dtype, runs))
        result.compiled_layers = depths
        result.step_floor_s = self.floors.get(candidate)
        result.timeline = self.timeline.pop(candidate, None)
        remember(candidate, self.base, self.dtype, result)
        self.record(candidate, result)

    def on_result(self, candidate, kind, compiled) -> None:
        self.timeline.setdefault(candidate, {}).setdefault(kind, [None, None, None])[2] = time.perf_counter()
        if candidate not in self.pending:
            return  # its answer came from another compile (a refused 1-layer compile ends it)
        got = self.parts.setdefault(candidate, {})
        got[kind] = compiled
        layers = getattr(self.base.model, "layers", None)
        if kind in ("looped", "resumed"):
            self.passed_check[candidate] = not compiled.refused
        too_big = kind == "probe" and (compiled.refused or compiled.hbm_needed > self.capacity)
        if kind == "probe_short" and compiled.refused:  # refused at a quarter of its layers: at all of them too
            self.finish(candidate, [compiled], (short_probe_layers(layers),))
        elif kind == "probe_short":  # compiled before its memory check was seen (a small model): the full depth's
            self.enqueue(candidate, "probe", urgent=True)
        elif kind in ("whole", "looped", "resumed") or too_big:
            self.finish(candidate, [compiled], (layers,) if layers else ())
        elif kind == "probe":  # compiled whole before its memory check was seen (a small model): it fits, so
            self.enqueue(candidate, "layers1", urgent=True)  # extended as when the check is seen (and in one process)
            self.enqueue(candidate, "layers2", urgent=True)
        elif kind == "layers1" and compiled.refused:
            self.finish(candidate, [compiled], (1,))
        elif kind in ("layers1", "layers2") and {"layers1", "layers2"} <= set(got):
            self.finish(candidate, [got["layers1"], got["layers2"]], (1, 2))

    def on_memory_check(self, index, candidate, kind) -> None:
        self.checked.add((candidate, kind))
        self.timeline.setdefault(candidate, {}).setdefault(kind, [None, None, None])[1] = time.perf_counter()
        if kind == "probe_short":  # it passed at a quarter of its layers: abandon it for the full depth's probe
            self.pool[index].kill()
            self.pool[index] = self.sw.Worker(self.context)
            self.enqueue(candidate, "probe", urgent=True)
        elif kind == "probe":  # it fits at full depth: abandon the unrolled program before code generation,
            self.pool[index].kill()  # and compile 1 and 2 layers to extend
            self.pool[index] = self.sw.Worker(self.context)
            self.enqueue(candidate, "layers1", urgent=True)
            self.enqueue(candidate, "layers2", urgent=True)
        else:  # the loop as it runs fits: the candidates waiting for it may start
            self.passed_check[candidate] = True
            self.weigh(index, candidate, kind)

    def weigh(self, index, candidate, kind) -> None:
        """A looped step past its memory check, its program priced before code generation (:mod:`sharding_lab.cost.
        floor`): code generation — minutes — goes on only for a step that may still be the best. One whose floor is
        no less than a compiled fitting step's is answered now (:meth:`floored`); one whose floor is above that of
        another step generating code waits — its compile stopped, parked until that one is answered (:meth:`unpark`),
        which will most likely rule it out (a floor is usually the step itself)."""
        floor = None if kind == "resumed" else self.floor_of(candidate, self.pool[index])  # kept for its row
        if not self.use_floors:
            floor = None
        if floor is None or not self.floored(candidate):
            if floor is not None and self.lower_generating(floor):
                self.pool[index].kill()
                self.pool[index] = self.sw.Worker(self.context)
                self.parked.add(candidate)
            else:
                self.generating.add(candidate)

    def lower_generating(self, floor: float) -> bool:
        return any(self.floors.get(d, math.inf) <= floor for d in self.generating)

    def unpark(self) -> None:
        """A parked step no step of a floor as low is generating code for any more, and not ruled out by their
        answers: sent again, first in the queue (it may be the best), to generate its code this time."""
        for candidate in [c for c in self.parked if not self.lower_generating(self.floors[c])]:
            self.parked.discard(candidate)
            self.enqueue(candidate, "resumed", urgent=True)

    def floor_of(self, candidate, worker) -> float | None:
        """The step's floor from the program its compiler decided (None where it was not written, or the chip has
        no calibration), kept."""
        program = worker.program() if available() else None
        if program is None:
            return None
        floor = step_floor(make_plan(canonical(candidate.config(self.base))), self.dtype, program).step_s
        if floor is not None:
            self.floors[candidate] = floor
        return floor

    def floored(self, candidate) -> bool:
        """Answer ``candidate`` — past its memory check, generating code or waiting — when its floor is no less than
        the step of a compiled candidate that fits: it fits (the compiler's answer, given at its memory check) and
        cannot be the best. Its code generation, which would only have priced it, is not finished."""
        floor = self.floors.get(candidate)
        # held against steps compiled whole only: an extended step's figures may still move when the best is compiled
        # at full depth (search.depth), and a step answered here could then no longer be chosen
        fitting = [r for r in self.done.values() if r.fits and r.step_s is not None and not r.extended]
        if floor is None or not fitting or candidate in self.held:
            return False
        best = min(fitting, key=lambda r: r.step_s)
        if floor < best.step_s:
            return False
        result = self.pending.pop(candidate)
        self.parts.pop(candidate, None)
        result.skipped, result.fits, result.step_floor_s = SKIP_FLOOR, True, floor
        result.detail = (
            f"its program before code generation takes at least {format_seconds(floor)}, not below "
            f"{label(best.candidate)}'s step of {format_seconds(best.step_s)}"
        )
        result.timeline = self.timeline.pop(candidate, None)
        result.compile_s = compiling_s(result.timeline, running=candidate not in self.parked)
        self.record(candidate, result)
        return True

    def turn(self, candidate) -> bool:
        """Whether every candidate deferred less than ``candidate`` is answered (bound.defer's order)."""
        later = self.later
        return not (later(candidate) and any(later(c) < later(candidate) for c in (*self.waiting, *self.pending)))

    def decide_early(self) -> None:
        """Candidates compiled before their turn, decided when it comes as if started then: the bound is held against
        the same answers (all of them first, so that one's answer does not bound another of the same turn), and a
        candidate it rules out is skipped — its compiles killed, its figures never used."""
        due = [c for c in self.early if c in self.pending and self.turn(c)]
        verdicts = {c: bounded(c, self.base, self.dtype, self.done) for c in due}
        for candidate, skipped in verdicts.items():
            if skipped is not None:
                self.pending.pop(candidate)
                self.parts.pop(candidate, None)
                self.timeline.pop(candidate, None)
                self.record(candidate, skipped)
                continue
            self.early.discard(candidate)
            if candidate in self.held:
                self.finish(candidate, *self.held.pop(candidate))

    def prune_pending(self) -> None:
        """A started candidate whose leaner twin was found not to fit after it started, or whose floor a compiled
        fitting step has since reached (:meth:`floored`): it stops here."""
        for candidate in list(self.pending):
            result = pruned(candidate, self.base, self.dtype, self.done)
            if result is not None:
                self.pending.pop(candidate)
                self.parts.pop(candidate, None)
                self.record(candidate, result)
            elif self.use_floors and candidate in self.floors:
                self.floored(candidate)

    def kill_unneeded(self) -> None:
        """A compile whose candidate is answered (or held until its turn) is not needed any more: its worker
        replaced."""
        for index, worker in enumerate(self.pool):
            if worker.job is not None and (worker.job.key[0] not in self.pending or worker.job.key[0] in self.held):
                worker.kill()
                self.pool[index] = self.sw.Worker(self.context)

    def start_waiting(self) -> None:
        """Each waiting candidate whose leaner twins' fit is known and whose turn has come (or, with an idle worker,
        one before its twins' check or a deferred one early): answered from the cache or a skip, else its first
        compiles queued."""
        base, dtype, done, checked = self.base, self.dtype, self.done, self.passed_check
        free = 0
        if self.workers >= EARLY_START_WORKERS:
            free = sum(worker.job is None for worker in self.pool) - len(self.jobs)
        for candidate in list(self.waiting):
            blocked = any(t in self.queue and t not in done and t not in checked for t in waits_for(candidate))
            if blocked and free <= 0:
                continue  # its leaner twins' fit first — unless a worker idles (many workers): pruned() stops it
            # deferred (bound.defer): the compiled candidates its bound is held against first
            if not self.turn(candidate):
                if free <= 0 or pruned(candidate, base, dtype, done) or bounded(candidate, base, dtype, done):
                    continue  # no idle worker, or already ruled out (a bound only tightens as results come)
                self.early.add(candidate)  # an idle worker compiles it now; its turn decides (decide_early)
                free -= len(first_jobs(candidate.config(base)))
            elif blocked:
                free -= len(first_jobs(candidate.config(base)))
            self.waiting.remove(candidate)
            earlier = cached(candidate, base, dtype)
            result = (
                earlier
                or pruned(candidate, base, dtype, done)
                or bounded(candidate, base, dtype, done)
                or screen(candidate, base, dtype)
            )
            if earlier or result.skipped is not None:
                self.record(candidate, result)
                continue
            self.pending[candidate] = result
            for kind in first_jobs(candidate.config(base)):
                self.enqueue(candidate, kind)

    def send_jobs(self) -> None:
        """Each idle worker gets the next queued compile whose candidate is still to answer."""
        for worker in self.pool:
            while worker.job is None and self.jobs:
                job = self.jobs.popleft()
                if job.key[0] in self.pending:
                    worker.send(job)
                    self.timeline.setdefault(job.key[0], {})[job.key[1]] = [time.perf_counter(), None, None]

    def collect(self) -> None:
        """Each worker's compile that has answered, or that passed the compiler's memory check (a looped step, a
        full-depth probe)."""
        for index, worker in enumerate(self.pool):
            if worker.job is None:
                continue
            candidate, kind = worker.job.key
            compiled = worker.result()
            if compiled is not None:
                self.on_result(candidate, kind, compiled)
            elif (
                kind in ("looped", "resumed", "probe", "probe_short")
                and (candidate, kind) not in self.checked
                and worker.memory_checked()
            ):
                self.on_memory_check(index, candidate, kind)


def compiling_s(timeline: dict | None, running: bool = True) -> float:
    """Seconds a candidate's compiles took until now (kind → [sent, memory check passed, answered], perf_counter
    seconds): each to its answer, one stopped at its memory check to that check, the last sent — while it still
    ``running`` (not parked) — to now."""
    now, sent = time.perf_counter(), [t for t in (timeline or {}).values() if t[0] is not None]
    last = max((t[0] for t in sent), default=None) if running else None
    return sum((a or (now if s == last else c or now)) - s for s, c, a in sent)


def in_flight(pool, timeline: dict) -> list[tuple[str, float]]:
    """The compiles the workers run now, in words, each with its start (``time.monotonic()``, as Activity reads)."""
    shift = time.monotonic() - time.perf_counter()  # the timeline is in perf_counter seconds
    out = []
    for worker in pool:
        if worker.job is not None:
            candidate, kind = worker.job.key
            sent = timeline.get(candidate, {}).get(kind, [None])[0]
            out.append(
                (compile_words(label(candidate), kind), (sent if sent is not None else time.perf_counter()) + shift)
            )
    return out
