"""The compose stack for real: deploy/compose.yaml built and brought up (two app replicas, nginx, PostgreSQL),
then the class load test through its load balancer — every session finishes with no cross-talk, each on one
replica, and the teacher view counts exactly what the sessions solved.

Minutes (an image build, two replicas starting, a class of browsers) and a Docker engine with the base image:
it runs only when asked, ``RUN_COMPOSE_TEST=1 pytest tests/e2e/test_compose.py`` (``COMPOSE_SESSIONS``: how many
students, 40 for the figure in docs/scale-out.md). `../shared/tools/docker-local-base.sh` starts an engine and
makes the base where Docker Hub is out of reach; Debian's docker-compose (1.29) or `docker compose` drives it.
"""

import os
import secrets
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from sharding_lab.distributed.launcher import free_port
from tests.browser import CHROMIUM
from tools.loadtest.cli import main as run_load_test

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "sharding-lab-test"


def compose_command() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def why_not() -> str:
    """Why the stack cannot run here ('' when it can)."""
    if os.environ.get("RUN_COMPOSE_TEST") != "1":
        return "minutes of image builds and a class of browsers: RUN_COMPOSE_TEST=1 runs it"
    if not Path(CHROMIUM).exists():
        return "Debian's chromium is not installed"
    if compose_command() is None:
        return "neither `docker compose` nor docker-compose is installed"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "no Docker engine runs here (../shared/tools/docker-local-base.sh starts one)"
    return ""


# An image build, two replicas starting and a class of 40 browsers outlast pytest.ini's 300 s per test.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(bool(why_not()), reason=why_not() or "ok"),
]


def test_a_class_through_the_load_balancer_of_two_replicas(tmp_path, capsys):
    sessions = int(os.environ.get("COMPOSE_SESSIONS", "8"))
    port = free_port()
    token = secrets.token_hex(8)
    env = dict(
        os.environ,
        SHARDING_LAB_TEACHER_TOKEN=token,
        POSTGRES_PASSWORD=secrets.token_hex(8),
        SHARDING_LAB_PORT=str(port),
        WARM_CACHE=os.environ.get("WARM_CACHE", "0"),
        SHARDING_LAB_WARM=os.environ.get("SHARDING_LAB_WARM", "default"),
    )
    compose = [*compose_command(), "-p", PROJECT, "-f", str(ROOT / "deploy" / "compose.yaml")]

    def run(*args, timeout=1800):
        done = subprocess.run([*compose, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(args)}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    run("build")
    try:
        run("up", "-d", "--scale", "app=2", timeout=900)
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 300
        while True:
            try:
                if urllib.request.urlopen(url + "_stcore/health", timeout=5).read() == b"ok":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, run("ps") + run("logs", "--tail", "50")
            time.sleep(2)
        json_path = tmp_path / "load.json"
        code = run_load_test(
            ["--url", url, "--sessions", str(sessions), "--steps", "100", "--solve", "--teacher-token", token,
             "--json", str(json_path), "--timeout", str(120 + 20 * sessions)]
        )  # fmt: skip
        summary = __import__("json").loads(json_path.read_text())["summary"]
        with capsys.disabled():
            print(f"\ncompose: {summary}")
        assert summary["ok"] == sessions and summary["crosstalk"] == 0 and summary["moved"] == 0
        assert len(summary["servers"]) == 2, summary["servers"]  # both replicas had students
        assert summary["teacher"]["exact"], summary["teacher"]
        assert code == 0
    finally:
        logs = subprocess.run([*compose, "logs", "--tail", "200"], cwd=ROOT, env=env, capture_output=True, text=True)
        (tmp_path / "compose.log").write_text(logs.stdout + logs.stderr)
        subprocess.run([*compose, "down", "-v"], cwd=ROOT, env=env, capture_output=True, timeout=300)
