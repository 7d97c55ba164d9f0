"""The code reads one way: Ruff's lint and its formatter (configured in pyproject.toml) find nothing."""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def ruff(*args: str) -> subprocess.CompletedProcess:
    command = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    return subprocess.run([command, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_is_clean():
    done = ruff("check", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout[-4000:]


def test_ruff_format_is_clean():
    done = ruff("format", "--check", ".")
    assert done.returncode == 0, done.stdout[-4000:]


def test_no_module_is_over_500_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in [*(ROOT / "sharding_lab").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert not long, f"one concept per module: split {long}"


def test_no_function_in_the_package_is_over_80_lines():
    """Issue 57: functions of over 80 lines did several things one after another (eleven were left when this test was
    written: run_pool 209 lines, print_plan 133, make_pipelined_step 119 …; in the pages, the Lesson's transformer
    chapter 125 and the Teacher view's overview 85); each is split by what its parts do."""
    import ast

    long = {
        f"{p.relative_to(ROOT)}:{node.name}": n
        for p in [*(ROOT / "sharding_lab").rglob("*.py"), *(ROOT / "app_pages").glob("*.py"), ROOT / "app.py"]
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (n := node.end_lineno - node.lineno + 1) > 80
    }
    assert not long, f"split by what each part does: {long}"
