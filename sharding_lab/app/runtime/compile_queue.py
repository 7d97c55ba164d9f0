"""A page's big compiles wait in the class server's compile queue, their place and then their compile said at
the top of the page (:mod:`sharding_lab.server.page_compiles`): a page waiting behind another student's Llama 3
70B step reads "1 compile ahead of this one", not a page that froze.

app.py runs every page inside :func:`shown`.
"""

from __future__ import annotations

import contextlib

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import in_cached_function

from sharding_lab.server import page_compiles
from sharding_lab.units import format_bytes


@contextlib.contextmanager
def _not_cached():
    """The note is the page's, not a cached function's: a compile inside ``st.cache_data`` (the cost panel's) must
    not record it, or every later cache hit would replay "Compiling…" into a note of a page run long gone."""
    token = in_cached_function.set(False)
    try:
        yield
    finally:
        in_cached_function.reset(token)


@contextlib.contextmanager
def shown():
    """Run a page whose big compiles take their turn of the server's queue, with a note that says where they are."""
    note = st.empty()  # the top of the page: seen before whatever the page drew so far

    def on_wait(ahead: int) -> None:
        with _not_cached():
            note.info(page_compiles.waiting_sentence(ahead), icon=":material/hourglass_top:")

    def on_compile(size: int) -> None:
        with _not_cached():
            note.info(
                f"Compiling a big program (its inputs hold {format_bytes(size)}: weights, optimizer state and batch "
                "over every device) — minutes for the largest models. The page goes on when the compiler is done.",
                icon=":material/memory:",
            )

    def on_done() -> None:
        with _not_cached():
            note.empty()

    with page_compiles.queued(on_wait, on_compile, on_done):
        yield
