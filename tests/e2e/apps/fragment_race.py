"""A page whose first full run is caught by a fragment's poll in the window Streamlit 1.67 mishandles.

The window, made deterministic: at the start of the run this page blocks the server's event loop
until the script thread has finished — as a busy classroom server's loop falls behind — and then
hands the session a fragment rerun (what a poll timer sends), while the run's last messages are
still queued behind it. Without ``fragment_race.install()`` those messages are dropped and the
browser never sees the line after the fragment; with it they arrive. ``FRAGMENT_RACE_FIX=1``
installs the fix.
"""

import os
import threading

import streamlit as st
from streamlit import runtime
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState

if os.environ.get("FRAGMENT_RACE_FIX") == "1":
    from sharding_lab.app.runtime import fragment_race

    fragment_race.install()

ctx = get_script_run_ctx()
session = runtime.get_instance()._session_mgr.get_session_info(ctx.session_id).session
first_run = not st.session_state.get("raced")
st.session_state.raced = True
seen = {}

if first_run:
    script_thread = threading.current_thread()

    def poll_in_the_window() -> None:
        script_thread.join(timeout=20)  # the loop is blocked; the run's last events queue up behind us
        session.request_rerun(ClientState(fragment_id=seen["fragment_id"], page_script_hash=ctx.page_script_hash))

    session._event_loop.call_soon_threadsafe(poll_in_the_window)


@st.fragment
def fragment() -> None:
    seen["fragment_id"] = ThreadState.get().fragment_id
    st.write("fragment drawn")


fragment()
st.write("the end of the full run")
