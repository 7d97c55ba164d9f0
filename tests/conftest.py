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

import sharding_lab  # noqa: E402,F401  (forces the host devices before any test touches JAX)
