"""Searches are a resource the class shares (issue 49): the same Plan question from two tabs is one search, whose
progress and answer both see; searches queue behind the server's limit, each tab told its place; a tab that
stops leaves its search, which stops when no tab waits for it; a large model's compile workers run below the
class's training."""

import collections
import os
import subprocess
import sys
import threading
import time

import jax.monitoring
import psutil
import pytest
from jax._src import dispatch

from sharding_lab import search
from sharding_lab.hardware import targets
from sharding_lab.search import pool
from sharding_lab.server.searches import SEARCHES, Searches
from tests.support import app_test

TPU = targets.availability(targets.parse("v5e-8"))
SMALL = {
    "model": "transformer",
    "layers": "2",
    "embed_dim": "64",
    "heads": "4",
    "head_dim": "16",
    "mlp_dim": "128",
    "vocab": "64",
    "seq": "32",
}


def plan_tab(batch_tokens: int):
    at = app_test(300)
    at.query_params.update(SMALL)
    at.run()
    at.switch_page("app_pages/plan.py").run()
    at.selectbox(key="plan_target").set_value("v5e-8")
    at.number_input(key="plan_batch_tokens").set_value(batch_tokens)
    at.number_input(key="plan_seq").set_value(32)
    at.multiselect(key="plan_presets").set_value(["dp"])
    at.multiselect(key="plan_remats").set_value(["none"])
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.skipif(not TPU[0], reason=TPU[1])
def test_two_tabs_asking_the_same_question_run_one_search():
    """XLA's compiles are counted as JAX reports them (its backend-compile event), by the thread that asked: every
    compile of the question comes from one search thread. Before, each tab ran a search of its own — both
    compiling the same candidates at once, the costing cache empty for both."""
    compiles = collections.Counter()

    def count(event, seconds, **kwargs):
        if event == dispatch.BACKEND_COMPILE_EVENT and threading.current_thread().name == "sharding-lab-plan":
            compiles[threading.get_ident()] += 1

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        # A batch no other test asks (the costing cache would answer without compiling).
        first, second = plan_tab(32 * 24), plan_tab(32 * 24)
        started = SEARCHES.started
        first.button(key="plan_run").click().run()
        second.button(key="plan_run").click().run()
        jobs = [first.session_state["plan_job"], second.session_state["plan_job"]]
        assert jobs[0].search is jobs[1].search and SEARCHES.started == started + 1
        assert not jobs[0].shared and jobs[1].shared
        assert any("Another tab asked the same question" in c.value for c in second.caption)
        for job in jobs:
            job.wait(600)
        for at in (first, second):
            at.run()
            assert not at.exception, at.exception
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    result = jobs[0].result
    assert result is not None and jobs[1].result is result and not result.stopped
    assert len(compiles) == 1, f"compiles came from {len(compiles)} search threads"
    assert sum(compiles.values()) >= sum(r.skipped is None for r in result.results) - 1  # the estimate timed one
    tables = [at.dataframe[0].value for at in (first, second)]
    assert tables[0].equals(tables[1]) and set(tables[0]["preset"]) == {"dp"}
    # A third tab asking it now is answered at once, from the same search.
    third = plan_tab(32 * 24)
    third.button(key="plan_run").click().run()
    third.run()  # the run its answered search asks for
    assert third.session_state["plan_job"].search is jobs[0].search and SEARCHES.started == started + 1
    assert any("Another tab asked the same question" in c.value for c in third.caption)


class Gate:
    """A search that waits until the test lets it end (the queue's order does not depend on what is searched)."""

    def __init__(self):
        self.release = collections.defaultdict(threading.Event)
        self.ran = []

    def __call__(self, base, dtype, presets, remats, progress, stop, workers=None, first=None):
        self.ran.append(base)
        while not (self.release[base].wait(0.02) or stop.is_set()):
            pass
        return search.Search(base, dtype, 0, [], stopped=stop.is_set())


def test_searches_queue_behind_the_limit_and_stop_when_no_tab_waits():
    gate = Gate()
    searches = Searches(limit=lambda: 1, run=gate)
    a, b, c = (searches.ask(searches.watcher(), question, "mixed") for question in ("q1", "q2", "q3"))
    assert [searches.place(s) for s in (a, b, c)] == [0, 1, 2] and searches.counts() == (1, 2)
    follower = searches.watcher()
    assert searches.ask(follower, "q2", "mixed") is b and len(b.watchers) == 2
    # The first of b's two tabs leaves: b keeps its place for the other.
    searches.leave(next(iter(set(b.watchers) - {follower})), b)
    assert searches.place(b) == 1 and not b.stop.is_set()
    # c's only tab leaves the queue: c ends unstarted, and nothing moves up but the order.
    searches.leave(next(iter(c.watchers)), c)
    assert c.finished.is_set() and c.started is None and searches.counts() == (1, 1)
    gate.release["q1"].set()
    assert a.wait(10) and b.started is not None and searches.place(b) == 0
    assert a.result is not None and not a.result.stopped
    # b's last tab stops it while it searches: it ends stopped, and the same question asked again starts anew.
    searches.leave(follower, b)
    assert b.wait(10) and b.result.stopped
    again = searches.ask(searches.watcher(), "q2", "mixed")
    assert again is not b
    gate.release["q2"].set()
    assert again.wait(10) and gate.ran == ["q1", "q2", "q2"]
    # An answered question is answered again from memory, without a search.
    assert searches.ask(searches.watcher(), "q1", "mixed") is a and gate.ran == ["q1", "q2", "q2"]


def test_a_search_whose_tabs_all_closed_stops():
    """A tab closed without Stop: its session says so, and the search stops at its next candidate."""

    def search_with_candidates(base, dtype, presets, remats, progress, stop, workers=None, first=None):
        while not stop.is_set():
            progress(1, 2, search.Result(search.Candidate((8,), ("data",), "dp", "none"), skipped="test"))
            time.sleep(0.02)
        return search.Search(base, dtype, 0, [], stopped=True)

    searches = Searches(limit=lambda: 1, run=search_with_candidates)
    tabs_open = {"a": True, "b": True}
    found = searches.ask("a", "q", "mixed", open_=lambda: tabs_open["a"])
    assert searches.ask("b", "q", "mixed", open_=lambda: tabs_open["b"]) is found
    tabs_open["a"] = False
    assert not found.wait(0.3)  # b still waits
    tabs_open["b"] = False
    assert found.wait(10) and found.result.stopped


def test_two_searches_run_at_once_when_the_limit_allows():
    gate = Gate()
    searches = Searches(limit=lambda: 2, run=gate)
    found = [searches.ask(searches.watcher(), q, "mixed") for q in ("q1", "q2", "q3")]
    assert [searches.place(s) for s in found] == [0, 0, 1]
    for q in ("q1", "q2", "q3"):
        gate.release[q].set()
    assert all(s.wait(10) for s in found)


def test_a_searchs_compile_workers_run_below_the_servers_priority():
    """A large model's search compiles in worker processes (one per core): each lowers its priority by
    pool.WORKER_NICE when it starts, so the class's training (at the server's own) gets the cores first."""
    worker = pool.Worker(pool.context())
    try:
        deadline = time.monotonic() + 60
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        while psutil.Process(worker.process.pid).nice() == mine and time.monotonic() < deadline:
            time.sleep(0.1)
        assert psutil.Process(worker.process.pid).nice() == min(19, mine + pool.WORKER_NICE)
    finally:
        worker.stop()
    # And a plain child of the server keeps the server's priority: the niceness is the worker's own doing.
    child = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True, text=True)
    assert int(child.stdout) == mine
