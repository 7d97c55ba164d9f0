"""The session's settings: their defaults, how they cross from page to page, and the link applied once.

Every setting lives in ``st.session_state`` under its key (:mod:`.config_state`). Streamlit (1.67) gives a
widget a different id on each page (the page's script hash is part of it), drops a widget's value when a
run does not draw it, and a page switch carries no widget state from the browser: a value reaches the next
page only under its key. It can be elsewhere at the switch in two ways, each handled here:

- set by code in the run before the switch (a link, a callback): still under its key. :func:`carry_settings`
  copies every setting onto itself on a page's first run, so the new page's widget finds it.
- filed under the old page's widget id by a fragment's timer run (Plan's progress, Train's live view):
  every setting's widget is drawn with ``persist_state=KEEP``, and the switch moves the value back under
  its key (``SessionState._remove_stale_widgets``). Without it, Train opened on cpu, the MLP and the seed
  preset after a visit to Plan.
"""

from __future__ import annotations

import streamlit as st

from sharding_lab.app.state import config_state, links
from sharding_lab.models import plugins

KEEP = "session"  # every setting widget's persist_state
DRAWN_PAGE = "settings_drawn_on"  # the page whose last run ended with the settings' widgets drawn
# The Plan page's question: settings too (carried like the sidebar's), though no link holds them.
PLAN_BOXES = (
    "plan_size",
    "plan_target",
    "plan_batch_tokens",
    "plan_seq",
    "plan_optimizer",
    "plan_presets",
    "plan_remats",
)


def init_state() -> None:
    """Defaults for a new session, and every setting carried under its key. First, the model families the
    server's owner installed or named in SHARDING_LAB_FAMILIES (once per process; never from a link)."""
    state = st.session_state
    state.family_problems = plugins.load_installed()
    defaults = config_state.defaults()  # once: it walks every model family's sizes
    for key, value in defaults.items():
        state.setdefault(key, value)


def carry_settings(page) -> None:
    """On the first run of ``page`` (a page switch, a new session, a run cut short before its page was drawn):
    every setting copied onto itself, so that the page's own widgets find it under its key.

    Only then: a setting written in a run is sent back to the browser as the widget's value, and on a busy
    server that echo can arrive after the learner's next edit and undo it — the box showing the older value,
    and the browser's next rerun carrying it (a name typed twice in a moment came back as the first in
    the 20-session load test: docs/classroom-timing.md). On the page's later runs the browser is the one source of each
    widget's value, as Streamlit means it to be."""
    state = st.session_state
    if state.get(DRAWN_PAGE) == page.url_path:
        return
    state.update(config_state.snapshot(state))  # the sidebar's settings and the rules table's values
    for key in PLAN_BOXES:
        if key in state:
            state[key] = state[key]


def page_drawn(page) -> None:
    """``page`` ran to its end: its widgets hold the settings, so its next runs need no copy."""
    st.session_state[DRAWN_PAGE] = page.url_path


def restore_link() -> None:
    """Once per session, when the link is opened: apply its query parameters; say what could not be used.
    Never again: the sidebar rewrites the query string from the settings on every run, and a page switch
    keeps the session (and its ``link_restored``)."""
    if st.session_state.get("link_restored"):
        return
    st.session_state.link_restored = True
    updates, problems = links.from_query(st.query_params.to_dict())
    for key, value in updates.items():
        st.session_state[key] = value
    st.session_state.link_problems = problems


def connection_check():
    """A function that says whether this browser session is still connected (its tab open), callable from any
    thread — a run keeps training while its learner reads another page, and stops soon after the tab closes;
    None outside a Streamlit server (AppTest runs scripts without one)."""
    from streamlit import runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None or not runtime.exists():
        return None
    server, session_id = runtime.get_instance(), ctx.session_id
    return lambda: server.is_active_session(session_id)
