"""Several JAX processes, one mesh: run the same sharded training as N processes on this machine.

:func:`run` starts ``python -m sharding_lab.distributed.worker`` N times — the command one would type on each
of N machines, with ``127.0.0.1`` and a free port as the coordinator's address — each with its
share of the mesh's devices (``SHARDING_LAB_DEVICES`` host devices, or its own accelerators). The
workers join with ``jax.distributed.initialize`` into one global mesh and train it together; this
side reads their JSON lines (process 0's losses as they come, every process's shards at the end),
merges the layouts, and checks them against the one-process plan.

The launcher owns the processes: it stops them (a ``stop`` line to process 0, which broadcasts it)
when asked or when the time limit passes, kills the whole lot when one of them dies, hangs, or
misbehaves, and reports a dead worker with its exit status and the end of its stderr. A worker
whose launcher disappears exits by itself (its stdin closes).

Devices are numbered by their position in ``jax.devices()`` — the order meshes are laid from — so
the gathered layout reads exactly like the one-process layout. JAX's own ids differ across
processes (process 1's host devices are 2048, 2049, ...): :attr:`DistributedResult.jax_ids` keeps them.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .. import settings
from ..errors import ConfigError
from ..hardware.devices import DEVICE_COUNT_ENV, device_info
from ..sharding.layout import compare_layouts
from ..training.config import LabConfig, check_memory
from ..training.config import plan as make_plan
from ..training.options import config_to_args
from ..training.trainer import Progress
from .results import DistributedResult, WorkerFailed, merge_layouts

PROCESS_CHOICES = (1, 2, 4)
MAX_PROCESSES = 16
STARTUP_LIMIT_S = settings.WORKER_START_LIMIT_S.get()
SILENCE_LIMIT_S = settings.WORKER_SILENCE_LIMIT_S.get()  # between chunks
STOP_GRACE_S = 20.0
PORT_ATTEMPTS = 3
POLL_S = 0.05
STDERR_LINES = 200
ROOT = Path(__file__).resolve().parents[2]
_NOISE = ("[Gloo]", "W0000", "I0000", "WARNING: All log messages before absl")


def process_choices(mesh_size: int) -> list[int]:
    """The process counts the app offers: those of 1, 2, 4 that split the mesh evenly."""
    return [p for p in PROCESS_CHOICES if mesh_size % p == 0]


def check_processes(config: LabConfig, processes: int) -> None:
    """ConfigError unless ``processes`` can share ``config``'s mesh evenly."""
    size = config.mesh.size
    if not isinstance(processes, int) or not 1 <= processes <= MAX_PROCESSES:
        raise ConfigError(f"processes must be between 1 and {MAX_PROCESSES}, got {processes!r}", "processes")
    if size % processes:
        fits = [p for p in range(1, min(size, MAX_PROCESSES) + 1) if size % p == 0]
        raise ConfigError(
            f"{processes} processes cannot share the {size} devices of the mesh "
            f"evenly: use {', '.join(map(str, fits[:-1]))} or {fits[-1]} processes"
            if len(fits) > 1
            else f"a mesh of one device cannot be shared by {processes} processes: use 1",
            "processes",
        )


def free_port() -> int:
    """A TCP port nobody listens on right now (the coordinator binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_command(
    config: LabConfig,
    processes: int,
    process_id: int,
    coordinator: str,
    local_devices: list[int] | None = None,
    lifeline: bool = True,
) -> list[str]:
    """The command that starts one worker (the same, but for the address, on a real host)."""
    command = [
        sys.executable,
        "-m",
        "sharding_lab.distributed.worker",
        "--coordinator",
        coordinator,
        "--num-processes",
        str(processes),
        "--process-id",
        str(process_id),
    ]
    if local_devices is not None:
        command += ["--local-devices", ",".join(map(str, local_devices))]
    if lifeline:
        command.append("--lifeline")
    return command + config_to_args(config)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Worker:
    def __init__(self, process_id: int, command: list[str], env: dict, events: queue.Queue):
        self.id = process_id
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.error: str | None = None
        self.reported_layout = False
        self.closed_stdout = False  # set by the launcher's loop once it has read every line
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self.threads = [
            threading.Thread(target=self._read_stdout, args=(events,), daemon=True, name=f"worker-{process_id}-stdout"),
            threading.Thread(target=self._read_stderr, daemon=True, name=f"worker-{process_id}-stderr"),
        ]
        for thread in self.threads:
            thread.start()

    def _read_stdout(self, events: queue.Queue) -> None:
        for line in self.proc.stdout:
            try:
                events.put((self.id, json.loads(line)))
            except json.JSONDecodeError:
                self.stderr.append(line.rstrip())
        events.put((self.id, None))

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def send(self, text: str) -> None:
        try:
            self.proc.stdin.write(text + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def tail(self, lines: int = 6) -> str:
        useful = [line for line in self.stderr if line.strip() and not line.startswith(_NOISE)]
        return " | ".join(useful[-lines:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the worker and any child
            except (ProcessLookupError, PermissionError):
                self.proc.kill()

    def close(self) -> None:
        self.kill()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        for thread in self.threads:
            thread.join(2)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except (OSError, ValueError):
                pass


def run(
    config: LabConfig,
    processes: int,
    on_progress: Callable[[Progress, np.ndarray | None], None] | None = None,
    stop=None,
    time_limit_s: float = 300.0,
    on_status: Callable[[str, dict], None] | None = None,
    startup_limit_s: float | None = None,
    silence_limit_s: float | None = None,
) -> DistributedResult:
    """Train ``config`` as ``processes`` JAX processes on this machine; block until it ends.

    ``on_progress(progress, prediction)`` gets process 0's report after every chunk;
    ``on_status(state, info)`` hears "starting", then "compiling" once every process joined.
    ``stop`` (anything with ``is_set()``) ends the run between chunks, as does ``time_limit_s``.
    Raises :class:`ConfigError` for a configuration the processes cannot run and
    :class:`WorkerFailed` when a worker dies, stalls or never starts — never leaving one behind.
    """
    check_processes(config, processes)
    plan = make_plan(config)  # every mistake is found here, before any process starts
    check_memory(plan)
    platform = device_info().platform
    if platform == "tpu" and processes > 1:
        raise ConfigError(
            "several processes on one TPU host need libtpu's own process settings, "
            "which this launcher does not make: train with 1 process here, or start one "
            "worker per TPU host by hand (README, 'Beyond one host')",
            "processes",
        )
    limits = (
        time_limit_s,
        STARTUP_LIMIT_S if startup_limit_s is None else startup_limit_s,
        SILENCE_LIMIT_S if silence_limit_s is None else silence_limit_s,
    )
    for _ in range(PORT_ATTEMPTS):
        try:
            return _Launch(config, processes, on_progress, on_status, stop, *limits).run(plan)
        except _PortTaken:
            continue  # someone took the free port before the coordinator bound it: pick another
    raise WorkerFailed(f"the coordinator could not bind a port {PORT_ATTEMPTS} times in a row")


class _PortTaken(WorkerFailed):
    pass


class _Launch:
    """One attempt: start the workers, follow them, end them."""

    def __init__(self, config, processes, on_progress, on_status, stop, time_limit_s, startup_limit_s, silence_limit_s):
        self.processes, self.on_progress, self.on_status, self.stop = processes, on_progress, on_status, stop
        self.time_limit_s, self.startup_limit_s, self.silence_limit_s = time_limit_s, startup_limit_s, silence_limit_s
        per_process = config.mesh.size // processes
        accelerators = not device_info().simulated
        self.coordinator = f"127.0.0.1:{free_port()}"
        env = {
            **os.environ,
            DEVICE_COUNT_ENV: str(per_process),
            "PYTHONUNBUFFERED": "1",
            "XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
        }
        self.events: queue.Queue = queue.Queue()
        self.launched = self.last_heard = time.monotonic()
        self.workers: list[_Worker] = []
        try:
            for i in range(processes):
                local = list(range(i * per_process, (i + 1) * per_process)) if accelerators else None
                self.workers.append(
                    _Worker(i, worker_command(config, processes, i, self.coordinator, local), env, self.events)
                )
        except BaseException:
            self.close()
            raise
        self.ready: dict[int, dict] = {}
        self.layouts: dict[int, dict] = {}
        self.problems: list[str] = []
        self.losses: list[float] = []
        self.done: dict | None = None
        self.prediction = None
        self.stop_sent_at: float | None = None
        self.reported = False  # a chunk came back: from now on, silence means a hang
        self.limit_hit = False
        self.startup_s = 0.0

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    def run(self, plan) -> DistributedResult:
        try:
            if self.on_status:
                self.on_status(
                    "starting",
                    {
                        "processes": self.processes,
                        "coordinator": self.coordinator,
                        "pids": [w.proc.pid for w in self.workers],
                    },
                )
            while not all(w.proc.poll() == 0 and w.closed_stdout for w in self.workers):
                try:
                    self._handle(*self.events.get(timeout=POLL_S))
                except queue.Empty:
                    pass
                try:
                    _check_exits(self.workers, self.launched)
                except WorkerFailed:
                    if len(self.ready) < self.processes and any(
                        "Failed to add port" in line for w in self.workers for line in w.stderr
                    ):
                        raise _PortTaken(self.coordinator) from None
                    raise
                self._check_time(time.monotonic())
        finally:
            self.close()
        return self._result(plan)

    def _handle(self, process_id: int, event: dict | None) -> None:
        if event is None:
            self.workers[process_id].closed_stdout = True
            return
        self.last_heard = time.monotonic()
        kind = event.get("event")
        if kind == "ready":
            self.ready[process_id] = event
            if len(self.ready) == self.processes:
                self.startup_s = self.last_heard - self.launched
                if self.on_status:
                    self.on_status("compiling", {"processes": self.processes, "startup_s": self.startup_s})
        elif kind == "progress":
            self.reported = True
            self.losses.extend(event["losses"])
            self.prediction = np.asarray(event["prediction"], dtype=np.float32)  # the probe's own shape
            if self.on_progress:
                self.on_progress(
                    Progress(
                        event["step"],
                        event["total_steps"],
                        event["losses"],
                        event["elapsed"],
                        event["steps_per_s"],
                        event["done"],
                        event["stop_reason"],
                    ),
                    self.prediction,
                )
        elif kind == "layout":
            self.layouts[process_id] = event["layouts"]
            self.problems += [f"process {process_id}: {p}" for p in event["problems"]]
            self.workers[process_id].reported_layout = True
        elif kind == "done":
            self.done = event
        elif kind == "error":
            self.workers[process_id].error = event["message"]
            if event.get("config_error"):
                raise ConfigError(event["message"], "processes")

    def _check_time(self, now: float) -> None:
        asked = self.stop is not None and self.stop.is_set()
        if self.stop_sent_at is None and (asked or now - self.launched > self.time_limit_s):
            self.workers[0].send("stop")  # process 0 broadcasts it to the others before the next chunk
            self.stop_sent_at, self.limit_hit = now, not asked
        if len(self.ready) < self.processes and now - self.launched > self.startup_limit_s:
            raise WorkerFailed(
                f"the {self.processes} processes did not all start within "
                f"{self.startup_limit_s:.0f} s ({len(self.ready)} joined); they were "
                f"killed: " + _tails(self.workers)
            )
        if not self.reported and now - self.launched > self.startup_limit_s:
            raise WorkerFailed(
                f"the processes started but trained no chunk within {self.startup_limit_s:.0f} s "
                "(building and compiling included); they were killed: " + _tails(self.workers)
            )
        if self.stop_sent_at is not None and now - self.stop_sent_at > STOP_GRACE_S:
            raise WorkerFailed(
                f"the processes did not stop within {STOP_GRACE_S:.0f} s of the stop request; they were killed"
            )
        if self.reported and now - self.last_heard > self.silence_limit_s:
            raise WorkerFailed(
                f"no word from the processes for {self.silence_limit_s:.0f} s (a hang?); "
                "they were killed: " + _tails(self.workers)
            )

    def _result(self, plan) -> DistributedResult:
        if self.done is None or len(self.layouts) < self.processes:
            raise WorkerFailed("the processes ended without reporting their results: " + _tails(self.workers))
        devices = self.ready[0]["devices"]
        merged = merge_layouts(self.layouts, {d["id"]: d["index"] for d in devices})
        used = {device for layout in merged.values() for device in layout.devices}
        devices = [d for d in devices if d["index"] in used]
        reason = self.done["stop_reason"]
        if self.limit_hit and reason == "stopped":
            reason = f"stopped: the {self.time_limit_s:.0f} s limit per run passed"
        return DistributedResult(
            losses=np.asarray(self.losses, dtype=float),
            steps=self.done["steps"],
            elapsed=self.done["elapsed"],
            steps_per_s=self.done["steps_per_s"],
            stop_reason=reason,
            processes=self.processes,
            layouts=merged,
            owners={d["index"]: d["process"] for d in devices},
            jax_ids={d["index"]: d["id"] for d in devices},
            hosts={p: e["host"] for p, e in sorted(self.ready.items())},
            kinds={d["index"]: d["kind"] for d in devices},
            problems=self.problems + compare_layouts(plan.layouts(), merged),
            startup_s=self.startup_s,
            prediction=self.prediction,
        )


def _check_exits(workers: list[_Worker], launched: float) -> None:
    """WorkerFailed as soon as a worker has ended badly: killed, crashed, or quiet before its report."""
    dead = [(w, w.proc.poll()) for w in workers]
    bad = [
        (w, code) for w, code in dead if code is not None and (code != 0 or (w.closed_stdout and not w.reported_layout))
    ]
    if not bad:
        return
    bad.sort(key=lambda item: (item[1] >= 0, item[0].id))  # a killed worker is the likely cause
    first, code = bad[0]
    others = len(workers) - 1
    message = (
        f"process {first.id} of {len(workers)} (pid {first.proc.pid}) {describe_exit(code)} "
        f"after {time.monotonic() - launched:.1f} s"
    )
    if first.error:
        message += f": {first.error}"
    elif first.tail():
        message += f"; its last words: {first.tail(3)}"
    if others:
        message += (
            f" — the run cannot go on without it, so the other process{'es' if others > 1 else ''} "
            f"{'were' if others > 1 else 'was'} stopped"
        )
    raise WorkerFailed(message)


def _tails(workers: list[_Worker]) -> str:
    parts = []
    for w in workers:
        status = w.proc.poll()
        state = "running" if status is None else describe_exit(status)
        parts.append(f"process {w.id} {state}" + (f": {w.error or w.tail(3)}" if (w.error or w.tail()) else ""))
    return "; ".join(parts)
