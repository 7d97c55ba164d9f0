"""A class bigger than one server, with real processes: the class record survives a restart (SQLite), and two
app processes share it (a real PostgreSQL server) behind the project's own load balancer configuration
(deploy/nginx/nginx.conf, run by Debian's nginx on loopback): each browser stays on its replica, every replica's
teacher view shows the whole class, and a replica killed mid-class sends its students to the other one with a
clear notice, their settings and solved challenges restored, the record whole.

PostgreSQL and nginx come from Debian's packages (run_tests.sh installs them when missing); as root, PostgreSQL
runs as the ``postgres`` user. Without them, or without Chromium, the tests here are skipped, with the reason.
"""

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from sharding_lab.distributed.launcher import free_port
from tests.browser import CHROMIUM, Server
from tools.loadtest.teacher import TEACHER_JS

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "scale-out-teacher-3e9d"
START_S = 240  # a server's start on a loaded 2-core machine (imports, the first page's plan)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


# --- real servers --------------------------------------------------------------------------------------------


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's programs (Debian keeps them out of PATH)."""
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True):
        if (folder / "initdb").exists():
            return folder
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of its own on a free loopback port; its URL. As root: run as the postgres user."""
    programs = postgres_bin()
    if programs is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; run_tests.sh does it)")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="sharding-lab-pg-"))  # in /tmp itself: reachable by the postgres user
    if os.getuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root, and there is no postgres user to run PostgreSQL as")
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    data, log = root / "data", root / "server.log"

    def run(*command):
        done = subprocess.run(as_user + [str(c) for c in command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{command[0]}: {done.stdout[-1000:]} {done.stderr[-2000:]}"

    try:
        run(programs / "initdb", "-D", data, "-A", "trust", "-U", "lab", "--no-sync", "-E", "UTF8")
        run(
            programs / "pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "start",
            "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
        )  # fmt: skip
        run(programs / "createdb", "-h", "127.0.0.1", "-p", port, "-U", "lab", "lab")
        yield f"postgresql://lab@127.0.0.1:{port}/lab"
    finally:
        subprocess.run(as_user + [str(programs / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


class Nginx:
    """deploy/nginx/nginx.conf on a free loopback port, its upstream being the given servers."""

    def __init__(self, servers: list[str]):
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            pytest.skip("nginx is not installed (apt-get install nginx-light; run_tests.sh does it)")
        self.folder = Path(tempfile.mkdtemp(prefix="sharding-lab-nginx-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        config = (ROOT / "deploy" / "nginx" / "nginx.conf").read_text()
        upstream = "server app:8501 max_fails=1 fail_timeout=5s;"
        assert upstream in config and "listen 8080;" in config
        config = config.replace(upstream, " ".join(f"server {s} max_fails=1 fail_timeout=5s;" for s in servers))
        config = config.replace("listen 8080;", f"listen 127.0.0.1:{self.port};").replace("/tmp/", f"{self.folder}/")
        (self.folder / "nginx.conf").write_text(config)
        self.log = open(self.folder / "nginx.log", "w")
        self.proc = subprocess.Popen(
            [nginx, "-c", str(self.folder / "nginx.conf"), "-p", str(self.folder), "-g", "daemon off;"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "_stcore/health", timeout=3)
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("nginx did not start: " + (self.folder / "nginx.log").read_text()[-2000:])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_servers(envs: list[dict]) -> list[Server]:
    servers = [Server(extra_env=env) for env in envs]  # started together: their imports overlap
    try:
        for server in servers:
            server.wait_healthy(START_S)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


# --- what a browser does and sees -----------------------------------------------------------------------------


def new_tab(chromium, height: int = 900):
    page = chromium.new_context(viewport={"width": 1280, "height": height}).new_page()
    page.set_default_timeout(120_000)
    upstreams = []
    page.on("response", lambda r: upstreams.append(r.headers.get("x-sharding-lab-upstream")))
    page.upstreams = upstreams
    return page


def mark(page) -> tuple[str, str]:
    """(server, tab id) from the tab's hidden mark: the server that drew the page last."""
    page.wait_for_function("() => document.querySelector('.st-key-lab_tab input')")
    server, _, tab_id, _ = page.locator(".st-key-lab_tab input").input_value().split("|", 3)
    return server, tab_id


def solve_eighth(page, url: str) -> None:
    """A student on the Challenges page, with the link's 2×4 FSDP + TP layout, checks 'An eighth each'."""
    page.goto(url + "challenges?mesh=2x4&preset=fsdp_tp")
    page.get_by_role("heading", name="Challenges").wait_for()
    page.locator(".st-key-challenge_eighth").get_by_role("button", name="Check").click()
    page.wait_for_function("() => document.body.innerText.includes('Solved 1 of')")


def click_until(page, link: str, text: str, within_s: float = 90) -> None:
    """Click ``link`` until ``text`` shows: while the browser reconnects (a few seconds after its server went
    away) a click may go nowhere, and a student clicks again."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            page.get_by_role("link", name=link, exact=True).click(timeout=10_000)
            page.get_by_text(text).first.wait_for(timeout=8_000)
            return
        except Exception:  # noqa: BLE001 - Playwright's timeouts: the student looks again, then clicks again
            if time.monotonic() > deadline:
                raise


def teacher_counts(page, url: str, want: dict | None = None) -> dict:
    """The challenges table of the teacher view at ``url`` (waited for until it equals ``want``, when given)."""
    if not page.url.startswith(url + "teacher"):
        page.goto(url + f"teacher?teacher={TOKEN}")
        page.get_by_role("heading", name="Teacher view").wait_for()
    deadline = time.monotonic() + 30
    while True:
        seen = page.evaluate(TEACHER_JS)
        if seen["ready"] and (want is None or seen["counts"] == want or time.monotonic() > deadline):
            return seen["counts"]
        time.sleep(1)


# --- the tests ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_the_class_record_survives_a_restart_of_the_server(chromium, tmp_path):
    """SQLite by default, in the compilation cache's folder: a solve, a restart, the teacher view still counts it."""
    env = {"SHARDING_LAB_CACHE_DIR": str(tmp_path / "cache"), "SHARDING_LAB_TEACHER_TOKEN": TOKEN}
    env["SHARDING_LAB_DATABASE_URL"] = ""  # the default: a file next to the cache
    (first,) = start_servers([env])
    try:
        student = new_tab(chromium)
        solve_eighth(student, first.url)
        student.context.close()
    finally:
        first.stop()  # SIGTERM: what a restart does
    assert (tmp_path / "cache" / "classroom.sqlite3").exists()
    (second,) = start_servers([env])
    try:
        teacher = new_tab(chromium, 1400)
        assert teacher_counts(teacher, second.url, {"eighth": 1}) == {"eighth": 1}
        # The server before the restart is listed as stopped, this one as up.
        teacher.get_by_text(re.compile(r"stopped \d+ s ago")).wait_for()
        assert "The class record is kept in sqlite:///" in teacher.inner_text("body")
        teacher.context.close()
    finally:
        second.stop()


@pytest.mark.timeout(600)
def test_two_replicas_behind_the_load_balancer_share_the_class_and_survive_one_stopping(chromium, postgres, tmp_path):
    cache = tmp_path / "shared-cache"  # one compilation cache for both, as on a shared volume
    envs = [
        {
            "SHARDING_LAB_DATABASE_URL": postgres,
            "SHARDING_LAB_TEACHER_TOKEN": TOKEN,
            "SHARDING_LAB_REPLICA_ID": name,
            "SHARDING_LAB_CACHE_DIR": str(cache),
        }
        for name in ("replica-a", "replica-b")
    ]
    servers = start_servers(envs)
    by_name = dict(zip(("replica-a", "replica-b"), servers))
    balancer = Nginx([f"127.0.0.1:{s.port}" for s in servers])
    try:
        # Students arrive through the load balancer until both replicas have some (the cookie is random).
        students = []
        while len({mark(s)[0] for s in students}) < 2:
            assert len(students) < 10, "ten browsers, all on one replica: the balancer does not spread them"
            student = new_tab(chromium)
            solve_eighth(student, balancer.url)
            students.append(student)
        for student in students:  # each browser stayed on one replica: the balancer's word and the app's
            assert len({u for u in student.upstreams if u}) == 1, student.upstreams
            server, _ = mark(student)
            assert {u for u in student.upstreams if u} == {f"127.0.0.1:{by_name[server].port}"}
        # Either replica's teacher view shows the whole class.
        teacher = new_tab(chromium, 1400)
        want = {"eighth": len(students)}
        for server in servers:
            teacher.goto("about:blank")
            assert teacher_counts(teacher, server.url, want) == want, server.url
        # One replica is killed mid-class.
        victim_name = mark(students[0])[0]
        moved = [s for s in students if mark(s)[0] == victim_name]
        tab_ids = {mark(s)[1] for s in moved}
        by_name[victim_name].proc.send_signal(signal.SIGKILL)
        by_name[victim_name].proc.wait(30)
        survivor = next(s for s in servers if s is not by_name[victim_name])
        for student in moved:
            # The student clicks on: the page says it moved, and where from; the tab is now on the other replica.
            click_until(student, "Layout", "This page moved to another server")
            assert victim_name in student.inner_text("body")
            # The mark is drawn after the page (the notice first): wait for the new server's.
            student.wait_for_function(
                "victim => !document.querySelector('.st-key-lab_tab input').value.startsWith(victim + '|')",
                arg=victim_name,
            )
            server, tab_id = mark(student)
            assert server != victim_name and tab_id in tab_ids  # the same tab, counted once
            # Its settings came with it (the query of the link it was showing), and so did its solved challenge.
            student.get_by_role("heading", name="Mesh 2×4 (data, model)").wait_for()
            assert "preset=fsdp_tp" in student.url
            student.get_by_role("link", name="Challenges", exact=True).click()
            student.wait_for_function("() => document.body.innerText.includes('Solved 1 of')")
        # The record lost nothing; the teacher view says which replica is gone.
        teacher.goto("about:blank")
        assert teacher_counts(teacher, survivor.url, want) == want
        teacher.get_by_text(re.compile(r"not heard from for \d+ s")).wait_for(timeout=60_000)
        for page in [*students, teacher]:
            page.context.close()
    finally:
        balancer.stop()
        for server in servers:
            server.stop()
