"""A fragment's poll must not cut off the end of the run before it (Streamlit 1.67's AppSession).

Why this exists: the Train page redraws its run in a fragment that polls (``st.fragment(run_every=…)``).
When a fragment's poll reaches the server just after a full script run has finished but before the
server's event loop has sent that run's last messages — seconds on a busy classroom server, where the
loop is behind — ``AppSession.request_rerun`` finds the finished ScriptRunner refusing the request and
starts a new ScriptRunner at once; every event the finished one had still to deliver (the end of the
page, the fragment's new poll timer, "script finished") then comes from a runner that is no longer
current and is dropped. The browser is left with half a page, a "Bad delta path" error or no timer at
all: the stale Train pages of the 40-session load test (a missing verdict, a missing "kept" note).

The fix waits instead: a fragment's rerun that arrives in that window is tried again once the finished
runner's events are through (its SHUTDOWN event clears ``_scriptrunner``), then handled as usual. Full
reruns (an edit, a click outside a fragment) are untouched: they stop the old runner on purpose.

A second race, found with the load test's message traces (:mod:`tools.message_trace`): when a
fragment's run starts, AppSession clears the session's outgoing queue of that fragment's deltas not yet sent
— meant for an earlier run of the same fragment, superseded — but a *full* run that has just finished drew
the fragment too, and its deltas carry the fragment's id: they are dropped, while the full run's
"finished successfully" is kept on purpose. The browser then removes every element the full run did not
draw as stale — the fragment's whole container — and the fragment's next deltas point into a container
that is no longer there: "Bad delta path index 3 (should be between [0, 2])" or "Cannot set a node at a
delta path", the tab blank from then on (2 of 20 tabs in one fresh-server class). So while the queue still
holds a full run's successful end, a fragment's start clears none of the deltas before it: they are sent,
and the fragment's new ones follow and replace them.
"""

import time

from streamlit.runtime.app_session import AppSession, AppSessionState

RETRY_S = 0.02  # how often to look again; the finished runner's events are usually through in one loop turn
GIVE_UP_S = 10.0  # then start the new runner anyway, as Streamlit would have (a runner that never shuts down)

_original_create = AppSession._create_scriptrunner
_original_clear = AppSession._clear_queue


def _create_scriptrunner(app_session: AppSession, initial_rerun_data, *, waited_since: float | None = None) -> None:
    """Start a runner for ``initial_rerun_data`` — unless it is a fragment's rerun and the runner before it
    is finished but not yet shut down (its last messages still queued): then try again shortly."""
    finished_runner = app_session._scriptrunner
    if initial_rerun_data.fragment_id and finished_runner is not None:
        since = time.monotonic() if waited_since is None else waited_since
        if time.monotonic() - since < GIVE_UP_S:
            app_session._event_loop.call_later(RETRY_S, _retry, app_session, initial_rerun_data, since)
            return
    _original_create(app_session, initial_rerun_data)


def _retry(app_session: AppSession, rerun_data, since: float) -> None:
    """The fragment's rerun again, on the event loop, after the events queued before it."""
    if app_session._state == AppSessionState.SHUTDOWN_REQUESTED or not app_session.has_fragment(rerun_data.fragment_id):
        return  # the tab closed, or the full run that just ended no longer draws this fragment
    runner = app_session._scriptrunner
    if runner is not None and runner.request_rerun(rerun_data):
        return  # a newer run is going on (an edit): it runs the fragment after itself
    _create_scriptrunner(app_session, rerun_data, waited_since=since)


def _clear_queue(app_session: AppSession, fragment_ids_this_run: list[str] | None = None) -> None:
    """AppSession's clear at a run's start — except that a fragment's start keeps the deltas of a full run
    whose successful end is still waiting to be sent (the second race above)."""
    if fragment_ids_this_run and full_run_ended_in(app_session._browser_queue):
        fragment_ids_this_run = []  # the queue's own rule then keeps every delta and every lifecycle message
    _original_clear(app_session, fragment_ids_this_run)


def full_run_ended_in(queue) -> bool:
    """Whether a ForwardMsgQueue holds the end of a full run that finished successfully (not yet sent)."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    return any(
        msg.WhichOneof("type") == "script_finished" and msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY
        for msg in queue._queue
    )


def install() -> None:
    """Patch this server process's AppSession (idempotent; the entry script calls it on every run)."""
    AppSession._create_scriptrunner = _create_scriptrunner
    AppSession._clear_queue = _clear_queue
