"""Whether this process is a worker another process started, not the one that serves the app.

A process started by :mod:`multiprocessing` (the search's compile workers: ``spawn``) first re-runs its
parent's main script, which under Streamlit is the app's entry script, before it runs its target; and a
forked child has its parent's whole state. Neither may act as a server: register with the class record, count
a session, warm the compilation cache. The class record and the warm-up ask :func:`is_worker` first.
"""

from __future__ import annotations

import multiprocessing
import sys

# The spawn and forkserver start methods run ``python -c 'from multiprocessing.spawn import spawn_main; …'
# --multiprocessing-fork``: the interpreter's own command line keeps that flag while the child re-runs its
# parent's main script (``multiprocessing.parent_process()`` is set only after that).
_SPAWNED = "--multiprocessing-fork"


def is_worker() -> bool:
    """True in a process that :mod:`multiprocessing` started (spawned, forked or by a fork server)."""
    return multiprocessing.parent_process() is not None or _SPAWNED in getattr(sys, "orig_argv", ())
