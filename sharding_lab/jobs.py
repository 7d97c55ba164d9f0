"""Jobs: training in a background thread, so a page stays responsive while the model trains.

A :class:`TrainingJob` owns one run. Its thread builds the :class:`~sharding_lab.training.Lab`,
runs the trainer chunk by chunk and publishes a :class:`Snapshot` (losses so far, speed, the
model's current prediction, the final verdict) that a page can poll as often as it likes. A job
stops when asked, when its time limit passes, or when nobody has looked at it for a while (the tab
was closed). At most ``SHARDING_LAB_MAX_JOBS`` jobs train at once across the whole server; one
more is refused with :class:`Busy` rather than queued behind a hidden wait.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import numpy as np

from .config import LabConfig
from .data import make_dataset
from .errors import ConfigError

MAX_JOBS = max(1, int(os.environ.get("SHARDING_LAB_MAX_JOBS", "4")))
JOB_TIME_LIMIT_S = float(os.environ.get("SHARDING_LAB_JOB_TIME_LIMIT_S", "300"))
UNWATCHED_LIMIT_S = float(os.environ.get("SHARDING_LAB_UNWATCHED_LIMIT_S", "30"))
PREDICTION_INTERVAL_S = 0.2

_slots = threading.BoundedSemaphore(MAX_JOBS)


class Busy(RuntimeError):
    """Every training slot is taken; try again in a moment."""


def take_slot() -> None:
    """Claim one of the server's training slots, or raise :class:`Busy`; pair with :func:`release_slot`."""
    if not _slots.acquire(blocking=False):
        raise Busy(f"all {MAX_JOBS} training slots are in use right now — try again in a moment")


def release_slot() -> None:
    _slots.release()


@dataclasses.dataclass
class Snapshot:
    state: str  # "starting", "compiling", "training", "finished", "stopped", "diverged", "failed"
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

    @property
    def running(self) -> bool:
        return self.state in ("starting", "compiling", "training")


class TrainingJob:
    """One background training run of ``config``; poll :meth:`snapshot`, end with :meth:`stop`."""

    def __init__(self, config: LabConfig):
        take_slot()
        self.config = config
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._losses: list[float] = []
        self._snapshot = Snapshot("starting", [], 0, config.steps, 0.0, 0.0, None)
        self.x, self.y = make_dataset(config.seed, config.model.din, config.model.dout)
        self.last_seen = time.monotonic()
        self.thread = threading.Thread(target=self._run, name="sharding-lab-job", daemon=True)
        self.thread.start()

    def snapshot(self) -> Snapshot:
        """The latest state (cheap; also tells the job someone is still watching)."""
        self.last_seen = time.monotonic()
        with self._lock:
            return dataclasses.replace(self._snapshot, losses=list(self._losses))

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> Snapshot:
        self.thread.join(timeout)
        return self.snapshot()

    def _publish(self, **changes) -> None:
        with self._lock:
            self._snapshot = dataclasses.replace(self._snapshot, **changes)

    def _watchdog(self, started: float) -> None:
        now = time.monotonic()
        if now - started > JOB_TIME_LIMIT_S:
            self._publish(message=f"stopped after the {JOB_TIME_LIMIT_S:.0f} s limit per run")
            self._stop.set()
        elif now - self.last_seen > UNWATCHED_LIMIT_S:
            self._publish(message="stopped: nobody was watching (tab closed?)")
            self._stop.set()

    def _run(self) -> None:
        from .training import Lab, Trainer

        started = time.monotonic()
        try:
            lab = Lab(self.config)
            self._publish(state="compiling", devices=lab.plan.config.mesh.size)
            trainer = Trainer(lab)
            last_prediction = 0.0
            for progress in trainer.chunks(self._stop):
                with self._lock:
                    self._losses.extend(progress.losses)
                changes = dict(step=progress.step, elapsed=progress.elapsed,
                               steps_per_s=progress.steps_per_s, state="training")
                if progress.done or time.monotonic() - last_prediction > PREDICTION_INTERVAL_S:
                    changes["prediction"] = lab.predict(self.x)
                    last_prediction = time.monotonic()
                self._publish(**changes)
                self._watchdog(started)
            reason = progress.stop_reason
            state = "diverged" if reason.startswith("diverged") else reason
            losses = np.asarray(self._losses)
            final = float(np.mean(losses[-100:])) if len(losses) else None
            self._publish(state=state, final_loss=final, layout_problems=lab.verify_layout(),
                          message=reason if state == "diverged" else self._snapshot.message)
        except ConfigError as error:
            self._publish(state="failed", message=str(error))
        except Exception as error:  # a JAX failure must end the job visibly, not kill the server
            self._publish(state="failed", message=f"{type(error).__name__}: {error}")
        finally:
            release_slot()
