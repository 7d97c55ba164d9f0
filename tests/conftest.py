import atexit
import os
import shutil
import tempfile

os.environ.setdefault("SHARDING_LAB_DEVICES", "8")
# One compilation cache for the whole run, empty at its start and removed at its end: the app's servers, the
# commands and the exported scripts the tests start, and both test processes, otherwise compiled the same
# layouts again each (the suite: 20.3 → 16.4 and 17.8 min on two cores, 2026-12-07). Never a developer's cache: the
# tests compile for themselves. Set before pytest-xdist starts its workers, which inherit it.
if "SHARDING_LAB_CACHE_DIR" not in os.environ:
    os.environ["SHARDING_LAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="sharding-lab-tests-cache-")
    atexit.register(shutil.rmtree, os.environ["SHARDING_LAB_CACHE_DIR"], True)
# The class record would be a SQLite file next to that cache, shared by every server of the run: each keeps
# its own in memory instead, as a server without a cache does (tests that need a file or PostgreSQL say so).
os.environ.setdefault("SHARDING_LAB_DATABASE_URL", "sqlite://")
# No warm-up thread competing for the cores (tests/app/test_class.py starts one on purpose).
os.environ.setdefault("SHARDING_LAB_WARM", "off")
# A page's exception raised as Streamlit would, so AppTest's `at.exception` still sees it (a class server shows
# a sentence with an incident id instead: tests/app/test_incidents.py turns this off).
os.environ.setdefault("SHARDING_LAB_TRACEBACKS", "on")
# The suite compiles hundreds of small programs and runs each for a few steps: XLA:CPU's LLVM optimisations
# cost more than they save there (a tiny transformer's init, 40 training steps and forward pass: 34 s for six
# presets at the default level, 19 s at 0). Inherited by the commands the tests start; an exported script sets
# its own XLA_FLAGS, as a user's would.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import pytest  # noqa: E402

import sharding_lab  # noqa: E402,F401  (forces the host devices before any test touches JAX)
from tests import second_stack  # noqa: E402

second_stack.listen()
_LOWERED_BEFORE = pytest.StashKey[int]()


def pytest_collection_modifyitems(config, items):
    """CI's second run (tests/core on Python 3.11, SHARDING_LAB_SECOND_STACK=1) leaves out what cannot differ
    between the stacks (tests/second_stack.py says what and why)."""
    if not second_stack.SECOND_STACK:
        return
    dropped = [item for item in items if second_stack.left_out(item.nodeid)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not second_stack.left_out(item.nodeid)]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.stash[_LOWERED_BEFORE] = second_stack.lowered()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test of a file tests/second_stack.py runs on one stack only, as handing JAX nothing to lower, fails if it
    lowered a program after all (its fixtures included): the list would hide a difference between the stacks."""
    outcome = yield
    report = outcome.get_result()
    path = item.nodeid.partition("::")[0]
    if call.when != "teardown" or path not in second_stack.NO_JAX or report.failed:
        return
    count = second_stack.lowered() - item.stash.get(_LOWERED_BEFORE, second_stack.lowered())
    if count:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} lowered {count} JAX program(s), but tests/second_stack.py lists {path} as handing JAX "
            "nothing (NO_JAX): CI's Python 3.11 run leaves it out. Move it out of NO_JAX, or the compile out of it."
        )
