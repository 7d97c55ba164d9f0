"""A fragment's start must not drop what a finished full run drew inside that fragment (Streamlit 1.67).

Found in a fresh-server class of 20 (``tools.message_trace``): a full run of the Train page, its deltas
still queued, then a poll of the page's fragment — AppSession's clear at the fragment's start removed the
full run's deltas for the fragment's container but kept the run's "finished successfully", so the browser
removed the container as stale and the next poll's deltas failed ("Bad delta path index 3"). Streamlit's
own queue and AppSession's own clear are used here, on the messages a full run sends."""

import types

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.runtime.forward_msg_queue import ForwardMsgQueue

from sharding_lab.app.runtime import fragment_race

FRAGMENT = "poll-fragment"


def delta(path: list[int], fragment: str = "") -> ForwardMsg:
    msg = ForwardMsg()
    msg.metadata.delta_path[:] = path
    msg.delta.new_element.markdown.body = f"at {path}"
    if fragment:
        msg.delta.fragment_id = fragment
    return msg


def finished(status) -> ForwardMsg:
    msg = ForwardMsg()
    msg.script_finished = status
    return msg


def queued_after_clear(clear, messages: list[ForwardMsg]) -> list[list[int]]:
    queue = ForwardMsgQueue()
    for msg in messages:
        queue.enqueue(msg)
    clear(types.SimpleNamespace(_browser_queue=queue), [FRAGMENT])  # what AppSession does at a fragment's start
    return [list(m.metadata.delta_path) for m in queue._queue if m.WhichOneof("type") == "delta"]


# A full run of a page: a heading, the fragment's container and what the fragment drew in it, a line after.
FULL_RUN = [
    delta([0, 0]),
    delta([0, 3], FRAGMENT),
    delta([0, 3, 0], FRAGMENT),
    delta([0, 4]),
    finished(ForwardMsg.FINISHED_SUCCESSFULLY),
]


def test_streamlit_alone_drops_a_finished_full_runs_fragment_deltas_at_a_fragment_start():
    """The bug, in the pinned Streamlit (if this fails, Streamlit fixed it: drop the patch of _clear_queue)."""
    assert queued_after_clear(fragment_race._original_clear, FULL_RUN) == [[0, 0], [0, 4]]


def test_with_the_patch_the_full_runs_fragment_deltas_are_sent():
    assert queued_after_clear(fragment_race._clear_queue, FULL_RUN) == [[0, 0], [0, 3], [0, 3, 0], [0, 4]]


def test_an_earlier_polls_deltas_are_still_dropped_when_no_full_run_ended():
    """Superseded deltas of the fragment's own earlier run (interrupted by this one) go as before."""
    earlier_poll = [delta([0, 3, 0], FRAGMENT), finished(ForwardMsg.FINISHED_EARLY_FOR_RERUN)]
    assert queued_after_clear(fragment_race._clear_queue, earlier_poll) == []
