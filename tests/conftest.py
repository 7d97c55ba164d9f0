import os

os.environ.setdefault("SHARDING_LAB_DEVICES", "8")
# Tests measure and compile for themselves: no programs from a developer's disk cache, no warm-up
# thread competing for the cores (tests/app/test_class.py checks both on purpose).
os.environ.setdefault("SHARDING_LAB_CACHE_DIR", "off")
os.environ.setdefault("SHARDING_LAB_WARM", "off")

import sharding_lab  # noqa: E402,F401  (forces the host devices before any test touches JAX)
