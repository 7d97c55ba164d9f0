"""The search's compiles in worker processes, each watched to the compiler's memory check.

Why: the TPU compiler decides whether a step fits in its first seconds (HLO passes, then buffer
assignment: a step whose temporaries exceed HBM is refused there) and then spends 40–100 s per transformer
block generating code (measured: a llama3-8b block on v5e-256, 2-core machine, ``perf``: register
allocation and LLO scheduling). So each worker has XLA write its buffer assignment to a folder
(``xla_dump_to``) that the search watches: once ``*after_optimizations_after_buffer_assignment.txt`` appears
the compiler has passed its memory check (a refusal writes ``oom_intermediate_module`` instead and raises).
The search can then start the next compile at once, or abandon this one — kill the worker and start a
new one — when only the memory check was wanted (a 32-layer program unrolled, whose code generation
would take half an hour).

The buffer assignment's own totals are not used as the fit: they are the compiler's view before code
generation (llama3-8b 128x2 fsdp_tp, remat full: 13.4 GB, where the finished program peaks at 12.6 GB) —
:func:`sharding_lab.cost.compiled.hbm_needed` reads the finished program's peak.

This module is the mechanism (a worker and its watched folder); which compiles a candidate needs is the
search's (:func:`sharding_lab.search.scheduler.run_pool`).
"""

from __future__ import annotations

import dataclasses
import glob
import multiprocessing
import os
import shutil
import signal
import tempfile
from typing import Callable

# A worker's niceness above the process that starts it: on a class server a search's compiles (minutes of every
# core for a large model) yield the cores to the students' training; on a machine of its own nothing is slower.
WORKER_NICE = 10


@dataclasses.dataclass
class Job:
    """One compile: ``function(*args)`` in a worker (a module-level function: it travels by name), for ``key``."""

    key: tuple
    function: Callable
    args: tuple


def _serve(conn) -> None:
    """A worker: compile each job it is sent, its buffer assignment dumped to the job's folder."""
    from ..hardware import targets
    from ..training.step import compiler_options

    os.nice(WORKER_NICE)
    targets.quiet_libtpu()
    # A worker only compiles, never runs on a chip: on a machine whose TPU is attached (quiet_libtpu leaves the
    # lock alone there) it must still load libtpu beside the search's own process, which took libtpu's lock
    # first — without this every worker died "accessing libtpu multi-process lockfile" (seen on a one-chip v5e).
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    while True:
        message = conn.recv()
        if message is None:
            return
        key, function, args, folder = message
        try:
            with compiler_options(xla_dump_to=folder, xla_dump_hlo_module_re=".*train_step.*"):
                result = function(*args)
        except Exception as error:  # sent back and raised there: the search reports it like a serial one
            result = RuntimeError(f"{type(error).__name__}: {error}")
        conn.send((key, result))


class Worker:
    """One process that compiles jobs one at a time; killed and replaced to abandon a compile."""

    def __init__(self, context):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.job: Job | None = None
        self.folder: str | None = None

    def send(self, job: Job) -> None:
        self.job = job
        self.folder = tempfile.mkdtemp(prefix="sharding-lab-compile-")
        try:
            self.conn.send((job.key, job.function, job.args, self.folder))
        except (BrokenPipeError, ConnectionError):  # it died between two jobs
            raise self._died() from None

    def result(self):
        """The finished job's result, or None while it compiles."""
        if self.job is None or not self.conn.poll():
            return None
        try:
            _, result = self.conn.recv()
        except (EOFError, ConnectionError):  # the process is gone: killed from outside, or by the kernel for memory
            raise self._died() from None
        self._clear()
        if isinstance(result, Exception):
            raise result
        return result

    def _died(self) -> RuntimeError:
        """The error a dead worker ends the search with, saying how it died (the search cannot go on without it)."""
        self.process.join(timeout=5)
        self._clear()
        code = self.process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            how = {
                "SIGKILL": "SIGKILL: killed, perhaps by the kernel for memory — fewer workers need less",
                "SIGSEGV": "SIGSEGV: the compiler crashed",
            }.get(name, name)
        return RuntimeError(f"a compile worker died ({how})")

    def memory_checked(self) -> bool:
        """Whether the compiler has passed its memory check (its buffer assignment is written)."""
        return self.folder is not None and bool(
            glob.glob(os.path.join(self.folder, "*after_optimizations_after_buffer_assignment*"))
        )

    def program(self) -> str | None:
        """The text of the program the compiler decided, once it passed its memory check (before code
        generation): what :func:`sharding_lab.cost.floor.step_floor` prices. None where it is not written."""
        # the same text as the buffer assignment's (whose appearance is the check), written before it: complete
        return self._read("*after_optimizations.txt")

    def _read(self, pattern: str) -> str | None:
        found = glob.glob(os.path.join(self.folder, pattern)) if self.folder else []
        try:
            with open(found[0]) as f:
                return f.read()
        except (IndexError, OSError):
            return None

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self._clear()

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.process.join(timeout=2)
            if self.process.is_alive():
                self.process.kill()
        self._clear()

    def _clear(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.job, self.folder = None, None


def context():
    return multiprocessing.get_context("spawn")
