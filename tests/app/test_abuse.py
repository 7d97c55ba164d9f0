"""Bad input and abuse: what a class of students (or one curious one) can throw at the app.

Every case must end in a clear sentence on the page — never a traceback, never raw HTML — and
leave a session that still works: the next ordinary rerun renders without an exception.
The app runs through Streamlit's AppTest (the real script, no browser); the backend's job
machinery is also driven directly. That HTML typed into an axis name is shown as text in a real browser is
checked in tests/e2e/test_abuse_browser.py (on the browser tests' shared server).
"""

import ast
import html
import re
import threading
import time
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

import sharding_lab as sl
from sharding_lab.app.state import config_state
from sharding_lab.server import jobs, slots
from tests.support import ROOT, all_slots_held, app_test

TIMEOUT = 120
HOSTILE_NAMES = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<b>bold</b>",
    "données",
    "数据",
    "🚀",
    "data model",
    "1data",
    "[x](javascript:alert(1))",
    "**x**",
    "a'b\"c",
    "x" * 33,
]


def page(path: str) -> AppTest:
    at = app_test(TIMEOUT)
    at.switch_page(path)
    return at.run()


# CommonMark, with raw HTML let through: the worst a Markdown renderer could do with a message.
MARKDOWN = MarkdownIt("commonmark", {"html": True})


def render(markdown: str) -> tuple[str, list[str]]:
    """What a reader sees of ``markdown``: its text, and the HTML tags it turns into."""
    out = MARKDOWN.render(markdown)
    tags = re.findall(r"<\s*([a-zA-Z][a-zA-Z0-9]*)", out)
    return html.unescape(re.sub(r"<[^>]*>", "", out)).strip(), tags


def texts(elements) -> list[str]:
    """Message texts as shown (Markdown rendered; the app escapes user text with a backslash)."""
    return [render(e.value)[0] for e in elements]


def assert_healthy(at: AppTest) -> None:
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)


def job_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sharding-lab-job" and t.is_alive()]


def wait_for(at: AppTest, done, timeout: float = TIMEOUT, poll: float = 0.3) -> None:
    """Rerun ``at`` (as the page's 0.2 s poll would) until ``done(at)``, bounded."""
    deadline = time.monotonic() + timeout
    while not done(at) and time.monotonic() < deadline:
        time.sleep(poll)
        at.run()
    assert done(at), f"timed out; errors {texts(at.error)}, exceptions {texts(at.exception)}"


def verified(at: AppTest) -> bool:
    return any("layout verified on" in s.value for s in at.success)


def finished_job(at: AppTest) -> bool:
    job = at.session_state["job_slot"].job
    return job is not None and not job.snapshot().running and not job.thread.is_alive()


@pytest.fixture
def layout_page() -> AppTest:
    return page("app_pages/layout.py")


@pytest.fixture
def train_page() -> AppTest:
    return page("app_pages/train.py")


@pytest.fixture
def all_slots_taken():
    """Every training slot on the server held, so any new job is refused with Busy before it
    allocates anything: a safe way to see whether the page would *try* to start one."""
    with all_slots_held() as held:
        yield len(held)


# --- numbers out of range ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -3, 65, 10_000])
def test_mesh_size_out_of_range_is_clamped_by_the_widget(layout_page, value):
    at = layout_page
    at.number_input(key="size_0").set_value(value).run()
    assert not at.exception
    assert 1 <= at.number_input(key="size_0").value <= 64
    at.number_input(key="size_0").set_value(2)
    at.number_input(key="size_1").set_value(4).run()
    assert_healthy(at)


def test_mesh_bigger_than_the_machine_says_what_fits(layout_page):
    at = layout_page
    at.number_input(key="size_0").set_value(64)
    at.number_input(key="size_1").set_value(64).run()
    assert not at.exception
    assert any("needs 4096 devices" in e and "8 are available" in e for e in texts(at.error))
    at.number_input(key="size_0").set_value(2)
    at.number_input(key="size_1").set_value(4).run()
    assert_healthy(at)


def test_huge_model_lays_out_without_allocating(layout_page):
    """Width 16384 with 8 extra layers (~2.2 billion parameters): the Layout page only plans."""
    at = layout_page
    at.number_input(key="dmid").set_value(16_384)
    at.number_input(key="hidden").set_value(8).run()
    assert not at.exception
    assert any(str(16_384) in str(df.value.values.tolist()) for df in at.dataframe)
    at.number_input(key="dmid").set_value(99_999).run()  # above the widget's max: clamped
    assert not at.exception and at.number_input(key="dmid").value <= sl.models.mlp.MAX_WIDTH
    at.number_input(key="dmid").set_value(32)
    at.number_input(key="hidden").set_value(0).run()
    assert not at.exception


def test_backend_knows_a_huge_model_does_not_fit():
    """~2.2 billion parameters: the backend's estimate refuses it on any ordinary server."""
    from sharding_lab.training.config import check_memory, estimated_bytes

    huge = sl.plan(sl.LabConfig(model=sl.MLPSpec(1, 16_384, 1, 8)))
    assert estimated_bytes(huge) > 40 * 2**30
    with pytest.raises(sl.ConfigError, match=r"needs about [\d.]+ [GT]B across"):
        check_memory(huge)


def test_train_page_refuses_a_run_over_the_memory_limit(train_page, monkeypatch):
    # A 1 MiB limit (configuration the backend reads on every check) and a ~5 MB model: if the page
    # wrongly starts it, nothing is at risk.
    monkeypatch.setenv("SHARDING_LAB_MEMORY_LIMIT_MB", "1")
    at = train_page
    at.number_input(key="dmid").set_value(1024)
    at.number_input(key="hidden").set_value(1)
    at.number_input(key="steps").set_value(100).run()
    assert not at.exception
    assert any("Too big to train here" in e and "only 1.05 MB may be used" in e for e in texts(at.error)), texts(
        at.error
    )
    assert at.button(key="train").disabled  # said before pressing, and nothing to press
    # beside the estimate, XLA's own figures for the same step, as the backend reports them
    from sharding_lab.program.communication import analyze
    from sharding_lab.units import format_bytes

    plan = sl.plan(config_state.config_from_state(at.session_state))
    memory = analyze(plan).memory
    assert any(
        f"{format_bytes(memory['argument'])} of arguments" in c
        and f"{format_bytes(memory['temp'])} of temporaries" in c
        for c in texts(at.caption)
    ), texts(at.caption)
    job = at.session_state["job_slot"].job
    try:
        assert not at.exception
        assert job is None, "the page started a run the memory check refuses"
    finally:
        if job is not None:
            job.stop()
            job.wait(60)


def test_steps_out_of_range_are_clamped(train_page):
    at = train_page
    for value in (0, -5, 10**9):
        at.number_input(key="steps").set_value(value).run()
        assert not at.exception
        assert 1 <= at.number_input(key="steps").value <= 20_000


def test_learning_rate_zero_is_explained(train_page):
    at = train_page
    at.number_input(key="lr").set_value(0.0).run()
    assert not at.exception
    assert any("learning rate must be a number > 0" in e for e in texts(at.error))
    at.number_input(key="lr").set_value(0.01).run()
    assert_healthy(at)


def test_batch_the_data_axis_does_not_divide(layout_page):
    at = layout_page
    at.number_input(key="batch").set_value(33).run()
    assert not at.exception
    assert any("32 or 34" in e for e in texts(at.error))
    at.number_input(key="batch").set_value(32).run()
    assert not at.exception


# --- axis names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "   "])
def test_empty_axis_name(layout_page, name):
    at = layout_page
    at.text_input(key="name_0").input(name).run()
    assert not at.exception
    assert any("name is empty" in e for e in texts(at.error))
    at.text_input(key="name_0").input("data").run()
    assert not at.exception and not any("empty" in e for e in texts(at.error))


@pytest.mark.parametrize("name", ["model", " model ", "model\t"])
def test_duplicate_axis_name(layout_page, name):
    at = layout_page
    at.text_input(key="name_0").input(name).run()
    assert not at.exception
    assert any("'model' is used twice" in e for e in texts(at.error))
    at.text_input(key="name_0").input("data").run()
    assert not at.exception


def unsafe_markdown(at: AppTest) -> list[str]:
    """Every markdown body the app asked Streamlit to render as raw HTML."""
    return [m.proto.body for m in at.get("markdown") if m.proto.allow_html]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_axis_name_gets_a_plain_error(layout_page, name):
    at = layout_page
    at.text_input(key="name_0").input(name).run()
    assert not at.exception
    value = at.text_input(key="name_0").value
    assert len(value) <= 32  # max_chars holds server-side too
    if value != name:  # over-long text was refused by the widget: the old value stays
        assert name == "x" * 33 and value == "data"
        return
    assert at.error, f"no error for {name!r}"
    for element in at.error:
        shown, tags = render(element.value)
        assert "is not allowed" in shown and "letters, digits and '_'" in shown
        assert repr(name) in shown  # the name exactly as typed, quoted: nothing formatted away
        assert set(tags) <= {"p", "strong"}, tags  # no link, image, script, emphasis from the name
    # The only elements that may carry raw HTML are the app's own labels; none holds user text.
    assert not any(name in body or "<script" in body for body in unsafe_markdown(at))
    at.text_input(key="name_0").input("data").run()
    assert_healthy(at)


def test_axis_name_is_validated_by_the_backend_too():
    for name in HOSTILE_NAMES:
        with pytest.raises(sl.ConfigError):
            sl.MeshSpec((2, 4), (name, "model")).validate(8)


# --- the Train button -------------------------------------------------------------------------


def test_rapid_train_clicks_start_one_job(train_page):
    at = train_page
    before = set(job_threads())
    # A run still training when Stop is pressed: the default layout's 20,000 steps take ~5 s once compiled (the
    # five clicks below take 1-3 s); 4,096 rows a step take over 20 s.
    at.number_input(key="batch").set_value(4096).run()
    at.number_input(key="steps").set_value(20_000).run()
    at.button(key="train").click().run()
    first = at.session_state["job_slot"].job
    for _ in range(5):
        # Clicks that left the browser before the rerun that disabled the button arrived there:
        # AppTest refuses to click a disabled button, so the click is made on it as it was.
        button = at.button(key="train")
        button.proto.disabled = False
        button.click().run()
        assert not at.exception
        assert at.session_state["job_slot"].job is first
    assert len(set(job_threads()) - before) == 1
    assert at.button(key="train").disabled
    at.button(key="stop").click().run()
    assert first.wait(60).state == "stopped"
    wait_for(at, finished_job)
    assert not at.exception


def test_stop_right_after_train(train_page):
    at = train_page
    at.number_input(key="steps").set_value(20_000).run()
    at.button(key="train").click().run()
    at.button(key="stop").click().run()  # the very next rerun: the job is still starting/compiling
    job = at.session_state["job_slot"].job
    assert job.wait(60).state == "stopped"
    assert job.snapshot().step < 20_000
    wait_for(at, finished_job)
    at.run()
    assert not at.exception and not at.error
    assert any("Stopped" in s for s in texts(at.success))
    # the session still works: a short run to the end
    at.number_input(key="steps").set_value(200).run()
    at.button(key="train").click().run()
    wait_for(at, verified)
    assert_healthy(at)


def test_exploding_learning_rate_is_explained_then_the_session_trains(train_page):
    at = train_page
    at.number_input(key="lr").set_value(1000.0)
    at.number_input(key="steps").set_value(500).run()
    at.button(key="train").click().run()
    wait_for(at, lambda a: bool(a.error) or verified(a))
    assert not at.exception
    message = " ".join(texts(at.error))
    assert "diverged" in message and "learning rate 1000" in message and "try" in message
    assert "Traceback" not in message
    at.number_input(key="lr").set_value(0.01).run()
    at.button(key="train").click().run()
    wait_for(at, verified)
    assert_healthy(at)


def test_full_queue_says_busy_and_the_session_recovers(train_page, all_slots_taken, monkeypatch):
    monkeypatch.setattr(jobs, "MAX_QUEUED", 0)
    at = train_page
    at.button(key="train").click().run()
    assert not at.exception
    assert any("The server is busy" in w and "try again" in w for w in texts(at.warning))
    assert at.session_state["job_slot"].job is None
    at.run()
    assert not at.exception and not at.warning


def wait_until(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert predicate()


def test_a_full_server_queues_runs_first_come_first_served(all_slots_taken):
    first, second = jobs.TrainingJob(long_config(300)), jobs.TrainingJob(long_config(300))
    try:
        wait_until(lambda: "ahead of you" in second.snapshot().message)
        assert first.snapshot().state == second.snapshot().state == "queued"
        assert "next in line" in first.snapshot().message
        assert "1 run ahead of you" in second.snapshot().message
        assert slots.load() == (all_slots_taken, 2)
        slots.release_slot()  # one slot frees up: the first in line trains, then hands it to the next
        assert first.wait(60).state == "finished"
        assert second.wait(60).state == "finished"
    finally:
        second.stop()
        first.stop()
        slots.take_slot()  # the slot they shared, so the fixture gives back what it took
    assert slots.load()[1] == 0


def test_a_run_whose_programs_are_compiled_goes_before_queued_runs_that_must_compile(all_slots_taken):
    """A compiled layout's first loss comes within a second of its start; one that compiles first takes
    seconds: in a class's queue the compiled runs go first (first come, first served among each)."""
    from sharding_lab.training import trainer

    compiled = sl.LabConfig(mesh=sl.MeshSpec((4, 2), ("data", "model")), preset="dp", steps=100, lr=0.021)
    must_compile = sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("data", "model")), preset="fsdp", steps=100, lr=0.021)
    assert not trainer.is_compiled(compiled)
    sl.train(compiled)  # an earlier run of the same layout
    assert trainer.is_compiled(compiled) and not trainer.is_compiled(must_compile)
    first = jobs.TrainingJob(must_compile)
    wait_until(lambda: "next in line" in first.snapshot().message)
    second = jobs.TrainingJob(compiled)
    try:
        wait_until(lambda: "1 run ahead of you" in first.snapshot().message)
        assert "runs already compiled go first" in first.snapshot().message  # why its place grew
        assert "next in line" in second.snapshot().message and "compiled go first" not in second.snapshot().message
        slots.release_slot()  # one slot frees up: the compiled run takes it, then hands it on
        assert second.wait(60).state == "finished" and first.snapshot().step == 0
        assert first.wait(120).state == "finished"
        assert trainer.is_compiled(must_compile)
    finally:
        second.stop()
        first.stop()
        slots.take_slot()  # the slot they shared, so the fixture gives back what it took
    assert slots.load()[1] == 0
    several = jobs.DistributedJob(compiled, 2)  # the same layout as two processes: they compile their own
    try:
        assert not several.compiled
    finally:
        several.stop()
        several.thread.join(30)


def test_a_queued_run_whose_tab_closed_leaves_the_queue(all_slots_taken, monkeypatch):
    monkeypatch.setattr(jobs, "UNWATCHED_LIMIT_S", 0.5)
    job = jobs.TrainingJob(long_config(300))
    job.thread.join(30)  # nobody polls
    assert job._snapshot.state == "stopped" and "nobody was watching" in job._snapshot.message
    assert slots.load()[1] == 0


def test_poll_interval_slows_down_as_the_server_fills(all_slots_taken):
    assert slots.poll_interval() == pytest.approx(min(3.0, 0.2 * max(1, all_slots_taken)))
    assert slots.poll_interval(queued=True) >= 1.5


def test_train_page_shows_its_place_in_the_queue_then_stops(train_page, all_slots_taken):
    at = train_page
    at.button(key="train").click().run()
    assert_healthy(at)
    job = at.session_state["job_slot"].job
    assert job is not None and not at.warning
    assert any(p.proto.text.startswith("queued") and "next in line" in p.proto.text for p in at.get("progress"))
    at.button(key="stop").click().run()
    assert job.wait(10).state == "stopped" and job.snapshot().step == 0
    assert "before it started" in job.snapshot().message
    at.run()
    assert_healthy(at)
    assert not at.button(key="train").disabled


# --- jobs nobody watches, jobs that run too long -------------------------------------------------


def long_config(steps: int = 200_000) -> sl.LabConfig:
    return sl.LabConfig(mesh=sl.MeshSpec((8,), ("data",)), preset="dp", steps=steps)


def test_abandoned_job_stops_by_itself(monkeypatch):
    monkeypatch.setattr(jobs, "UNWATCHED_LIMIT_S", 1.0)
    job = jobs.TrainingJob(long_config())
    job.thread.join(60)  # nobody calls snapshot(): the tab is closed
    assert not job.thread.is_alive()
    snap = job.snapshot()
    assert snap.state == "stopped" and "nobody was watching" in snap.message
    assert 0 < snap.step < 200_000
    slots.take_slot()  # its slot came back
    slots.release_slot()


def test_watched_job_is_not_stopped_for_being_unwatched(monkeypatch):
    monkeypatch.setattr(jobs, "UNWATCHED_LIMIT_S", 1.0)
    job = jobs.TrainingJob(long_config(steps=3000))
    deadline = time.monotonic() + 90
    while job.thread.is_alive() and time.monotonic() < deadline:
        job.snapshot()  # the page's poll
        time.sleep(0.1)
    assert job.snapshot().state == "finished"


def test_a_run_whose_tab_is_open_on_another_page_trains_on_and_stops_once_the_tab_closes(monkeypatch):
    monkeypatch.setattr(jobs, "UNWATCHED_LIMIT_S", 1.0)
    tab_open = threading.Event()
    tab_open.set()
    job = jobs.TrainingJob(long_config(), connected=tab_open.is_set)
    time.sleep(3.0)  # nobody polls (the learner reads the Lesson), three times the limit
    assert job.thread.is_alive() and job._snapshot.state in ("compiling", "training")
    tab_open.clear()  # the tab closes: its session disconnects
    job.thread.join(60)
    snap = job.snapshot()
    assert snap.state == "stopped" and "nobody was watching" in snap.message and snap.step < 200_000


def test_run_time_limit_stops_a_watched_job(monkeypatch):
    monkeypatch.setattr(jobs, "JOB_TIME_LIMIT_S", 1.0)
    job = jobs.TrainingJob(long_config())
    deadline = time.monotonic() + 60
    while job.thread.is_alive() and time.monotonic() < deadline:
        job.snapshot()
        time.sleep(0.1)
    snap = job.snapshot()
    assert snap.state == "stopped" and "limit per run" in snap.message


def test_abandoned_session_on_the_page(train_page, monkeypatch):
    """A student starts a long run and closes the laptop: the run ends, the page says why later."""
    monkeypatch.setattr(jobs, "UNWATCHED_LIMIT_S", 1.0)
    at = train_page
    at.number_input(key="steps").set_value(20_000).run()
    at.button(key="train").click().run()
    job = at.session_state["job_slot"].job
    assert job.connected is not None and job.connected()  # the page gave the run its session's connection
    job.connected = lambda: False  # the laptop closes: the session disconnects
    job.thread.join(60)  # no reruns meanwhile: nobody polls
    assert job.snapshot().state == "stopped"
    at.run()
    assert not at.exception
    assert any("nobody was watching" in i for i in texts(at.info))
    assert not at.button(key="train").disabled


# --- nothing a user types is ever run as code --------------------------------------------------

DANGEROUS_CALLS = {"eval", "exec", "compile", "__import__", "execfile", "input"}
DANGEROUS_ATTRS = {
    ("os", "system"),
    ("os", "popen"),
    ("pickle", "loads"),
    ("pickle", "load"),
    ("marshal", "loads"),
    ("yaml", "load"),
    ("subprocess", "run"),
    ("subprocess", "Popen"),
    ("subprocess", "call"),
    ("subprocess", "check_output"),
    ("importlib", "import_module"),
}


def app_sources() -> list[Path]:
    files = [
        ROOT / "app.py",
        *sorted((ROOT / "app_pages").glob("*.py")),
        *sorted((ROOT / "sharding_lab").rglob("*.py")),
    ]
    assert len(files) > 10
    return files


# The one process launcher: the multi-process run starts `python -m sharding_lab.distributed.worker` with an
# argument list rebuilt from a validated LabConfig (names match [A-Za-z_][A-Za-z0-9_]*; no shell).
# The launcher starts the worker processes; plugins.py imports a model family's module — named on the
# command line, in the server owner's SHARDING_LAB_FAMILIES or by an installed package's entry point, never by
# a link or by anything typed in the app (tests/core/test_own_family.py checks that a link imports nothing).
# warm.py's Popen runs this package's own warm-up command with a fixed argv (--part i/N), started only from the
# command line (the Docker build), never from the app.
ALLOWED_CALLS = {
    "launcher.py: subprocess.Popen(",
    "plugins.py: importlib.import_module(",
    "warm.py: subprocess.Popen(",
    "idle_process.py: subprocess.Popen(",  # python -m <one of our modules>, no shell, no user text
}


def test_no_eval_exec_or_shell_in_the_app():
    found = []
    for path in app_sources():
        source = path.read_text()
        found += [f"{path.name}: {m.group(0)}" for m in re.finditer(r"\b(eval|exec)\s*\(", source)]
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in DANGEROUS_CALLS:
                found.append(f"{path.name}:{node.lineno} {func.id}(")
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and (func.value.id, func.attr) in DANGEROUS_ATTRS
            ):
                found.append(f"{path.name}:{node.lineno} {func.value.id}.{func.attr}(")
                if any(k.arg == "shell" for k in node.keywords):
                    found.append(f"{path.name}:{node.lineno} shell=")
    assert [f for f in found if re.sub(r":\d+ ", ": ", f) not in ALLOWED_CALLS] == []


def test_user_text_is_parsed_not_evaluated():
    """Rule targets typed as text (the CLI's --rule) are parsed against a fixed grammar."""
    from sharding_lab.sharding.rules import parse_target

    assert parse_target("data+model") == ("data", "model")
    marker = "sharding_lab_abuse_marker"
    for text in ["__import__('os').system('true')", f"globals().update({marker}=1)", "1+1"]:
        try:
            parse_target(text)
        except sl.ConfigError:
            pass
        assert marker not in globals()
