"""JAX's persistent compilation cache, pointed at ``SHARDING_LAB_CACHE_DIR`` (default
``~/.cache/sharding-lab/jax``; ``off`` disables it), so a restarted server loads the programs the last one compiled
instead of compiling them again. JAX's configuration belongs to the process: the cache is enabled once per process.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .. import settings

_lock = threading.Lock()
_enabled: dict = {}  # "path": the directory this process's JAX writes to (None: off), once enabled


def cache_dir() -> Path | None:
    """Where compiled programs are kept, or None when ``SHARDING_LAB_CACHE_DIR=off``."""
    value = settings.CACHE_DIR.raw()
    if value.lower() in ("off", "none", "0", "false"):
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sharding-lab" / "jax"


def enable_compilation_cache() -> Path | None:
    """Turn JAX's persistent compilation cache on (once per process); the directory, or None."""
    import jax

    with _lock:
        if "path" in _enabled:
            return _enabled["path"]
        path = cache_dir()
        if path is not None:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError:  # a read-only home: run without the cache rather than not at all
                path = None
        if path is not None:
            jax.config.update("jax_compilation_cache_dir", str(path))
            # JAX keeps only programs that took ≥ 1 s to compile by default; a chunk here takes
            # ~0.7 s on an idle core and several seconds when a class compiles at once.
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
            # JAX hands XLA a GPU autotuning directory inside the cache directory and hashes that option into
            # every program's key (jax 0.10.2, CPU included): a cache copied or moved to another path missed
            # every program (measured: a class's 20 runs all compiled again). No autotuning here to keep.
            jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
        _enabled["path"] = path
        return path
