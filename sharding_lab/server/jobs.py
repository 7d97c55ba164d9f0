"""Jobs: training in a background thread, so a page stays responsive while the model trains.

A :class:`TrainingJob` owns one run. Its thread builds the :class:`~sharding_lab.training.trainer.Lab`,
runs the trainer chunk by chunk and publishes a :class:`Snapshot` (losses so far, speed, the
model's current prediction, the final verdict) that a page can poll as often as it likes. A job
stops when asked, when its time limit passes, or when nobody has looked at it for a while (the tab
was closed). When it may train is the :mod:`~sharding_lab.server.slots`'s call: a job waits in
its queue, reporting its place, until a slot is free.

A :class:`DistributedJob` is the same for a run as several JAX processes
(:mod:`sharding_lab.distributed`): same :class:`Snapshot`, plus which process owns each device and
the layout gathered from all of them. It takes a training slot and one of
``SHARDING_LAB_MAX_MULTIPROCESS_JOBS`` (default 1) multi-process slots: each such run starts
several JAX processes, which a small server cannot afford many of.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Callable

import numpy as np

from .. import settings
from ..errors import ConfigError
from ..training.config import LabConfig
from . import background
from .slots import MAX_JOBS, MAX_QUEUED, Busy, load, release_slot, wait_for_slot

MAX_MULTIPROCESS_JOBS = settings.MAX_MULTIPROCESS_JOBS.get()
JOB_TIME_LIMIT_S = settings.JOB_TIME_LIMIT_S.get()
UNWATCHED_LIMIT_S = settings.UNWATCHED_LIMIT_S.get()
# From pressing Train to the first training step (queue + building + compiling): past this the page
# says so instead of showing "queued" or "starting" for ever.
START_LIMIT_S = settings.QUEUE_LIMIT_S.get()
PREDICTION_INTERVAL_S = 0.2
UNWATCHED_MESSAGE = "stopped: nobody was watching (tab closed?)"
_multi_slots = threading.BoundedSemaphore(MAX_MULTIPROCESS_JOBS)


@dataclasses.dataclass
class Snapshot:
    state: str  # "queued", "starting", "compiling", "training", "finished", "stopped", "diverged", "failed"
    losses: list[float]
    step: int
    total_steps: int
    elapsed: float
    steps_per_s: float
    prediction: np.ndarray | None
    message: str = ""
    final_loss: float | None = None
    layout_problems: list[str] | None = None
    devices: int = 0
    processes: int = 1
    owners: dict[int, int] | None = None  # device → process (multi-process runs, at the end)
    jax_ids: dict[int, int] | None = None  # device → JAX's own id
    hosts: dict[int, str] | None = None  # process → host name
    kinds: dict[int, str] | None = None  # device → device kind ("cpu", "NVIDIA H100 ...")
    layouts: dict | None = None  # path → ArrayLayout gathered from every process
    startup_s: float | None = None
    routing: object | None = None  # the trained router's choices (sharding_lab.sharding.experts), at the end

    @property
    def running(self) -> bool:
        return self.state in ("queued", "starting", "compiling", "training")


class TrainingJob:
    """One background training run of ``config``; poll :meth:`snapshot`, end with :meth:`stop`.

    ``connected``: says whether the learner's browser session is still open (the app passes
    :func:`sharding_lab.app.state.session.connection_check`'s). While it is, the run counts as watched even when no page
    polls it — the learner reads another page, or a loaded machine holds the tab's polls back; without it, only
    :meth:`snapshot` calls count."""

    def __init__(self, config: LabConfig, connected: Callable[[], bool] | None = None):
        running, waiting = load()
        if running >= MAX_JOBS and waiting >= MAX_QUEUED:
            raise Busy(
                f"all {MAX_JOBS} training slots are in use and {waiting} runs are waiting for one — "
                "try again in a minute"
            )
        self.config = config
        self.connected = connected
        self.compiled = self._compiled_here()  # its training chunk has run here: it goes first in the queue
        self._stop = threading.Event()
        self._lock = threading.Condition()  # guards the snapshot and the losses; notified at each change
        self._losses: list[float] = []
        self._snapshot = self._first_snapshot()
        self.x, self.y = config.family.probe_set(config.model, config.seed)  # what the probe draws
        self.last_seen = self.created = time.monotonic()
        self._gave_up = False  # the start limit passed: the page was told, the thread's news no longer counts
        self.thread = threading.Thread(target=self._run, name="sharding-lab-job", daemon=True)
        background.track(self.thread, self.stop)  # stopped at its next chunk and joined before the interpreter exits
        self.thread.start()

    def _compiled_here(self) -> bool:
        from ..training.trainer import is_compiled

        return is_compiled(self.config)

    def _first_snapshot(self) -> Snapshot:
        return Snapshot("queued", [], 0, self.config.steps, 0.0, 0.0, None, message="waiting for a free slot")

    def snapshot(self) -> Snapshot:
        """The latest state (cheap; also tells the job someone is still watching)."""
        self.last_seen = now = time.monotonic()
        with self._lock:
            if (
                self._snapshot.state in ("starting", "compiling")
                and not self._gave_up
                and now - self.created > START_LIMIT_S
            ):
                # A thread stuck in building or compiling cannot be interrupted; the page can at least
                # say so, and the thread stops at its first chunk if it ever gets there.
                self._gave_up = True
                self._stop.set()
                self._snapshot = dataclasses.replace(
                    self._snapshot,
                    state="failed",
                    message=f"this run did not start training within {START_LIMIT_S:.0f} s of pressing Train "
                    f"(it was still {self._snapshot.state}) — the server may be overloaded; press "
                    "Train to try again",
                )
            return dataclasses.replace(self._snapshot, losses=list(self._losses))

    def stop(self) -> None:
        self._stop.set()

    def wait_for_first_loss(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds until the run has its first losses or is over."""
        with self._lock:
            self._lock.wait_for(lambda: self._losses or not self._snapshot.running, timeout)

    def wait_if_ending(self, within: float) -> bool:
        """Block until the run is over if, at its pace so far, that is at most ``within`` seconds away (and never
        much longer than its pace says): True if it is over. A short run is then drawn once, finished."""
        from ..training.trainer import chunk_length

        with self._lock:
            snap = self._snapshot
            if not snap.running or snap.steps_per_s <= 0:
                return not snap.running
            chunk = chunk_length(self.config.chunk, snap.total_steps)  # the last chunk computes a whole one
            left = math.ceil((snap.total_steps - snap.step) / chunk) * chunk / snap.steps_per_s
            if left > within:
                return False
            # its last chunk, the layout check, a slow moment
            return self._lock.wait_for(lambda: not self._snapshot.running, 2 * left + 0.2)

    def wait(self, timeout: float | None = None) -> Snapshot:
        self.thread.join(timeout)
        return self.snapshot()

    def _publish(self, **changes) -> None:
        with self._lock:
            if self._gave_up:
                return
            self._snapshot = dataclasses.replace(self._snapshot, **changes)
            self._lock.notify_all()

    def _finish(self, result, **changes) -> None:
        """Publish the end of a run (one TrainResult, whichever way it trained)."""
        reason = result.stop_reason
        state = "diverged" if result.diverged else "stopped" if reason.startswith("stopped") else reason
        final = result.final_loss
        self._publish(
            state=state,
            final_loss=final if np.isfinite(final) else None,
            message=reason if state == "diverged" or reason.startswith("stopped:") else self._snapshot.message,
            **changes,
        )

    def _watchdog(self, started: float) -> None:
        now = time.monotonic()
        if now - started > JOB_TIME_LIMIT_S:
            self._publish(message=f"stopped after the {JOB_TIME_LIMIT_S:.0f} s limit per run")
            self._stop.set()
        elif self._unwatched():
            self._publish(message=UNWATCHED_MESSAGE)
            self._stop.set()

    def _unwatched(self) -> bool:
        if self.connected is not None and self.connected():
            self.last_seen = time.monotonic()  # the tab is open: on another page, or its polls held back
            return False
        return time.monotonic() - self.last_seen > UNWATCHED_LIMIT_S

    def _wait_turn(self) -> bool:
        # a run that must compile can see its place grow: say why (compiled runs take a second or two each)
        order = "" if self.compiled else "; runs already compiled go first"

        def on_wait(ahead: int) -> None:
            line = "next in line" if ahead == 0 else f"{ahead} run{'s' if ahead > 1 else ''} ahead of you"
            self._publish(message=f"waiting for a free slot — {line} ({MAX_JOBS} train at once on this server{order})")

        def too_long() -> bool:
            return time.monotonic() - self.created > START_LIMIT_S

        cancelled = lambda: self._stop.is_set() or self._unwatched() or too_long()  # noqa: E731
        if wait_for_slot(self, cancelled, on_wait, compiled=self.compiled):
            self._publish(state="starting", message="")
            return True
        if self._unwatched():
            message = UNWATCHED_MESSAGE
        elif self._stop.is_set():
            message = "stopped before it started (it was waiting in the queue)"
        else:
            message = (
                f"could not start within {START_LIMIT_S:.0f} s: every training slot stayed busy "
                f"({MAX_JOBS} train at once on this server) — press Train to queue again"
            )
        self._publish(state="stopped", message=message)
        return False

    def _run(self) -> None:
        if not self._wait_turn():
            return
        try:
            self._train()
        finally:
            release_slot()

    def _train(self) -> None:
        from ..sharding.experts import experts_of, lab_routing
        from ..training.trainer import Lab, Trainer

        started = time.monotonic()
        try:
            lab = Lab(self.config)
            self._publish(state="compiling", devices=lab.plan.config.mesh.size)
            trainer = Trainer(lab)
            last_prediction = 0.0
            for progress in trainer.chunks(self._stop):
                with self._lock:
                    self._losses.extend(progress.losses)
                changes = dict(
                    step=progress.step, elapsed=progress.elapsed, steps_per_s=progress.steps_per_s, state="training"
                )
                if progress.done or time.monotonic() - last_prediction > PREDICTION_INTERVAL_S:
                    changes["prediction"] = lab.predict(self.x)
                    last_prediction = time.monotonic()
                self._publish(**changes)
                self._watchdog(started)
            routing = lab_routing(lab) if experts_of(self.config) else None
            self._finish(trainer.result(progress), layout_problems=lab.verify_layout(), routing=routing)
        except ConfigError as error:
            self._publish(state="failed", message=str(error))
        except Exception as error:  # a JAX failure must end the job visibly, not kill the server
            self._publish(state="failed", message=f"{type(error).__name__}: {error}")


class _WatchedStop:
    """The job's stop flag as the launcher reads it (every 50 ms): each look also runs the watchdog."""

    def __init__(self, job: "DistributedJob"):
        self.job = job

    def is_set(self) -> bool:
        if self.job._unwatched() and not self.job._stop.is_set():
            self.job._publish(message=UNWATCHED_MESSAGE)
            self.job._stop.set()
        return self.job._stop.is_set()


class DistributedJob(TrainingJob):
    """One background run of ``config`` as ``processes`` JAX processes; same interface."""

    def __init__(self, config: LabConfig, processes: int, connected: Callable[[], bool] | None = None):
        from ..distributed import check_processes

        check_processes(config, processes)
        if not _multi_slots.acquire(blocking=False):
            raise Busy(
                f"{MAX_MULTIPROCESS_JOBS} multi-process run{'s are' if MAX_MULTIPROCESS_JOBS > 1 else ' is'} "
                "already going on on this server (each starts several JAX processes) — try again "
                "in a moment, or train with 1 process"
            )
        self.processes = processes
        try:
            super().__init__(config, connected)
        except BaseException:
            _multi_slots.release()
            raise

    def _compiled_here(self) -> bool:
        return False  # its processes compile their own programs, whatever this one has compiled

    def _first_snapshot(self) -> Snapshot:
        return dataclasses.replace(super()._first_snapshot(), processes=self.processes)

    def _run(self) -> None:
        try:
            super()._run()
        finally:
            _multi_slots.release()

    def _train(self) -> None:
        from ..distributed import WorkerFailed, run

        self._publish(message=f"starting {self.processes} JAX processes…")

        def on_status(state: str, info: dict) -> None:
            changes = {"state": state}
            if "startup_s" in info:
                changes.update(startup_s=info["startup_s"], message="")
            self._publish(**changes)

        def on_progress(progress, prediction) -> None:
            with self._lock:
                self._losses.extend(progress.losses)
            self._publish(
                step=progress.step,
                elapsed=progress.elapsed,
                steps_per_s=progress.steps_per_s,
                state="training",
                prediction=prediction,
            )

        try:
            result = run(
                self.config,
                self.processes,
                on_progress,
                stop=_WatchedStop(self),
                time_limit_s=JOB_TIME_LIMIT_S,
                on_status=on_status,
            )
            self._finish(
                result,
                layout_problems=result.problems,
                devices=self.config.mesh.size,
                owners=result.owners,
                jax_ids=result.jax_ids,
                hosts=result.hosts,
                kinds=result.kinds,
                layouts=result.layouts,
                startup_s=result.startup_s,
            )
        except (ConfigError, WorkerFailed) as error:
            self._publish(state="failed", message=str(error))
        except Exception as error:  # the server must live on, and say what happened
            self._publish(state="failed", message=f"{type(error).__name__}: {error}")
