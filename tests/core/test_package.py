"""The lab installs like any Python package: ``pip install .`` gives a ``sharding-lab`` command that works
outside the checkout, and the package list in pyproject.toml holds every folder of the code."""

import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from tests.support import ROOT

SUBCOMMANDS = ("app", "train", "layout", "comm", "export", "cost", "plan", "challenge")


def test_pyproject_lists_every_package():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "sharding_lab").rglob("__init__.py")}
    assert listed == folders | {"sharding_lab.webapp", "sharding_lab.webapp.app_pages"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh virtual environment with ``pip install .`` of this checkout. Its dependencies (JAX and the
    rest, GBs) are the test environment's own, seen through a path file, so nothing is downloaded but the
    build backend; the lab itself is the installed copy, not the checkout."""
    folder = tmp_path_factory.mktemp("venv")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    elsewhere = folder / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return venv, elsewhere, env


def run(installed, *args, timeout=300):
    venv, elsewhere, env = installed
    return subprocess.run(
        [str(venv / "bin" / "sharding-lab"), *args],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_installed_command_lists_every_subcommand(installed):
    done = run(installed, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    for name in SUBCOMMANDS:
        assert name in done.stdout


def test_the_installed_command_lays_out_as_the_checkout_does(installed):
    venv, elsewhere, env = installed
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sharding_lab; print(sharding_lab.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert str(venv) in where.stdout, "the installed copy, not the checkout, must answer"
    done = run(installed, "layout", "--mesh", "2x4", "--preset", "fsdp", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    here = subprocess.run(
        [sys.executable, "-m", "sharding_lab", "layout", "--mesh", "2x4", "--preset", "fsdp", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert answer == json.loads(here.stdout)
    blocks = answer["layout"]["params/w1"]["devices"].values()
    assert len({json.dumps(block) for block in blocks}) > 1, "FSDP splits w1: the devices hold different blocks"


def test_pip_install_keeps_the_jax_already_installed(installed, tmp_path):
    """The dependencies are ranges, not pins: ``pip install .`` (dependencies and all) into an environment that
    already holds a JAX the lab supports — this test environment's, 0.10.2 on Python 3.11, 0.12.1 on 3.12+ —
    installs the lab alone and changes no package. (Pinned ``jax==0.10.2`` downgraded a user's 0.12.1.)"""
    venv, elsewhere, env = installed
    report = tmp_path / "report.json"
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), ROOT],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    would_install = {
        item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(report.read_text())["install"]
    }
    assert set(would_install) == {"sharding-lab"}, would_install


def test_the_installed_app_serves(installed):
    """``sharding-lab app`` from another directory finds the entry script and pages inside the package and
    serves them with the checkout's server settings."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    venv, elsewhere, env = installed
    proc = subprocess.Popen(
        [str(venv / "bin" / "sharding-lab"), "app", f"--server.port={port}", "--server.address=127.0.0.1"],
        cwd=elsewhere,
        env={**env, "SHARDING_LAB_WARM": "off", "SHARDING_LAB_CACHE_DIR": "off"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, health = time.monotonic() + 90, None
        while time.monotonic() < deadline and proc.poll() is None and health != b"ok":
            try:
                health = urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read()
            except OSError:
                time.sleep(0.5)
        assert health == b"ok", proc.stdout.read() if proc.poll() is not None else "no health in 90 s"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
