"""Every ``SHARDING_LAB_*`` environment variable the lab reads, in one place: its name, its default and
what it does (``docs/configuration.md`` is this module as a table; a test keeps the two the same).

Each is read when asked (:meth:`Setting.get`), so a test or a server that sets one before using it is
heard; modules that fix a value for their lifetime (the job limits) read it once at import. A value that
does not parse falls back to the default rather than stopping a classroom server at start.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

_UNSET = object()


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: str
    doc: str
    parse: Callable[[str], object] = str

    def raw(self) -> str:
        """The variable's text, or the default when it is unset or blank."""
        value = os.environ.get(self.name, "").strip()
        return value or self.default

    def on(self) -> bool:
        """Whether the text is anything but an off-word (``off``, ``0``, ``false``, ``no``): a setting with more
        values than on and off (``SHARDING_LAB_WARM``: on, default, off) is off only by those words."""
        return _switch(self.raw())

    def get(self):
        """The parsed value (the default's when the text does not parse)."""
        try:
            return self.parse(self.raw())
        except ValueError:
            return self.parse(self.default)

    def mib_in_bytes(self) -> int:
        """A size given in MiB, in bytes; 0 when the setting is 0 or less (its caller's own default applies)."""
        configured = self.get()
        return configured * 2**20 if configured > 0 else 0


def _switch(text: str) -> bool:
    return text.strip().lower() not in ("off", "0", "false", "no")


def _positive_int(text: str) -> int:
    return max(1, int(text))


ALL: list[Setting] = []


def _define(name: str, default: str, doc: str, parse: Callable[[str], object] = str) -> Setting:
    setting = Setting(f"SHARDING_LAB_{name}", default, doc, parse)
    ALL.append(setting)
    return setting


# The machine
DEVICES = _define("DEVICES", "8", "How many host devices JAX simulates (1–64), fixed when the process starts.", int)
PLATFORM = _define(
    "PLATFORM",
    "auto",
    "Where meshes are built: `cpu` (the simulated host devices), `accelerator` (the attached TPUs or "
    "GPUs; an error when there are none; `gpu` is the old name) or `auto` (the accelerators when the "
    "mesh fits on them, else the host devices).",
)
FAST_COMPILE = _define(
    "FAST_COMPILE",
    "on",
    "XLA:CPU compiles with the cheaper settings that give the same numbers (`--xla_backend_optimization_level=1 "
    "--xla_llvm_disable_expensive_passes=true`; a flag already in `XLA_FLAGS` wins); `off`: XLA's own defaults.",
    _switch,
)
MEMORY_LIMIT_MB = _define(
    "MEMORY_LIMIT_MB",
    "0",
    "The memory one training run may use, in MiB; 0: half of the memory free when it starts.",
    int,
)
FAMILIES = _define("FAMILIES", "", "Comma-separated modules that register model families of your own.")
# The server
CACHE_DIR = _define(
    "CACHE_DIR", "", "JAX's persistent compilation cache; empty: `~/.cache/sharding-lab/jax`; `off`: none."
)
WARM = _define(
    "WARM",
    "on",
    "Compile what a class clicks first in the background when the server starts: `on`, `default` (the "
    "default layout only) or `off`.",
)
PAGE_COMPILES = _define(
    "PAGE_COMPILES",
    "on",
    "Pages compile when they open: the Plan page times one compile for its estimate, Compare computes its "
    "strategies; `off`: they compile only when asked (Run, Compare) — the test suite's servers, which only walk "
    "through the pages.",
    _switch,
)
TEACHER_TOKEN = _define(
    "TEACHER_TOKEN", "", "The secret a link needs (`?teacher=…`) to open the Teacher page; empty: no teacher view."
)
TRACEBACKS = _define(
    "TRACEBACKS",
    "off",
    "`on`: a page's exception is shown with its traceback, as Streamlit would (for development; the tests set "
    "it); `off`: the student sees a sentence with an incident id, the server's log has the traceback under it "
    "and the Teacher page lists the recent ones.",
    _switch,
)
DATABASE_URL = _define(
    "DATABASE_URL",
    "",
    "Where the class record (what the Teacher page counts) is kept: a SQLAlchemy URL, e.g. "
    "`postgresql://user:password@host:5432/db`, which every replica of a class shares; empty: the SQLite file "
    "`classroom.sqlite3` in the compilation cache's folder (in memory when the cache is `off`).",
)
REPLICA_ID = _define(
    "REPLICA_ID", "", "This server's name on the Teacher page and in the class record; empty: host name and process id."
)
MAX_JOBS = _define("MAX_JOBS", "4", "Training runs the server runs at once; more wait in a queue.", _positive_int)
MAX_QUEUED = _define("MAX_QUEUED", "64", "Runs that may wait for a slot; more are told the server is busy.", int)
SERVER_MEMORY_MB = _define(
    "SERVER_MEMORY_MB",
    "0",
    "The memory the class server should stay under, in MiB (the Teacher page shows its memory against it); 0: 80% "
    "of the machine's.",
    int,
)
SESSION_MEMORY_MB = _define(
    "SESSION_MEMORY_MB",
    "0",
    "One session's share of the server's memory, in MiB: a run whose estimated memory is larger is refused before "
    "anything is allocated; 0: SHARDING_LAB_SERVER_MEMORY_MB's bound divided by SHARDING_LAB_MAX_JOBS.",
    int,
)
MAX_SEARCHES = _define(
    "MAX_SEARCHES",
    "1",
    "Plan searches the server runs at once (the same question from several tabs is one search); more wait in "
    "a queue, first come, first served.",
    _positive_int,
)
MAX_PAGE_COMPILES = _define(
    "MAX_PAGE_COMPILES",
    "1",
    "Big programs the pages compile at once (Communication, Compare, the cost panel, Train's XLA figures); more wait "
    "in one queue, first come, first served, each page shown its place; a large model's Plan search starts in its "
    "turn of it.",
    _positive_int,
)
BIG_COMPILE_MB = _define(
    "BIG_COMPILE_MB",
    "1024",
    "A program is big — its compile from a page waits in the queue above — when its inputs (weights, optimizer "
    "state, batch, over all devices) hold at least this many MiB.",
    int,
)
MAX_MULTIPROCESS_JOBS = _define(
    "MAX_MULTIPROCESS_JOBS", "1", "Multi-process (jax.distributed) runs at once.", _positive_int
)
JOB_TIME_LIMIT_S = _define("JOB_TIME_LIMIT_S", "300", "The longest a training run may train, in seconds.", float)
UNWATCHED_LIMIT_S = _define(
    "UNWATCHED_LIMIT_S",
    "30",
    "A run whose tab closed (no page polls it, its session disconnected) stops after this many seconds.",
    float,
)
QUEUE_LIMIT_S = _define(
    "QUEUE_LIMIT_S",
    "600",
    "From pressing Train to the first step (waiting for a slot, building, compiling), in "
    "seconds; past it the page says the run could not start.",
    float,
)
# Multi-process runs
WORKER_START_LIMIT_S = _define(
    "WORKER_START_LIMIT_S",
    "120",
    "How long the worker processes of a multi-process run may take to join, in seconds.",
    float,
)
WORKER_SILENCE_LIMIT_S = _define(
    "WORKER_SILENCE_LIMIT_S",
    "60",
    "How long a worker process may stay silent between chunks before the run is stopped, in seconds.",
    float,
)
# Installing
GPU_COMPILER = _define("GPU_COMPILER", "0", "`1`: `./run_app.sh` also installs the GPU compiler (about 5 GB).", _switch)


def by_name(name: str) -> Setting:
    for setting in ALL:
        if setting.name == name:
            return setting
    raise KeyError(name)
