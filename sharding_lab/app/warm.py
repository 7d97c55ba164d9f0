"""Warm start for a class: compiled programs kept on disk, and the default layout compiled early.

:func:`enable_compilation_cache` points JAX's persistent compilation cache at
``SHARDING_LAB_CACHE_DIR`` (default ``~/.cache/sharding-lab/jax``; ``off`` disables it), so a
restarted server loads the programs the last one compiled instead of compiling them again.
:func:`warm_in_background` then compiles the default configuration (the seed preset on the
default mesh — what every student sees first) in a low-priority thread while the server waits for
its first students. Both are the app's business: the CLI and the tests compile as before.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_lock = threading.Lock()
_state: dict = {}


def cache_dir() -> Path | None:
    """Where compiled programs are kept, or None when ``SHARDING_LAB_CACHE_DIR=off``."""
    value = os.environ.get("SHARDING_LAB_CACHE_DIR", "").strip()
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
        if "cache" in _state:
            return _state["cache"]
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
        _state["cache"] = path
        return path


def warm_in_background(configs=None) -> threading.Thread | None:
    """Compile ``configs`` (default: the app's default configuration) in a background thread at
    the lowest CPU priority, once per process; the thread, or None if it was started before."""
    with _lock:
        if "warm" in _state:
            return None
        _state["warm"] = thread = _warm_thread(configs)
    return thread


def _warm_thread(configs) -> threading.Thread:
    thread = threading.Thread(target=_warm, args=(configs,), name="sharding-lab-warm", daemon=True)
    thread.start()
    return thread


def _warm(configs) -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only (Linux)
    except (AttributeError, OSError):
        pass
    from ..config import LabConfig
    from ..training import Lab, Trainer

    for config in configs or [LabConfig()]:
        try:
            # One short run compiles what a student's first run would: the model's creation, the
            # 100-step chunk (the same program as a full run's), the prediction and the layout check.
            lab = Lab(config)
            Trainer(lab, steps=min(config.chunk, config.steps)).run()
            lab.predict(lab.x_host)
            lab.verify_layout()
        except Exception:  # noqa: BLE001 - warming is a bonus; a student's own run reports its errors
            pass
