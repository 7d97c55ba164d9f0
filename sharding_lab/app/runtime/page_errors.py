"""A page's exception shown as one sentence with an incident id; its traceback stays in the server's log.

app.py runs every page inside :func:`caught`, and each polling fragment is wrapped by :func:`guarded` (a
fragment's rerun does not go through app.py: it also counts the tab as open, as app.py does each run).
Streamlit's own control flow (``st.rerun``, ``st.stop``) derives from ``BaseException`` and passes through.
What escapes both (an error in app.py itself) Streamlit shows without details:
``client.showErrorDetails = "none"`` in ``.streamlit/config.toml``.

``SHARDING_LAB_TRACEBACKS=on`` shows the exception with its traceback instead of the sentence (for
development; the tests set it, so AppTest's ``exception`` elements still hold a page's error), after recording
it all the same.
"""

from __future__ import annotations

import contextlib
import functools

import streamlit as st

from sharding_lab import settings
from sharding_lab.app.state import tabs
from sharding_lab.server.incidents import INCIDENTS


@contextlib.contextmanager
def caught(where: str):
    """Run a page (or part of one): an exception becomes a short message with an id, logged with its traceback."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 — every error of a page is answered, none shown raw
        incident = INCIDENTS.record(where, error)
        if settings.TRACEBACKS.on():  # st.exception shows every detail whatever client.showErrorDetails says
            st.exception(error)
            return
        st.error(
            f"Something went wrong on this page that the lab did not expect (incident `{incident.id}`). "
            "Change a setting or reload the page to go on; your teacher can find what happened in the "
            "server's log under that id.",
            icon=":material/error:",
        )


def guarded(where: str):
    """Decorate a fragment's function so its reruns are :func:`caught` too, and count the tab as open: a Plan
    page following a search, a Train page following a run, polls for minutes without a full run."""

    def decorate(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            tabs.seen()
            with caught(where):
                return function(*args, **kwargs)

        return run

    return decorate
