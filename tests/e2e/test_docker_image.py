"""The Docker image, built and run: health, the unprivileged user, a page drawn in a browser.

Needs a running Docker engine and the Dockerfile's base image. Neither is on CI's machine by default
(Docker Hub is out of reach); `../shared/tools/docker-local-base.sh` installs Debian's docker.io, starts
dockerd and builds a stand-in base from Debian's packages. Without them every test here is skipped, with
the reason. The build skips the compile-cache warm-up (WARM_CACHE=0) to stay within the suite's time.
"""

import shutil
import subprocess
import time
import urllib.request

import pytest

from sharding_lab.distributed.launcher import free_port
from tests.support import CHROMIUM, CHROMIUM_FLAGS, ROOT, needs_chromium

IMAGE = "sharding-lab-test"


def _engine() -> str:
    """Why the image cannot be built here ('' when it can)."""
    if not shutil.which("docker"):
        return "no docker command (../shared/tools/docker-local-base.sh installs one)"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "no Docker engine runs here (../shared/tools/docker-local-base.sh starts one)"
    base = next(
        line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.upper().startswith("FROM ")
    )
    if subprocess.run(["docker", "image", "inspect", base], capture_output=True, timeout=30).returncode != 0:
        return f"the base image {base} is not here and Docker Hub is out of reach (docker-local-base.sh makes one)"
    return ""


pytestmark = pytest.mark.skipif(bool(_engine()), reason=_engine() or "ready")


@pytest.fixture(scope="module")
def container():
    built = subprocess.run(
        ["docker", "build", "--build-arg", "WARM_CACHE=0", "-t", IMAGE, "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    port = free_port()
    run = subprocess.run(
        ["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:8501", IMAGE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    cid = run.stdout.strip()
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "_stcore/health", timeout=3) as response:
                    if response.read() == b"ok":
                        break
            except OSError:
                time.sleep(0.5)
        else:
            logs = subprocess.run(["docker", "logs", cid], capture_output=True, text=True).stdout
            pytest.fail("the container never served /_stcore/health: " + logs[-3000:])
        yield url, cid
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, timeout=60)


def test_the_container_is_healthy_and_runs_as_the_app_user(container):
    _, cid = container
    user = subprocess.run(["docker", "exec", cid, "id", "-u"], capture_output=True, text=True, timeout=30)
    assert user.stdout.strip() == "10001"
    tpu = subprocess.run(
        ["docker", "exec", cid, "python", "-c", "import libtpu; print('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tpu.stdout.strip() == "ok"  # the TPU compiler is in the image, for the TPU targets


@pytest.mark.browser
@needs_chromium
def test_a_browser_draws_the_layout_page_from_the_container(container):
    from playwright.sync_api import sync_playwright

    url, _ = container
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.goto(url)
            tab.get_by_text("Sharding layout").first.wait_for(timeout=90_000)
            tab.get_by_text("Resolved PartitionSpecs").first.wait_for(timeout=90_000)
            assert tab.locator("[data-testid=stException]").count() == 0
        finally:
            browser.close()
