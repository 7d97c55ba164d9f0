import os
import sys

import pytest

os.environ.setdefault("SHARDING_LAB_DEVICES", "8")
# Tests measure and compile for themselves: no programs from a developer's disk cache, no warm-up
# thread competing for the cores (tests/app/test_class.py checks both on purpose).
os.environ.setdefault("SHARDING_LAB_CACHE_DIR", "off")
os.environ.setdefault("SHARDING_LAB_WARM", "off")
# The suite compiles hundreds of small programs and runs each for a few steps: XLA:CPU's LLVM optimisations
# cost more than they save there (a tiny transformer's init, 40 training steps and forward pass: 34 s for six
# presets at the default level, 19 s at 0). Inherited by the commands the tests start; an exported script sets
# its own XLA_FLAGS, as a user's would.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

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
