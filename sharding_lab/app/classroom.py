"""Classroom: server-wide counts a teacher may see — how many sessions are here, what they solved.

One registry per server process, shared by every session (Streamlit runs them all in threads of
one process). It holds opaque session ids only to count each session once, and hands out numbers
only: how many sessions were seen recently, and per challenge how many sessions solved it — never
which ones. The challenges page calls :func:`record_solved`; every page view calls :func:`seen`.
"""

from __future__ import annotations

import hmac
import threading
import time

RECENT_S = 300.0  # a session counts as open when it drew a page within the last 5 minutes
_MAX_SESSIONS = 10_000  # a bound on memory, whatever a crowd of tabs does

_lock = threading.Lock()
_last_seen: dict[str, float] = {}
_solved: dict[str, set[str]] = {}


def seen(session_id: str, now: float | None = None) -> None:
    """``session_id`` is here now (called on every page view)."""
    now = time.monotonic() if now is None else now
    with _lock:
        _last_seen[session_id] = now
        if len(_last_seen) > _MAX_SESSIONS:
            _forget_older_than(now - RECENT_S)


def open_sessions(now: float | None = None) -> int:
    """Sessions seen within the last :data:`RECENT_S` seconds."""
    now = time.monotonic() if now is None else now
    with _lock:
        _forget_older_than(now - RECENT_S)
        return len(_last_seen)


def record_solved(session_id: str, challenge_id: str) -> None:
    """``session_id`` solved ``challenge_id`` (again is fine: each session counts once)."""
    with _lock:
        _solved.setdefault(str(challenge_id), set()).add(str(session_id))


def solved_counts() -> dict[str, int]:
    """challenge id → how many sessions solved it (only challenges someone solved)."""
    with _lock:
        return {challenge: len(sessions) for challenge, sessions in sorted(_solved.items())}


def reset() -> None:
    """Forget everything (tests; a new class on a server that stays up)."""
    with _lock:
        _last_seen.clear()
        _solved.clear()


def _forget_older_than(cutoff: float) -> None:
    for session_id in [s for s, t in _last_seen.items() if t < cutoff]:
        del _last_seen[session_id]


def teacher_token_ok(given: object, token: str | None) -> bool:
    """Whether a link's ``teacher`` value is the server's token (no token set: never). Compared in
    constant time, so the answer's timing says nothing about how much of a guess was right."""
    if not token or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(given.encode(), token.encode())
