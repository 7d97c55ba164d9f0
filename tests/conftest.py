import os

os.environ.setdefault("SHARDING_LAB_DEVICES", "8")

import sharding_lab  # noqa: E402,F401  (forces the host devices before any test touches JAX)
