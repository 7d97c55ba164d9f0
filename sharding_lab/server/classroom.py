"""Classroom: what a teacher may see of the class — how many sessions are here, what they solved, how each
server is doing — and the teacher's token that guards it.

The counts live in the class record (:mod:`.record`): a SQLite file next to the compilation cache by default,
the database ``SHARDING_LAB_DATABASE_URL`` names otherwise (PostgreSQL, shared by every replica of the app).
A restart keeps them; every replica's teacher view shows the whole class. Opaque session ids only, to count
each session once — never which session solved what. The challenges page calls :func:`record_solved`, every
page view :func:`seen`; both only touch memory (the record's writer thread does the database work).
"""

from __future__ import annotations

import hmac
import os
import socket
import threading
from pathlib import Path

from .. import settings, worker_process
from . import record as class_record

RECENT_S = 300.0  # a session counts as open when it drew a page within the last 5 minutes

_lock = threading.Lock()
_record: class_record.Record | None = None


def replica_id() -> str:
    """This server process's name in the record: ``SHARDING_LAB_REPLICA_ID`` (a pod's name), or host and pid."""
    return settings.REPLICA_ID.raw()[:128] or f"{socket.gethostname()}-{os.getpid()}"


def database_url() -> str:
    """``SHARDING_LAB_DATABASE_URL``, or a SQLite file next to the compilation cache (in memory when the
    cache is off: the tests, a server that keeps nothing)."""
    from . import compile_cache

    url = settings.DATABASE_URL.raw()
    if url:
        return url
    cache = compile_cache.cache_dir()
    if cache is None:
        return "sqlite://"
    return f"sqlite:///{Path(cache) / 'classroom.sqlite3'}"


def server_status() -> dict:
    """What this replica reports with its heartbeat: its runs, its memory, its warm-up."""
    import psutil

    from . import slots, warm

    training, queued = slots.load()
    return {
        "training": training,
        "queued": queued,
        "max_jobs": slots.MAX_JOBS,
        "rss_bytes": psutil.Process().memory_info().rss,
        "warm": warm.progress(),
    }


def record() -> class_record.Record:
    """The class record of this process (opened on first use)."""
    global _record
    with _lock:
        if _record is None and worker_process.is_worker():  # counts in memory only: a worker is no server
            _record = class_record.Record("sqlite://", replica_id(), start=False)
        elif _record is None:
            _record = class_record.Record(database_url(), replica_id(), status=server_status)
        return _record


def use_record(new: class_record.Record | None) -> class_record.Record | None:
    """Put ``new`` in place of this process's record (tests); returns the one it replaces."""
    global _record
    with _lock:
        old, _record = _record, new
        return old


def seen(session_id: str, now: float | None = None) -> None:
    """``session_id`` is here now (called on every page view)."""
    record().seen(session_id, now)


def open_sessions(now: float | None = None) -> int:
    """Sessions seen within the last :data:`RECENT_S` seconds, on every replica that is up."""
    return record().open_sessions(RECENT_S, now)


def record_solved(session_id: str, challenge_id: str) -> None:
    """``session_id`` solved ``challenge_id`` (again is fine: each session counts once)."""
    record().solved(str(session_id), str(challenge_id))


def solved_counts() -> dict[str, int]:
    """challenge id → how many sessions solved it (only challenges someone solved), the whole class."""
    return record().solved_counts()


def servers(now: float | None = None) -> list[dict]:
    """Every replica heard from lately: its id, whether it is up, and its last heartbeat's status."""
    return record().replicas(now)


def problem() -> str | None:
    """Why the record is not being saved right now (None: it is)."""
    return record().problem()


def reset() -> None:
    """Forget every session and every solve (a new class; tests)."""
    record().reset()


def teacher_token_ok(given: object, token: str | None) -> bool:
    """Whether a link's ``teacher`` value is the server's token (no token set: never). Compared in
    constant time, so the answer's timing says nothing about how much of a guess was right."""
    if not token or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(given.encode(), token.encode())
