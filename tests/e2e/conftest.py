"""The browser tests' shared parts: a real `streamlit run app.py` on 127.0.0.1 (one per test module), a
Chromium tab driven by Playwright, the app's first page loaded in it, and a patient read for a loaded
machine. Screenshots land in artifacts/screenshots/ for a person to look at."""

import os
import subprocess
import sys
import time
import urllib.request

import pytest

from sharding_lab.distributed.launcher import free_port
from tests.support import CHROMIUM, CHROMIUM_FLAGS, ROOT, SHOTS


@pytest.fixture(scope="module")
def server():
    port = free_port()
    env = dict(os.environ, SHARDING_LAB_DEVICES="8")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.headless=true",
            f"--server.port={port}",
            "--server.address=127.0.0.1",
            "--browser.gatherUsageStats=false",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(url + "_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("streamlit did not start: " + proc.stdout.read().decode()[-2000:])
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def browser_tab():
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser.new_page(viewport={"width": 1500, "height": 2400})
        browser.close()


@pytest.fixture
def page(server, browser_tab):
    browser_tab.goto(server)
    browser_tab.wait_for_selector("text=Shard maps", timeout=60_000)
    return browser_tab
