"""The other stack's Python, for tests that run the same program on both stacks the lab supports: Python 3.11 with
JAX 0.10.2 (the TPU machine's) and Python 3.12+ with the newest JAX.

Where it is found, in order: ``SHARDING_LAB_OTHER_PYTHON`` (a path to a Python that has the other stack), else the
environments ``scripts/venv.sh`` makes beside each other — from Python 3.11, ``.venv`` when it holds 3.12 or newer;
from 3.12+, ``.venv-py311`` (``.ci/run`` creates both). A checkout with one environment has no other stack: a test
that needs it skips there with the reason — except where ``SHARDING_LAB_BOTH_STACKS`` is set (CI), where a missing
stack is a failure, never a quiet skip.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

BOTH_STACKS_REQUIRED = bool(os.environ.get("SHARDING_LAB_BOTH_STACKS"))


def _version(python: Path) -> tuple[int, int] | None:
    try:
        done = subprocess.run(
            [str(python), "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, timeout=30
        )
    except OSError:
        return None
    return tuple(map(int, done.stdout.split())) if done.returncode == 0 else None


def _stack(python: Path) -> str | None:
    """'Python 3.12, jax 0.12.1' — or None where that Python cannot import JAX."""
    done = subprocess.run(
        [
            str(python),
            "-c",
            "import sys, jax; print(f'Python {sys.version_info[0]}.{sys.version_info[1]}, jax', jax.__version__)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"},
    )
    return done.stdout.strip() if done.returncode == 0 else None


def other_stack_python() -> tuple[Path, str]:
    """(the other stack's Python, 'Python 3.x, jax y'); skips the test where there is none, fails where
    ``SHARDING_LAB_BOTH_STACKS`` says there must be one."""
    named = os.environ.get("SHARDING_LAB_OTHER_PYTHON")
    mine = sys.version_info[:2]
    if named:
        candidates = [Path(named)]
    elif mine < (3, 12):
        candidates = [ROOT / ".venv" / "bin" / "python"]
    else:
        candidates = [ROOT / ".venv-py311" / "bin" / "python"]
    for python in candidates:
        version = _version(python) if python.exists() else None
        if version is None or (version < (3, 12)) == (mine < (3, 12)):
            continue  # absent, broken, or this very stack (the .venv of a 3.11-only machine)
        stack = _stack(python)
        if stack:
            return python, stack
    reason = (
        f"no other stack beside this Python {mine[0]}.{mine[1]}: looked at {', '.join(map(str, candidates))} "
        "(SHARDING_LAB_OTHER_PYTHON names one; .ci/run makes .venv and .venv-py311)"
    )
    if BOTH_STACKS_REQUIRED:
        pytest.fail(reason + " — and SHARDING_LAB_BOTH_STACKS says both must be tested")
    pytest.skip(reason)
