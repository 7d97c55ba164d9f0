"""Issue 50.3: a page's compile of a big program waits its turn in the server's one compile queue (at most
SHARDING_LAB_MAX_PAGE_COMPILES at once), its place told; a large model's Plan search starts in its turn of the
same queue; a small program, and a program already compiled, never wait. "Big" is lowered to 0 MiB here, so small
layouts stand in for Llama 3 70B: the queue does not look at what it compiles, only at its inputs' size."""

import collections
import contextlib
import dataclasses
import math
import threading
import time

import jax.monitoring
import pytest
from jax._src import dispatch

import sharding_lab as sl
from sharding_lab.app.panels import search_view
from sharding_lab.models import family
from sharding_lab.program import communication
from sharding_lab.server import page_compiles
from sharding_lab.server.searches import Searches
from tests.app.test_shared_search import Gate
from tests.support import app_test


@pytest.fixture
def queue(monkeypatch):
    """A fresh server queue of one turn; every program big."""
    monkeypatch.setenv("SHARDING_LAB_BIG_COMPILE_MB", "0")
    monkeypatch.setenv("SHARDING_LAB_MAX_PAGE_COMPILES", "1")
    fresh = page_compiles.PageCompiles()
    monkeypatch.setattr(page_compiles, "SERVER", fresh)
    return fresh


@contextlib.contextmanager
def backend_compiles(prefix: str):
    """(thread name, start, end) of every XLA compile made by a thread named ``prefix…``, as JAX reports them."""
    seen = []

    def listen(event, seconds, **kwargs):
        name = threading.current_thread().name
        if event == dispatch.BACKEND_COMPILE_EVENT and name.startswith(prefix):
            end = time.monotonic()
            seen.append((name, end - seconds, end))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def most_at_once(intervals) -> int:
    edges = sorted([(start, 1) for _, start, _ in intervals] + [(end, -1) for _, _, end in intervals])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def small_plan(width: int) -> sl.Plan:
    """An MLP layout no other test compiles (its width), so XLA compiles it here."""
    return sl.plan(sl.LabConfig(mesh=sl.MeshSpec((2, 4)), model=sl.MLPSpec(1, width, 1, 1), preset="fsdp"))


def test_three_pages_compiling_at_once_compile_one_at_a_time(queue):
    """Three page threads ask for three layouts' steps together: XLA compiles them one after the other (its own
    compile events, timed), the later ones told their place while they wait."""
    places = collections.defaultdict(list)
    errors = []

    def page(i: int) -> None:
        try:
            with page_compiles.queued(places[i].append):
                communication.analyze(small_plan(40 + 8 * i))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    with backend_compiles("page-") as seen:
        threads = [threading.Thread(target=page, args=(i,), name=f"page-{i}") for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert not errors, errors
    assert {name for name, _, _ in seen} == {"page-0", "page-1", "page-2"}
    assert most_at_once(seen) == 1, f"compiles overlapped: {seen}"
    assert queue.most_at_once == 1 and queue.served >= 3 and queue.load() == (0, 0)
    told = sorted(p for ps in places.values() for p in ps)
    assert told and max(told) >= 1, "no page waiting behind another was told its place"


def test_a_small_program_does_not_wait_and_a_big_one_does(queue, monkeypatch):
    plan = small_plan(72)
    with queue.turn():  # another page's big compile holds the only turn
        monkeypatch.setenv("SHARDING_LAB_BIG_COMPILE_MB", "1")  # this layout's inputs hold a few kB: small
        with page_compiles.queued(lambda ahead: pytest.fail("a small program waited")):
            communication.analyze(plan)
        monkeypatch.setenv("SHARDING_LAB_BIG_COMPILE_MB", "0")
        told = []
        done = threading.Event()

        def page():
            with page_compiles.queued(told.append):
                communication.analyze(small_plan(80))
            done.set()

        threading.Thread(target=page, name="page-big").start()
        assert not done.wait(1.5) and told and told[-1] == 1  # one compile ahead of it: the holder's
        # The same thread's layout already compiled is a cache's answer: no compile, no wait.
        with page_compiles.queued(lambda ahead: pytest.fail("a cached program waited")):
            communication.analyze(plan)
    assert done.wait(300)
    assert page_compiles.waiting_sentence(1).startswith("Waiting for the server's compile queue — 1 compile ahead")


def test_the_communication_page_waits_its_turn(queue):
    """The page's compile, behind another's: it waits in the queue (1 compiling, 1 waiting) and draws its table
    once its turn came."""
    communication._analyze.cache_clear()  # the page's compile must reach the compiler
    at = app_test(300)
    at.run()
    at.switch_page("app_pages/communication.py")
    with contextlib.ExitStack() as held:
        held.enter_context(queue.turn())
        page = threading.Thread(target=at.run, name="apptest")
        page.start()
        deadline = time.monotonic() + 120
        while queue.load() != (1, 1) and page.is_alive():
            assert time.monotonic() < deadline, f"the page never queued: {queue.load()}"
            time.sleep(0.1)
        assert page.is_alive()
    page.join(300)
    assert not at.exception, at.exception
    assert queue.served >= 2 and any(m.label == "Collectives per step" for m in at.metric)


def test_a_large_models_search_starts_in_its_turn_of_the_same_queue(queue):
    """A search compiled by workers (a large model) waits for the page compile before it, its tab told so; once
    started it holds no turn (it searches for minutes to hours: the pages' big compiles go on beside it); a tab that
    leaves while it waits ends it unstarted."""
    base = sl.LabConfig(mesh=sl.MeshSpec((8,), ("data",)), model=family("transformer").named_spec("gpt2-small"))
    base = dataclasses.replace(base, target="v5e-8", preset="dp")
    gate = Gate()
    searches = Searches(limit=lambda: 2, run=gate, workers=2)
    with queue.turn():
        job = search_view.SearchJob(base, "mixed", searches=searches)
        job.search = searches.ask(job.watcher, base, "mixed")
        deadline = time.monotonic() + 10
        while job.search.compile_ahead is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert gate.ran == [] and job.search.compile_ahead == 1
        assert job.progress_text().startswith("Waiting for the server's compile queue — 1 compile ahead")
        other = searches.ask(searches.watcher(), dataclasses.replace(base, batch_size=16), "mixed")
        searches.leave(next(iter(other.watchers)), other)
        assert other.wait(10) and other.result.stopped and gate.ran == []
    deadline = time.monotonic() + 10
    while gate.ran != [base]:
        assert time.monotonic() < deadline, "the search did not start when its turn came"
        time.sleep(0.02)
    assert job.search.running and job.search.compile_ahead is None
    assert queue.load() == (0, 0) and queue.served == 2  # searching, it holds no turn: a page compiles at once
    with page_compiles.queued(lambda ahead: pytest.fail("a page waited behind a running search")):
        communication.analyze(small_plan(88))
    gate.release[base].set()
    assert job.search.wait(10)


def test_progress_estimates_the_time_left_from_the_start_then_from_the_compiles_seen(monkeypatch):
    """Issue 56: the estimate from the start (the model's size and the cores: search.eta's prior), then from the
    compiles seen — the page's figures are search.eta's, checked by hand in tests/core/test_search_eta.py."""
    from sharding_lab.search import eta

    monkeypatch.setattr(eta.os, "cpu_count", lambda: 2)
    base = sl.LabConfig(mesh=sl.MeshSpec((8,), ("data",)), model=family("transformer").named_spec("gpt2-small"))
    base = dataclasses.replace(base, target="v5e-8", preset="dp")
    # without remat: no step is answered at its memory check (search.eta.floors; its rule tested by hand there)
    found = Searches(limit=lambda: 1, run=Gate()).ask("w", base, "mixed", None, ("none",))
    found.started, found.total, found.to_compile, found.workers = time.monotonic(), 12, 10, 2
    job = search_view.SearchJob(None, "mixed")
    job.search = found
    # gpt2-small: 20.6 s alone on 13 cores, 60.7 s of CPU: 30.35 s on 2, × 1.3^0.4 beside the other compile (1.3 of
    # 2 workers in flight: eta.IN_FLIGHT_SHARE)
    each = 60.7 / 2 * 1.3**0.4
    text = job.progress_text()
    assert text.startswith("0 of 12 candidates")
    assert f"about {eta.format_seconds_left(each * 10 / 1.3)} left (from the model's size" in text  # 10 × each ÷ 1.3
    found.done, found.compiled, found.compile_s = 3, 2, 100.0  # two candidates of 50 s, two at once
    blended = (each * 1.3 + 100.0) / 3.3  # the prior counted as 1.3 compiles beside the two seen (eta.Progress)
    assert (
        f"about {eta.format_seconds_left(8 * blended / 1.3)} left (from 2 compiled, 50 s each, and the model's size"
        in job.progress_text()
    )
    found.to_compile = 0  # not screened before Run: each ranked layout's leanest variant, 0.55 of the others
    found.first = [None] * 6  # 6 layouts ranked
    _, variants = eta.question(base, None, ("none",))
    left = (math.ceil(6 * (1 + (variants - 1) * 0.55)) - 2) * blended / 1.3
    assert f"about {eta.format_seconds_left(left)} left" in job.progress_text()
    found.activity.compiling([("4x2 (data, model) dp, remat none (as `cost` compiles it)", time.monotonic() - 42)])
    assert job.progress_text().endswith(
        "Now compiling 4x2 (data, model) dp, remat none (as `cost` compiles it) for 42 s."
    )
    job.cancel()


def test_the_plan_page_says_when_the_time_left_will_be_known(monkeypatch):
    """Issue 50: Plan showed "0 of 325 candidates" for ~100 s and nothing else; issue 56: and no estimate for the
    first 50 s of a 3B model's screening. The page's progress estimates the time left from the start (a search that
    waits here)."""
    gate = Gate()
    monkeypatch.setattr(search_view, "SEARCHES", Searches(limit=lambda: 1, run=gate))
    at = app_test(300)
    at.run()
    at.switch_page("app_pages/plan.py").run()
    at.button(key="plan_run").click().run()
    assert not at.exception, at.exception
    job = at.session_state["plan_job"]
    try:
        bars = [p.proto.text for p in at.get("progress")]
        assert any(b.startswith("0 of ") and "left (from the model's size" in b for b in bars)
    finally:
        job.cancel()
    assert job.search.wait(10)
