"""A browser and a Streamlit server for it, shared by the browser tests and the tools that drive pages.

Debian's Chromium, headless, with the flags that keep it off the network and out of the way; and :class:`Server`,
``streamlit run app.py`` on 127.0.0.1 at a free port with its output in a log file.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`streamlit run app.py` on 127.0.0.1 only (a free port), output to a log file."""

    def __init__(
        self,
        max_jobs: int | None = None,
        devices: int = 8,
        extra_env: dict | None = None,
        script: str = "app.py",
        own_session: bool = False,
    ):
        """``own_session``: the server runs in a session of its own (``setsid``), so that Linux's autogroup
        scheduling gives it its own share of the cores — as a server on its own machine has — rather than
        one shared with the process that started it (the load test, which must not be what it measures)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = dict(os.environ, SHARDING_LAB_DEVICES=str(devices), **(extra_env or {}))
        if max_jobs is not None:
            env["SHARDING_LAB_MAX_JOBS"] = str(max_jobs)
        self.log = tempfile.NamedTemporaryFile("w+", prefix="sharding-lab-load-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                script,
                "--server.headless=true",
                f"--server.port={self.port}",
                "--server.address=127.0.0.1",
                "--browser.gatherUsageStats=false",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if urllib.request.urlopen(self.url + "_stcore/health", timeout=2).read() == b"ok":
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("streamlit did not start: " + self.output()[-2000:])

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()

    def __enter__(self):
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
