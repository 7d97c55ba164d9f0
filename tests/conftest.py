import os
import sys

import pytest

os.environ.setdefault("SHARDING_LAB_DEVICES", "8")
# Tests measure and compile for themselves: no programs from a developer's disk cache, no warm-up
# thread competing for the cores (tests/app/test_class.py checks both on purpose).
os.environ.setdefault("SHARDING_LAB_CACHE_DIR", "off")
os.environ.setdefault("SHARDING_LAB_WARM", "off")

import sharding_lab  # noqa: E402,F401  (forces the host devices before any test touches JAX)

_exit_status = {"code": None}


def pytest_sessionfinish(session, exitstatus):
    _exit_status["code"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave with pytest's own verdict once its summary is printed, skipping the interpreter's teardown:
    with the TPU compiler loaded (compile targets), libtpu's own exit handlers were seen to abort the
    process (signal 6) after every test had passed — twice in a few hundred runs — which would turn a
    green run red."""
    if _exit_status["code"] is not None and not os.environ.get("SHARDING_LAB_TEST_NORMAL_EXIT"):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status["code"])
