"""Running the search's queue of candidates: one after another in this process (:func:`run_serial`), or
compiled by worker processes (:func:`run_pool`, the mechanism in :mod:`.pool`), each candidate after its
leaner twins — remat full, a selective policy, splash attention — (:func:`pruned`), and what a lower bound may
rule out (XLA's attention, layouts whose devices repeat each other's work) after the rest, skipped when the bound
shows it cannot be faster than a compiled candidate that fits (:mod:`~sharding_lab.search.bound`)."""

from __future__ import annotations

import collections
import time

from ..hardware import targets
from ..training.config import LabConfig
from .bound import bounded, defer
from .candidates import SKIP_MEMORY_INPUTS, SKIP_REMAT_FULL_REFUSED, Candidate, Result, gb, label, leaner, screen
from .costing import cached, compile_job, cost_candidate, fill, first_jobs, prediction_of, remember
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


def run_pool(queue, base, dtype, stop, results, progress, workers: int, activity: Activity | None = None) -> bool:
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
    (the 2-core machine) every core already has a compile, and an early one would only slow those."""
    from ..hardware.chips import chip as get_chip
    from . import pool as sw

    targets.quiet_libtpu()
    capacity = get_chip(base.on.chip).capacity
    context = sw.context()
    pool = [sw.Worker(context) for _ in range(workers)]
    done: dict[Candidate, Result] = {}
    passed_check: dict[Candidate, bool] = {}  # a leaner twin that passed the compiler's memory check
    pending: dict[Candidate, Result] = {}
    parts: dict[Candidate, dict] = {}
    checked: set = set()
    jobs: collections.deque = collections.deque()
    timeline: dict[Candidate, dict] = {}  # kind → [sent, memory check passed, answered] (perf_counter seconds)
    waiting = list(queue)
    count = 0
    searched = set(queue)
    ranks: dict[Candidate, int] = {}
    early: set = set()  # deferred candidates an idle worker compiles before their turn (many workers only)
    held: dict = {}  # their answers, kept until their turn: (runs, depths)

    def later(candidate) -> int:
        if candidate not in ranks:
            ranks[candidate] = defer(candidate, base, dtype, searched)
        return ranks[candidate]

    def record(candidate, result):
        nonlocal count
        early.discard(candidate)
        held.pop(candidate, None)
        done[candidate] = result
        results.append(result)
        count += 1
        if progress:
            progress(count, len(queue), result)

    def enqueue(candidate, kind, urgent=False):
        job = sw.Job((candidate, kind), compile_job, (kind, candidate.config(base), dtype))
        jobs.appendleft(job) if urgent else jobs.append(job)

    def finish(candidate, runs, depths):
        if candidate in early:  # compiled before its turn: its answer waits for the turn's bound (decide_early)
            held[candidate] = (runs, depths)
            return
        result = pending.pop(candidate)
        parts.pop(candidate, None)
        fill(result, prediction_of(candidate.config(base), dtype, runs))
        result.compiled_layers = depths
        result.timeline = timeline.pop(candidate, None)
        remember(candidate, base, dtype, result)
        record(candidate, result)

    def on_result(candidate, kind, compiled):
        timeline.setdefault(candidate, {}).setdefault(kind, [None, None, None])[2] = time.perf_counter()
        if candidate not in pending:
            return  # its answer came from another compile (a refused 1-layer compile ends it)
        got = parts.setdefault(candidate, {})
        got[kind] = compiled
        layers = getattr(base.model, "layers", None)
        if kind == "looped":
            passed_check[candidate] = not compiled.refused
        if kind in ("whole", "looped") or (kind == "probe" and (compiled.refused or compiled.hbm_needed > capacity)):
            finish(candidate, [compiled], (layers,) if layers else ())
        elif kind == "probe":  # compiled whole before its memory check was seen (a small model): it fits, so
            enqueue(candidate, "layers1", urgent=True)  # extended as when the check is seen (and as in one process)
            enqueue(candidate, "layers2", urgent=True)
        elif kind == "layers1" and compiled.refused:
            finish(candidate, [compiled], (1,))
        elif kind in ("layers1", "layers2") and {"layers1", "layers2"} <= set(got):
            finish(candidate, [got["layers1"], got["layers2"]], (1, 2))

    def on_memory_check(index, candidate, kind):
        checked.add((candidate, kind))
        timeline.setdefault(candidate, {}).setdefault(kind, [None, None, None])[1] = time.perf_counter()
        if kind == "probe":  # it fits at full depth: abandon the unrolled program before code generation,
            pool[index].kill()  # and compile 1 and 2 layers to extend
            pool[index] = sw.Worker(context)
            enqueue(candidate, "layers1", urgent=True)
            enqueue(candidate, "layers2", urgent=True)
        else:  # the loop as it runs fits: the candidates waiting for it may start
            passed_check[candidate] = True

    def turn(candidate) -> bool:
        """Whether every candidate deferred less than ``candidate`` is answered (bound.defer's order)."""
        return not (later(candidate) and any(later(c) < later(candidate) for c in (*waiting, *pending)))

    def decide_early():
        """Candidates compiled before their turn, decided when it comes as if started then: the bound is held against
        the same answers (all of them first, so that one's answer does not bound another of the same turn), and a
        candidate it rules out is skipped — its compiles killed, its figures never used."""
        due = [c for c in early if c in pending and turn(c)]
        verdicts = {c: bounded(c, base, dtype, done) for c in due}
        for candidate, skipped in verdicts.items():
            if skipped is not None:
                pending.pop(candidate)
                parts.pop(candidate, None)
                timeline.pop(candidate, None)
                record(candidate, skipped)
                continue
            early.discard(candidate)
            if candidate in held:
                finish(candidate, *held.pop(candidate))

    try:
        while waiting or pending:
            if stop is not None and stop.is_set():
                return True
            for candidate in list(pending):  # a leaner twin found not to fit after it started: it stops here
                result = pruned(candidate, base, dtype, done)
                if result is not None:
                    pending.pop(candidate)
                    parts.pop(candidate, None)
                    record(candidate, result)
            decide_early()
            for index, worker in enumerate(pool):  # a compile whose candidate is answered is not needed any more
                if worker.job is not None and (worker.job.key[0] not in pending or worker.job.key[0] in held):
                    worker.kill()
                    pool[index] = sw.Worker(context)
            free = sum(worker.job is None for worker in pool) - len(jobs) if workers >= EARLY_START_WORKERS else 0
            for candidate in list(waiting):
                blocked = any(t in queue and t not in done and t not in passed_check for t in waits_for(candidate))
                if blocked and free <= 0:
                    continue  # its leaner twins' fit first — unless a worker idles (many workers): pruned() stops it
                # deferred (bound.defer): the compiled candidates its bound is held against first
                if not turn(candidate):
                    if free <= 0 or pruned(candidate, base, dtype, done) or bounded(candidate, base, dtype, done):
                        continue  # no idle worker, or already ruled out (a bound only tightens as results come)
                    early.add(candidate)  # an idle worker compiles it now; its turn decides (decide_early)
                    free -= len(first_jobs(candidate.config(base)))
                elif blocked:
                    free -= len(first_jobs(candidate.config(base)))
                waiting.remove(candidate)
                earlier = cached(candidate, base, dtype)
                result = (
                    earlier
                    or pruned(candidate, base, dtype, done)
                    or bounded(candidate, base, dtype, done)
                    or screen(candidate, base, dtype)
                )
                if earlier or result.skipped is not None:
                    record(candidate, result)
                    continue
                pending[candidate] = result
                for kind in first_jobs(candidate.config(base)):
                    enqueue(candidate, kind)
            for worker in pool:
                while worker.job is None and jobs:
                    job = jobs.popleft()
                    if job.key[0] in pending:
                        worker.send(job)
                        timeline.setdefault(job.key[0], {})[job.key[1]] = [time.perf_counter(), None, None]
            for index, worker in enumerate(pool):
                if worker.job is None:
                    continue
                candidate, kind = worker.job.key
                compiled = worker.result()
                if compiled is not None:
                    on_result(candidate, kind, compiled)
                elif kind in ("looped", "probe") and (candidate, kind) not in checked and worker.memory_checked():
                    on_memory_check(index, candidate, kind)
            if activity is not None:
                activity.compiling(in_flight(pool, timeline))
            time.sleep(0.1)
        return False
    finally:  # a worker only compiles: nothing to flush, and stopping each politely took ~1 s apiece
        for worker in pool:
            worker.kill()


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
