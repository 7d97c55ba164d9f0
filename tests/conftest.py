import os

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
