"""A browser tab that outlives its server: the tab keeps a mark — the server that drew it last, the tab's opaque
class id, and its settings as a share link's query — and sends it back with every rerun, to whichever server.

A Streamlit session lives in one server's memory. When that server stops (a replica killed, a restart), the
browser reconnects — through the load balancer, to another replica — and its next rerun starts a new session
there, with none of the old one's state. When that rerun is a click on another page, the browser does not even
send the page's link (Streamlit clears the query string between pages). The mark, a hidden text box drawn after
the page, is a widget: its value comes back with the rerun. A server that finds another server's mark restores
the settings from it, keeps the tab's id (the teacher view counts the student once), and tells the student what
happened (:func:`moved_notice`): a run that was training there, its results and the hints opened stayed behind.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import secrets
from urllib.parse import parse_qsl, urlencode

import streamlit as st

from sharding_lab.app.state import links
from sharding_lab.server import classroom

KEY = "lab_tab"
BOOT = secrets.token_hex(4)  # this server process: a restart under the same name is a move too
MAX_MARK = 20_000  # characters: a link's query is well under 1,000; a longer mark is not one this app wrote
_MARK = re.compile(r"(?P<server>[\w.:-]{1,128})\|(?P<boot>[0-9a-f]{8})\|(?P<id>[0-9a-f]{16})\|(?P<query>.*)", re.DOTALL)


# The tab this script run draws for, as last read or changed in this run. Why not the session state: once a page
# has called st.stop(), every read of it raises StopException again, and the run's end still has to count the tab.
_this_run: contextvars.ContextVar[str] = contextvars.ContextVar("tab_of_this_run")


def tab_id() -> str:
    """This tab's opaque id (a new tab: a new one)."""
    tab = st.session_state.setdefault("classroom_id", secrets.token_hex(8))
    _this_run.set(tab)
    return tab


def seen() -> None:
    """Count this tab as open for the teacher view now (a polling fragment's every run: a tab that follows a long
    search draws nothing else for minutes)."""
    classroom.seen(tab_id())


@contextlib.contextmanager
def counted():
    """Count this tab as open for the teacher view when the run inside ends, however it ends: drawn to its end,
    stopped early (st.stop()), raised, or rerun — a tab that has just moved here is counted under the id its mark
    brought back (:func:`keep_mark` takes it over before its rerun), not the new session's."""
    token = _this_run.set(tab_id())
    try:
        yield
    finally:
        classroom.seen(_this_run.get())
        _this_run.reset(token)


def restore_moved() -> None:
    """At the start of a run: the settings of a tab that just moved here (found by :func:`keep_mark` at the end
    of the run before), applied over the defaults, as a link's would be."""
    query = st.session_state.pop("moved_query", None)
    if query is not None:
        updates, problems = links.from_query(dict(parse_qsl(query)))
        st.session_state.update(updates)
        st.session_state.link_problems = problems


def keep_mark(server: str) -> None:
    """At the end of a run: draw the hidden mark with this run's settings — or, when the tab brought another
    server's mark, take its id and settings over and run the page again with them."""
    state = st.session_state
    ours = f"{server}|{BOOT}|{tab_id()}|{urlencode(links.to_query(state))}"
    st.html(f"<style>.st-key-{KEY} {{display: none}}</style>")
    if KEY in state:  # a later run of this session: the mark is ours, brought up to date
        state[KEY] = ours
        st.sidebar.text_input("Tab", key=KEY, label_visibility="collapsed")
        return
    shown = st.sidebar.text_input("Tab", value=ours, key=KEY, label_visibility="collapsed")
    mark = _MARK.fullmatch(shown) if shown and len(shown) <= MAX_MARK else None
    if shown == ours or not mark or (mark["server"], mark["boot"]) == (server, BOOT):
        return
    state.classroom_id = mark["id"]
    _this_run.set(mark["id"])
    state.moved_from = mark["server"]
    state.moved_query = mark["query"]
    st.rerun()


def moved_notice(server: str) -> None:
    """What a student whose tab just moved needs to know, until they dismiss it."""
    came_from = st.session_state.get("moved_from")
    if not came_from:
        return
    where = "restarted" if came_from == server else f"stopped; this tab is now on {server}"
    with st.container(key="moved_notice"):
        st.warning(
            f"**This page moved to another server.** The server it was on ({came_from}) {where}. "
            "Your settings and solved challenges came with it; a run that was training there, its results "
            "and the hints you had opened did not: press **Train** again.",
            icon=":material/sync_problem:",
        )
        if st.button("OK", key="moved_ok"):
            del st.session_state["moved_from"]
            st.rerun()
