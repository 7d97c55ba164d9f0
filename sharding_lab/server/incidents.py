"""Errors that reached a page: the traceback kept in the server's log under a short id, the student shown the id.

A page that raises shows its reader one sentence with an incident id (:mod:`sharding_lab.app.runtime.page_errors`);
the traceback — with the server's file paths and whatever the student typed — goes to the server's log
under the same id, and the teacher view lists the recent ones, so a student's "incident 3f9c…" leads the
teacher to the log line. Nothing here imports Streamlit.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import secrets
import threading
import time

log = logging.getLogger(__name__)
KEEP = 50  # the teacher view lists the most recent; the log keeps them all
MESSAGE_CHARS = 200


@dataclasses.dataclass(frozen=True)
class Incident:
    id: str
    when: float  # time.time()
    where: str  # the page (or part of one) that raised
    kind: str  # the exception's type
    message: str  # its first line, shortened


class Incidents:
    """The server's recent incidents, newest last (one object per server; a test makes its own)."""

    def __init__(self, keep: int = KEEP):
        self._lock = threading.Lock()
        self._recent: collections.deque[Incident] = collections.deque(maxlen=keep)
        self.total = 0

    def record(self, where: str, error: BaseException) -> Incident:
        """Log ``error``'s traceback under a new id and remember it for the teacher view."""
        lines = str(error).strip().splitlines()
        incident = Incident(
            id=secrets.token_hex(4),
            when=time.time(),
            where=where,
            kind=type(error).__name__,
            message=(lines[0] if lines else "")[:MESSAGE_CHARS],
        )
        _ensure_handler()
        log.error("incident %s on %s: %s", incident.id, where, incident.kind, exc_info=error)
        with self._lock:
            self._recent.append(incident)
            self.total += 1
        return incident

    def recent(self) -> list[Incident]:
        with self._lock:
            return list(self._recent)


def _ensure_handler() -> None:
    """The incidents' lines in the server's log (stderr): Streamlit configures its own loggers only, and Python's
    last-resort handler would print them without a time."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)


INCIDENTS = Incidents()
