"""Who compiles first on a class's server (sharding_lab/server/priority.py), as a table; and the queue that
serves compiled runs first, on slots of its own (no other test's runs in them)."""

import math
import threading

import pytest

from sharding_lab.server import priority, slots
from sharding_lab.server.priority import CLASS_WARM_UP, LAYOUT_READ, LEARNERS_RUN, Load
from tests.support import poll

IDLE = priority.IDLE_BEFORE_WARMING_S

# (what the server is doing, may a learner's run / the layout being read / the class warm-up compile?)
RULE = [
    (Load(), (True, True, True)),
    (Load(training=1), (True, True, False)),  # a run trains: the warm-up waits, the layout being read does not
    (Load(training=4, queued=1), (True, False, False)),  # a run waits for a slot: its own compile comes first
    (Load(queued=1), (True, False, False)),
    (Load(layout_pending=True), (True, True, False)),  # a learner reads a layout not yet compiled
    (Load(quiet_for_s=0.0), (True, True, False)),  # a page is being drawn
    (Load(quiet_for_s=IDLE - 0.1), (True, True, False)),  # a page was drawn moments ago
    (Load(quiet_for_s=IDLE), (True, True, True)),  # idle long enough
    (Load(training=2, queued=3, layout_pending=True, quiet_for_s=0.0), (True, False, False)),
    (Load(quiet_for_s=math.inf), (True, True, True)),  # no page drawn yet (a fresh server)
]


@pytest.mark.parametrize("load, expected", RULE)
def test_who_may_compile(load, expected):
    assert tuple(priority.may_compile(work, load) for work in priority.ORDER) == expected


def test_the_order_is_the_learners_first():
    assert priority.ORDER == (LEARNERS_RUN, LAYOUT_READ, CLASS_WARM_UP)
    # nothing that blocks a later kind of work lets an earlier one through the other way round
    for load, allowed in RULE:
        assert list(allowed) == sorted(allowed, reverse=True), load
    with pytest.raises(ValueError, match="unknown work"):
        priority.may_compile("a guess", Load())


@pytest.mark.parametrize(
    "queue, compiled, served",
    [
        ("abcd", "", "abcd"),  # first come, first served
        ("abcd", "c", "cabd"),  # a compiled run goes before those that must compile
        ("abcd", "db", "bdac"),  # compiled runs among themselves: first come, first served
        ("abcd", "abcd", "abcd"),
        ("", "", ""),
    ],
)
def test_the_queue_serves_compiled_runs_first(queue, compiled, served):
    tickets = {name: object() for name in "abcd"}
    order = priority.serve_order([tickets[n] for n in queue], {id(tickets[n]) for n in compiled})
    assert order == [tickets[n] for n in served]


def test_a_fresh_server_s_slots_serve_a_compiled_run_before_an_earlier_one_that_must_compile():
    """On slots of their own: one slot held, a run that must compile queues, then a compiled one; when the slot
    frees the compiled run gets it although it came second."""
    server = slots.Slots(max_jobs=1)
    server.take()
    gone, order = threading.Event(), []

    def wait(name, compiled):
        if server.wait(name, gone.is_set, lambda ahead: None, compiled=compiled):
            order.append(name)

    try:
        first = threading.Thread(target=wait, args=("must compile", False), daemon=True)
        first.start()
        assert poll(server.load, (1, 1), 10) == (1, 1)
        second = threading.Thread(target=wait, args=("compiled", True), daemon=True)
        second.start()
        assert poll(server.load, (1, 2), 10) == (1, 2)
        with pytest.raises(slots.Busy):
            server.take()  # no jumping the queue
        server.release()
        second.join(10)
        assert order == ["compiled"] and server.load() == (1, 1)
        server.release()
        first.join(10)
        assert order == ["compiled", "must compile"] and server.load() == (1, 0)
    finally:
        gone.set()
    assert slots.SERVER is not server  # the server's own slots were never touched
