"""The machine under a load test: the browsers' CPU share lowered (:func:`nice_browser_session`) and the
server's peak memory sampled (:class:`RssSampler`)."""

from __future__ import annotations

import os
import threading


def nice_browser_session(nice: int) -> list[str]:
    """Lower the CPU share of the Chromium this process started; what could not be done, as notes.

    Niceness alone does not do it. Playwright starts Chromium in a session of its own (``setsid``), and with
    Linux's autogroup scheduling (on by default: ``/proc/sys/kernel/sched_autogroup_enabled``) the CPU is
    shared between sessions first and by niceness only inside one: twenty tabs at nice 19 still took half of
    the two cores from a server in another session (measured on 2026-12-06: the browsers' autogroup at nice 0
    while their processes were at 19). A session's share is set by its autogroup's niceness,
    ``/proc/<pid>/autogroup`` (raising it needs no privilege)."""
    import psutil

    browser_sessions = {}  # session id → one of its Chromium processes
    for child in psutil.Process().children(recursive=True):
        try:
            if "chrom" in child.name():
                browser_sessions[os.getsid(child.pid)] = child.pid
        except (psutil.Error, OSError):  # ended since the listing
            continue
    notes = []
    for sid, pid in browser_sessions.items():
        if sid == os.getsid(0) or not os.path.exists(f"/proc/{pid}/autogroup"):
            continue  # the same session as this process, or no autogroups: niceness alone counts
        try:
            with open(f"/proc/{pid}/autogroup", "w") as group:
                group.write(str(nice))
        except OSError as error:
            notes.append(f"note: the browsers' session keeps its CPU share ({error}); they compete with the server")
    if not browser_sessions:
        notes.append("note: no Chromium process found under this one; its CPU share is unchanged")
    return notes


class RssSampler:
    """Peak resident memory of a process and its children, sampled in a thread."""

    def __init__(self, pid: int, interval: float = 0.2):
        import psutil

        self.process = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        import psutil

        total = 0
        for proc in [self.process, *self.process.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self._sample())
            except Exception:
                return
            self._stop.wait(self.interval)

    def __enter__(self):
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
