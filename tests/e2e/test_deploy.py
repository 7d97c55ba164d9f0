"""Deployment: the Dockerfile lints clean, its command serves the app, the config is all valid.

No Docker engine is needed: the image's CMD is parsed from the Dockerfile and run here, in this
checkout, with this virtualenv's Python standing in for the image's `streamlit`.
"""

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from sharding_lab.distributed.launcher import free_port
from tests.support import CHROMIUM, CHROMIUM_FLAGS, ROOT, needs_chromium

DOCKERFILE = ROOT / "Dockerfile"
CONFIG = ROOT / ".streamlit" / "config.toml"
INVALID_OPTION = "is not a valid config option"


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined."""
    result, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comments inside a continued instruction are dropped by Docker too
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, args = line.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def one(keyword: str) -> str:
    found = [args for kw, args in instructions() if kw == keyword]
    assert len(found) == 1, f"expected one {keyword}, found {found}"
    return found[0]


def dockerfile_env() -> dict[str, str]:
    env = {}
    for keyword, args in instructions():
        if keyword == "ENV":
            for match in re.finditer(r"(\w+)=(\"[^\"]*\"|\S+)", args):
                env[match.group(1)] = match.group(2).strip('"')
    return env


def cmd() -> list[str]:
    command = json.loads(one("CMD"))  # JSON (exec) form, or this fails
    assert not [args for kw, args in instructions() if kw == "ENTRYPOINT"], "CMD alone starts the app"
    return command


def fetch(url: str, timeout: float = 5) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


# --- (a) the Dockerfile -----------------------------------------------------------------------


def hadolint() -> str:
    found = Path(sys.executable).parent / "hadolint"
    return str(found) if found.exists() else (shutil.which("hadolint") or pytest.skip("hadolint not installed"))


def test_hadolint_passes_with_no_output():
    run = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout + run.stderr) == (0, "")


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path):
    """The check above can fail: the placeholder's shell-form CMD and named user are flagged."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim\nRUN useradd lab\nUSER lab\nCMD streamlit run app.py\n")
    run = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "DL3025" in run.stdout


def test_dockerfile_shape():
    base = one("FROM")
    # the newest stack: the Python constraints-py312.txt was checked with (3.13), its pins
    assert re.fullmatch(r"python:3\.13\.\d+-slim(-\w+)?", base), f"base image not pinned to a 3.13 slim tag: {base}"
    assert any(
        kw == "RUN" and "pip install --no-cache-dir -c constraints-py312.txt" in args for kw, args in instructions()
    )
    user = one("USER").split(":")[0]
    assert user not in ("root", "0"), "the app must not run as root"
    assert one("EXPOSE") == "8501"
    assert "/_stcore/health" in one("HEALTHCHECK")
    env = dockerfile_env()
    assert env["SHARDING_LAB_DEVICES"] == "8" and env["SHARDING_LAB_MAX_JOBS"] == "4"
    assert cmd()[:3] == ["streamlit", "run", "app.py"]
    assert {"--server.address=0.0.0.0", "--server.port=8501"} <= set(cmd())


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore matching, for the simple patterns used here (no '!' exceptions)."""
    parts = path.split("/")
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if fnmatch.fnmatch(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatch(parts[depth - 1], pattern[3:])
            ):
                return True
    return False


def test_dockerignore_keeps_the_app_and_drops_the_rest():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not any(p.startswith("!") for p in patterns)
    needed = [
        "app.py",
        "sharding_lab/app/ui.py",
        "pyproject.toml",
        "constraints.txt",
        "constraints-py312.txt",
        ".streamlit/config.toml",
        *[str(p.relative_to(ROOT)) for p in (ROOT / "app_pages").glob("*.py")],
        *[str(p.relative_to(ROOT)) for p in (ROOT / "sharding_lab").glob("*.py")],
    ]
    assert [p for p in needed if ignored(p, patterns)] == []
    for heavy in (".venv/bin/python", ".git/HEAD", "artifacts/screenshots/a.png", "sharding_lab/__pycache__/x.pyc"):
        assert ignored(heavy, patterns), heavy


# --- (b) the image's command serves the app ---------------------------------------------------


def local_command(port: int) -> list[str]:
    """The Dockerfile's CMD as it runs here: this Python for `streamlit`, a free port for 8501."""
    command = cmd()
    assert command[0] == "streamlit"
    return [
        sys.executable,
        "-m",
        "streamlit",
        *[f"--server.port={port}" if arg == "--server.port=8501" else arg for arg in command[1:]],
    ]


@pytest.fixture(scope="module")
def image_server():
    port = free_port()
    # The image's environment, less its cache directory (/app/cache, inside the image): here the tests'
    # own setting (off) stands, so nothing is written outside the checkout.
    env = {**os.environ, **{k: v for k, v in dockerfile_env().items() if k != "SHARDING_LAB_CACHE_DIR"}}
    proc = subprocess.Popen(
        local_command(port), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if fetch(url + "_stcore/health", timeout=2) == (200, b"ok"):
                    break
            except OSError:
                time.sleep(0.3)
        else:
            proc.kill()
            pytest.fail("the Dockerfile's CMD did not serve /_stcore/health: " + proc.communicate()[0][-3000:])
        yield url, port, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def test_cmd_serves_health_and_the_app(image_server):
    url, port, proc = image_server
    assert fetch(url + "_stcore/health") == (200, b"ok")
    status, body = fetch(url)
    assert status == 200 and b'<div id="root">' in body.replace(b"'", b'"')
    # the shared link to a page works too (Streamlit serves index.html for page URLs)
    assert fetch(url + "train")[0] == 200


def test_healthcheck_command_passes_against_the_server(image_server):
    _, port, _ = image_server
    args = one("HEALTHCHECK").split(" CMD ", 1)[1]
    check = json.loads(args)
    assert check[0] == "python"
    check = [sys.executable, *[a.replace(":8501/", f":{port}/") for a in check[1:]]]
    assert subprocess.run(check, timeout=30).returncode == 0
    # and it fails when nothing answers
    dead = [a.replace(f":{port}/", f":{free_port()}/") for a in check]
    assert subprocess.run(dead, timeout=30, capture_output=True).returncode != 0


@pytest.mark.browser
@needs_chromium
def test_a_browser_gets_the_app_from_the_image_command(image_server):
    """With the deployment config (XSRF on, viewer toolbar, small message limit) the app runs."""
    from playwright.sync_api import sync_playwright

    url, _, _ = image_server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.goto(url + "train")
            tab.wait_for_selector("text=Press", timeout=60_000)
            assert tab.locator("[data-testid=stException]").count() == 0
            tab.get_by_role("link", name="Layout", exact=True).wait_for(timeout=30_000)
        finally:
            browser.close()


def test_server_stops_cleanly_and_logged_no_config_warning(image_server):
    _, _, proc = image_server
    proc.terminate()
    output = proc.communicate(timeout=20)[0]
    assert proc.returncode in (0, -15), output[-2000:]
    assert INVALID_OPTION not in output, output
    assert "Traceback" not in output, output[-3000:]


# --- (c) every option in .streamlit/config.toml is one Streamlit knows ------------------------


def config_items() -> dict[str, object]:
    data = tomllib.loads(CONFIG.read_text())
    return {f"{section}.{key}": value for section, options in data.items() for key, value in options.items()}


SHOW_OPTIONS = """
import json, sys
from streamlit import config
options = config.get_config_options()
keys = json.loads(sys.argv[1])
print(json.dumps({k: (config.get_option(k) if k in options else "<unknown>") for k in keys}))
"""


def effective_options(keys: list[str], cwd: Path) -> tuple[dict, str]:
    run = subprocess.run(
        [sys.executable, "-c", SHOW_OPTIONS, json.dumps(keys)], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


def test_config_toml_options_are_known_and_take_effect():
    items = config_items()
    assert {
        "browser.gatherUsageStats",
        "server.enableXsrfProtection",
        "server.maxUploadSize",
        "server.maxMessageSize",
        "server.fileWatcherType",
        "server.headless",
    } <= set(items)
    effective, log = effective_options(list(items), ROOT)
    assert INVALID_OPTION not in log
    assert effective == items
    assert items["browser.gatherUsageStats"] is False and items["server.enableXsrfProtection"] is True
    assert items["server.fileWatcherType"] == "none" and items["server.headless"] is True
    assert items["server.maxUploadSize"] <= 10 and items["server.maxMessageSize"] <= 50


def test_an_unknown_option_would_be_caught(tmp_path):
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text('[server]\nfileWatcher = "none"\n')
    effective, log = effective_options(["server.fileWatcher"], tmp_path)
    assert effective == {"server.fileWatcher": "<unknown>"} and INVALID_OPTION in log


def test_streamlit_config_show_lists_our_values():
    run = subprocess.run(
        [sys.executable, "-m", "streamlit", "config", "show"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and INVALID_OPTION not in run.stdout + run.stderr
    from streamlit import config

    for key, value in config_items().items():
        if config.get_config_options()[key].visibility == "hidden":
            continue  # e.g. runner.postScriptGC: valid (see above) but not listed by `config show`
        shown = json.dumps(value) if isinstance(value, str) else str(value).lower()
        assert f"\n{key.split('.')[-1]} = {shown}\n" in run.stdout, key
