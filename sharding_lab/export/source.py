"""The source of the lab's own functions and classes — the export and the app's "code behind this" — safe
to ask for from several threads.

Why a module of its own: ``inspect.getsource`` parses the whole file with ``ast.parse``, and CPython 3.11
(3.11.7 here) can fail when two threads parse at once: ``SystemError: AST constructor recursion depth
mismatch`` (CPython issue 106905; 8 threads parsing ``models/mlp.py`` 200 times each: 7 of them failed). The
app runs every session's script in its own thread, so two students exporting, or opening the same lesson,
at the same moment met it — as did the export tests, whose scripts are written from a thread pool. One lock
serialises the parses; the answers are kept (the source does not change while a process runs).
"""

from __future__ import annotations

import functools
import inspect
import threading

_parsing = threading.Lock()


@functools.lru_cache(maxsize=None)
def _cached(obj) -> str:
    with _parsing:
        return inspect.getsource(obj)


def source_of(obj) -> str:
    """``inspect.getsource(obj)`` of a function or class, one parse at a time across threads, cached per object."""
    return _cached(obj)
