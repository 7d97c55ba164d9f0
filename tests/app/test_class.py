"""A class on one server: runs released from the queue together, runs that cannot start, the
teacher view and its registry. Real jobs on the real scheduler (real JAX on the forced host
devices), the real script through AppTest."""

import dataclasses
import math
import os
import re
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import sharding_lab as sl
from sharding_lab.app.state import config_state  # noqa: F401
from sharding_lab.app.state import links as share
from sharding_lab.server import admission, classroom, jobs, page_compiles, priority, slots  # noqa: F401
from sharding_lab.units import format_bytes
from tests.support import ROOT, all_slots_held, app_test, poll

TIMEOUT = 120
TOKEN = "class-token-7f3a"


@pytest.fixture
def all_slots_taken():
    """Every training slot held here, so new runs queue; gives back what it still holds."""
    with all_slots_held() as held:
        yield held


def small_config(steps: int = 200) -> sl.LabConfig:
    return sl.LabConfig(mesh=sl.MeshSpec((8,), ("data",)), preset="dp", steps=steps)


def watch(job_list, seconds: float) -> list[list[str]]:
    """Poll every job as its page would (which also keeps it 'watched'); each job's states in order."""
    seen = [[] for _ in job_list]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        snaps = [job.snapshot() for job in job_list]
        for states, snap in zip(seen, snaps):
            if not states or states[-1] != snap.state:
                states.append(snap.state)
        if not any(s.running for s in snaps):
            break
        time.sleep(0.05)
    return seen


# --- the queue ---------------------------------------------------------------------------------


def test_many_queued_runs_released_at_once_all_start_and_finish(all_slots_taken):
    """Every slot frees up in the same instant with more runs waiting than slots: each run must
    leave the queue, train and finish — none left 'starting' (the frozen session of the load test)."""
    assert len(all_slots_taken) == slots.MAX_JOBS
    waiting = [jobs.TrainingJob(small_config(100 + 10 * i)) for i in range(slots.MAX_JOBS + 2)]
    try:
        deadline = time.monotonic() + 30
        while slots.load()[1] < len(waiting) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert slots.load() == (slots.MAX_JOBS, len(waiting))
        assert {job.snapshot().state for job in waiting} == {"queued"}
        release = [threading.Thread(target=slots.release_slot) for _ in all_slots_taken]
        all_slots_taken.clear()  # they are ours no more: the runs take them
        for thread in release:
            thread.start()
        seen = watch(waiting, 120)
        for i, (job, states) in enumerate(zip(waiting, seen)):
            snap = job.snapshot()
            assert snap.state == "finished", (i, states, snap.message)
            assert snap.step == 100 + 10 * i and snap.layout_problems == []
            assert states[-1] == "finished" and "queued" not in states[1:], states  # forward only
        for job in waiting:  # a run says "finished" just before its thread gives the slot back
            job.thread.join(10)
        assert slots.load() == (0, 0)
    finally:
        for job in waiting:
            job.stop()
        for job in waiting:
            job.thread.join(60)
        while True:  # take the slots back for the fixture to return
            try:
                slots.take_slot()
                all_slots_taken.append(1)
            except slots.Busy:
                break


# --- a run that cannot start ---------------------------------------------------------------------


def test_a_run_that_waits_past_the_start_limit_says_so(all_slots_taken, monkeypatch):
    monkeypatch.setattr(jobs, "START_LIMIT_S", 0.5)
    job = jobs.TrainingJob(small_config())
    states = watch([job], 30)[0]
    snap = job.snapshot()
    assert states == ["queued", "stopped"], states
    assert "could not start within 0 s" in snap.message or "could not start within 1 s" in snap.message
    assert "press Train" in snap.message
    assert slots.load()[1] == 0


def test_a_run_stuck_before_its_first_step_is_reported_failed(monkeypatch):
    """Building and compiling take ~1 s here; with a 0.05 s limit the page is told the run did not
    start, the thread stops at its first chunk and hands its slot back. Its own learning rate: a layout no other
    test compiles (the suite's shared compilation cache once had this one ready in less than the limit)."""
    monkeypatch.setattr(jobs, "START_LIMIT_S", 0.05)
    before = slots.load()[0]
    job = jobs.TrainingJob(dataclasses.replace(small_config(5000), lr=0.0137))
    states = watch([job], 60)[0]
    snap = job.snapshot()
    assert snap.state == "failed" and "did not start training within 0 s" in snap.message, (states, snap)
    job.thread.join(60)
    assert not job.thread.is_alive()
    assert job.snapshot().state == "failed" and job.snapshot().step == 0  # the thread's later news ignored
    assert slots.load()[0] == before


# --- the teacher view ----------------------------------------------------------------------------


def app_with(query: dict, token: str | None, monkeypatch) -> AppTest:
    if token is None:
        monkeypatch.delenv("SHARDING_LAB_TEACHER_TOKEN", raising=False)
    else:
        monkeypatch.setenv("SHARDING_LAB_TEACHER_TOKEN", token)
    at = app_test(TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def link_warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if "link" in w.value or "teacher" in w.value]


def assert_no_teacher_page(at: AppTest) -> None:
    assert not at.exception
    with pytest.raises(ValueError, match="Known pages"):  # not in the navigation: no URL reaches it
        at.switch_page("app_pages/teacher.py")
    assert "Teacher view" not in [t.value for t in at.title]


@pytest.mark.parametrize(
    "query,token",
    [
        ({"teacher": TOKEN}, None),  # no token on this server: no teacher view at all
        ({}, TOKEN),  # a student's link
        ({"teacher": "guess"}, TOKEN),  # a wrong token
        ({"teacher": TOKEN[:-1]}, TOKEN),  # almost right is wrong
        ({"teacher": ""}, ""),  # an empty token set on the server opens nothing
        ({"teacher": [TOKEN, "guess"]}, TOKEN),  # one value of it, not the right one among guesses
        ({"teacher": [TOKEN, TOKEN]}, TOKEN),
    ],
)
def test_teacher_page_absent_without_the_right_token(query, token, monkeypatch):
    at = app_with(query, token, monkeypatch)
    assert_no_teacher_page(at)
    assert not link_warnings(at), "a teacher key is not a link problem to report"


def test_teacher_page_shows_counts_with_the_right_token(monkeypatch):
    classroom.reset()
    at = app_with({"teacher": TOKEN}, TOKEN, monkeypatch)
    assert not at.exception and not link_warnings(at)
    # The sidebar rewrote the query string from the settings: a link copied now has no token.
    assert "teacher" not in at.query_params and at.query_params["preset"] == "seed"
    at.switch_page("app_pages/teacher.py")
    at.run()
    assert [t.value for t in at.title] == ["Teacher view"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Sessions open"] == "1"
    assert metrics["Runs training"] == f"{slots.load()[0]} / {slots.MAX_JOBS}"
    assert metrics["Runs queued"] == str(slots.load()[1])
    # Bytes by the lab's one formatter (SI): it read "1,234 of 12,345 MB", MiB under an "MB" label (issue 50.8).
    bound = format_bytes(admission.server_bound_bytes())
    assert re.fullmatch(rf"[0-9.]+ (kB|MB|GB|TB) of {re.escape(bound)}", metrics["Server memory"])
    assert "cores" in metrics["CPU load (1 min)"]
    assert metrics["Big compiles"] == "{} running, {} queued".format(*page_compiles.load())
    assert any("No challenges yet" in i.value for i in at.info)
    # Two more students open the app; two sessions solve challenge "c1" (one of them twice), one "c2".
    for _ in range(2):
        app_test(TIMEOUT).run()
    classroom.record_solved("s1", "c1")
    classroom.record_solved("s1", "c1")
    classroom.record_solved("s2", "c1")
    classroom.record_solved("s2", "c2")
    at.run()
    assert {m.label: m.value for m in at.metric}["Sessions open"] == "3"
    assert not any("No challenges yet" in i.value for i in at.info)
    table = at.table[0].value
    assert dict(zip(table.index, table["sessions that solved it"])) == {"c1": 2, "c2": 1}
    assert "s1" not in table.to_string() and "s2" not in table.to_string()  # counts only
    classroom.reset()


def test_teacher_key_is_neither_a_setting_nor_a_link_problem():
    updates, problems = share.from_query({"teacher": "x", "mesh": "1x8"})
    assert problems == [] and "teacher" not in updates
    assert "teacher" not in share.to_query(dict(config_state.defaults(), teacher_view=True, teacher="x"))
    _, problems = share.from_query({"teachr": "x"})
    assert problems  # other unknown keys are still reported


def test_classroom_counts_are_thread_safe_and_forget_old_sessions():
    classroom.reset()

    def student(i):
        for j in range(200):
            classroom.seen(f"s{i}")
            classroom.record_solved(f"s{i}", f"c{j % 3}")

    threads = [threading.Thread(target=student, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert classroom.open_sessions() == 8
    assert classroom.solved_counts() == {"c0": 8, "c1": 8, "c2": 8}
    later = time.time() + classroom.RECENT_S + 1
    classroom.seen("late", now=later)
    assert classroom.open_sessions(now=later) == 1  # the eight are gone, their solves still count
    assert classroom.solved_counts()["c0"] == 8
    classroom.reset()
    assert classroom.open_sessions() == 0 and classroom.solved_counts() == {}


def test_token_comparison():
    assert classroom.teacher_token_ok("abc", "abc")
    for given in ("abd", "ab", "abcd", "", None, ["abc"]):
        assert not classroom.teacher_token_ok(given, "abc")
    assert not classroom.teacher_token_ok("", "") and not classroom.teacher_token_ok("x", None)


# --- a warm start --------------------------------------------------------------------------------

CACHE_PROBE = """
import sharding_lab as sl
from sharding_lab.server import compile_cache
print(compile_cache.enable_compilation_cache())
lab = sl.Lab(sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("data", "model")), preset="fsdp", steps=100))
sl.Trainer(lab).run()
"""


def test_a_second_server_start_loads_its_programs_from_the_disk_cache_even_moved(tmp_path):
    """The first process writes its compiled programs; a second one, a fresh JAX on a copy of that cache at
    another path (a teacher's volume, a backup), finds every one of them there: it adds no entry of its own.
    Fails without ``jax_persistent_cache_enable_xla_caches="none"``: JAX then hashes a directory inside the
    cache's own path into every program's key."""
    import shutil
    import subprocess
    import sys

    runs = []
    for where in ("jax", "moved"):
        if where == "moved":
            shutil.copytree(tmp_path / "jax", tmp_path / "moved")
        env = dict(os.environ, SHARDING_LAB_CACHE_DIR=str(tmp_path / where), SHARDING_LAB_DEVICES="8")
        out = subprocess.run(
            [sys.executable, "-c", CACHE_PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert str(tmp_path / where) in out.stdout
        runs.append(sorted(p.name for p in (tmp_path / where).iterdir()))
    assert len(runs[0]) >= 3  # the model's creation and the training chunk at least
    assert runs[1] == runs[0]


def test_cache_can_be_switched_off(monkeypatch):
    from sharding_lab.server import compile_cache

    monkeypatch.setenv("SHARDING_LAB_CACHE_DIR", "off")
    assert compile_cache.cache_dir() is None
    monkeypatch.setenv("SHARDING_LAB_CACHE_DIR", "~/somewhere")
    assert str(compile_cache.cache_dir()).endswith("somewhere") and "~" not in str(compile_cache.cache_dir())


def test_warm_up_compiles_the_default_configuration_in_the_background():
    from sharding_lab.server import warm
    from sharding_lab.training import trainer as training

    config = sl.LabConfig(mesh=sl.MeshSpec((4, 2), ("warm_a", "warm_b")), preset="seed")
    key = training.program_key(config, config.chunk)
    assert key not in training._programs
    thread = warm._warm_thread([config])
    thread.join(120)
    assert key in training._programs  # a student's first run of this layout will not compile it


def test_the_class_warm_up_covers_every_preset_and_mesh_shape_the_sidebar_offers():
    """Each family's defaults × every preset × every 1–3-axis shape over the 8 devices, less what cannot
    run — counted independently here by planning every combination."""
    from sharding_lab.server import warm
    from sharding_lab.sharding.mesh import default_axes

    shapes = warm.class_meshes(8)
    assert shapes[0] == (2, 4) and len(shapes) == len(set(shapes)) == 15  # 1 + 4 + 10 factorisations of 8
    assert all(math.prod(s) == 8 for s in shapes)
    configs = warm.class_configs(8)
    expected = 0
    for family in ("mlp", "transformer"):
        fam = sl.family(family)
        for shape in shapes:
            for preset in fam.presets:
                try:
                    sl.plan(
                        sl.LabConfig(mesh=sl.MeshSpec(shape, default_axes(len(shape))), preset=preset, model=fam.Spec())
                    )
                    expected += 1
                except sl.ConfigError:
                    pass
    for shape in [(1, 4), (2, 2), (4, 1), (1, 2), (2, 1)]:  # the default model on fewer devices, after
        for preset in sl.family("mlp").presets:
            try:
                sl.plan(sl.LabConfig(mesh=sl.MeshSpec(shape, default_axes(2)), preset=preset))
                expected += 1
            except sl.ConfigError:
                pass
    assert len(configs) == expected and configs[0].mesh.shape == (2, 4) and configs[0].preset == "seed"
    families = [c.family.name for c in configs]
    assert families == sorted(families, key=["mlp", "transformer"].index)  # the cheap default model first
    assert {c.mesh.size for c in configs if c.family.name == "mlp"} == {8, 4, 2}
    transformer = [c for c in configs if c.family.name == "transformer"]
    assert transformer and all(c.optimizer == "adamw" and c.steps == 300 for c in transformer)


def test_the_warm_up_waits_for_students_and_stops_when_told():
    from sharding_lab.server import slots, warm

    config = sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("wait_a", "wait_b")), preset="dp")
    slots.take_slot()  # a student's run is training
    try:
        thread = warm._warm_thread([config])
        time.sleep(1.5)
        assert warm.progress()["done"] == 0 and warm.progress()["running"]
    finally:
        slots.release_slot()
    thread.join(120)
    assert warm.progress()["done"] == 1 and not warm.progress()["running"]
    warm.stop_warming()
    try:
        warm._warm_thread([config]).join(30)
        assert warm.progress()["stopped"] and warm.progress()["done"] == 0
    finally:
        warm.SERVER.stop.clear()


def test_the_class_warm_up_waits_while_a_layout_a_learner_reads_is_not_compiled_and_while_pages_run():
    """What learners look at and do comes before what a class may click later: on a fresh server the class
    warm-up beside the learners' requests left 4 of 20 layouts compiled when the class pressed Train (16
    without it); beside their page runs it took the cores XLA's shared thread pools give every compile."""
    from sharding_lab.server import activity, precompile, warm

    config = sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("read_a", "read_b")), preset="dp")
    with precompile.SERVER.lock:  # a learner's page asked (no notify: the precompile thread does not take it here)
        precompile.SERVER.wanted["reader"] = (config, time.monotonic())
    page = activity.page_run()
    try:
        assert precompile.pending()
        thread = warm._warm_thread([config])
        time.sleep(1.5)
        assert warm.progress()["done"] == 0 and warm.progress()["running"]
        page.__enter__()  # a learner's page runs (a long one: a sidebar edit on the Plan page)
    finally:
        with precompile.SERVER.lock:
            precompile.SERVER.wanted.pop("reader", None)
    assert not precompile.pending() and activity.quiet_for() == 0.0
    time.sleep(1.5)
    assert warm.progress()["done"] == 0, "the warm-up compiled while a page ran"
    page.__exit__(None, None, None)
    ended = time.monotonic()
    thread.join(120)
    assert warm.progress()["done"] == 1 and not warm.progress()["running"]
    assert time.monotonic() - ended >= priority.IDLE_BEFORE_WARMING_S  # it waited for the server to be idle


def test_the_class_warm_up_gives_way_to_a_page_run_in_the_middle_of_a_layout(monkeypatch):
    """A whole first run took 26 s while a class set up its pages; the warm-up now stops between its parts when a
    learner's page runs, and finishes the layout once the server is idle again."""
    from sharding_lab.server import activity, warm
    from sharding_lab.training import trainer

    config = sl.LabConfig(mesh=sl.MeshSpec((4, 2), ("gives_a", "gives_b")), preset="fsdp")
    key = trainer.program_key(config, config.chunk)
    page = activity.page_run()
    built = []

    class LabThenAPageRun(trainer.Lab):
        def __init__(self, config):
            super().__init__(config)
            if not built:  # a learner's page starts while the warm-up builds the model
                page.__enter__()
            built.append(config)

    monkeypatch.setattr(trainer, "Lab", LabThenAPageRun)
    thread = warm._warm_thread([config])
    try:
        deadline = time.monotonic() + 60
        while not built and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)
        assert built and warm.progress()["done"] == 0
        assert key not in trainer._programs, "the warm-up went on compiling while a page ran"
    finally:
        page.__exit__(None, None, None)
    thread.join(120)
    assert warm.progress()["done"] == 1 and key in trainer._programs and len(built) == 2


def test_the_warm_command_splits_the_layouts_over_processes_into_one_cache(tmp_path):
    """``python -m sharding_lab.server.warm --jobs 2`` (the Docker build's step): each process takes every
    second layout; here only the default one (SHARDING_LAB_WARM=default), so one process has none."""
    import os
    import subprocess
    import sys

    from sharding_lab.server import warm

    env = dict(os.environ, SHARDING_LAB_CACHE_DIR=str(tmp_path), SHARDING_LAB_WARM="default")
    done = subprocess.run(
        [sys.executable, "-m", "sharding_lab.server.warm", "--jobs", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "in 2 processes" in done.stdout and "compiling 1 configurations" in done.stdout
    assert "compiling 0 configurations" in done.stdout and any(tmp_path.iterdir())
    assert not (tmp_path / warm.MARKER).exists()  # the default layout only: not every layout a class clicks


def test_after_the_warm_command_the_server_warms_the_default_layout_only(tmp_path, monkeypatch):
    """The warm command marks the cache it filled (this code, this JAX, these devices, these XLA flags); a
    server on that cache does not go through the class's layouts again — unless the code or the flags changed
    since (its programs differ, or their cache keys do)."""
    import json

    from sharding_lab.server import warm

    monkeypatch.setenv("SHARDING_LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SHARDING_LAB_WARM", "on")
    every = warm._default_configs(for_server=True)
    assert every[0] == sl.LabConfig() and len(every) > 100  # the default, then the class's layouts
    warm._write_marker(tmp_path)
    assert warm.already_warmed()
    assert warm._default_configs(for_server=True) == [sl.LabConfig()]
    assert "already compiled" in warm.progress()["note"]
    assert len(warm._default_configs()) == len(every)  # the command itself always compiles them all
    marker = json.loads((tmp_path / warm.MARKER).read_text())
    (tmp_path / warm.MARKER).write_text(json.dumps({**marker, "code": "older code"}))
    assert not warm.already_warmed() and len(warm._default_configs(for_server=True)) == len(every)
    # other XLA flags: JAX's cache key includes them, so the marked programs would all miss
    (tmp_path / warm.MARKER).write_text(json.dumps(marker))
    assert warm.already_warmed()
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_fast_math=false")
    assert not warm.already_warmed()


def test_a_server_whose_own_warm_up_went_through_every_layout_marks_the_cache(tmp_path, monkeypatch):
    """Without the warm command, the server's background warm-up compiles every class layout; once it has, it
    marks the cache as the command does, so a restart warms the default layout only. A stopped warm-up does
    not (here the class is two small layouts)."""
    from sharding_lab.server import warm

    layouts = [sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("data", "model")), preset=p) for p in ("dp", "fsdp")]
    monkeypatch.setattr(warm, "class_configs", lambda devices=None: layouts)
    monkeypatch.setenv("SHARDING_LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SHARDING_LAB_WARM", "on")
    warm.stop_warming()
    try:
        warm._warm_thread(None).join(60)
        assert warm.progress()["stopped"] and not (tmp_path / warm.MARKER).exists()
    finally:
        warm.SERVER.stop.clear()
    warm._warm_thread(None).join(120)
    assert warm.progress()["done"] == 3 and not warm.progress()["skipped"]  # the default, then the class's two
    assert warm.already_warmed() and "restart warms the default layout only" in warm.progress()["note"]
    assert warm._default_configs(for_server=True) == [sl.LabConfig()]


def process_state(pid: int) -> tuple[str, int, str]:
    """(state letter, nice, autogroup nice) of process ``pid``, from /proc: "T" is stopped (SIGSTOP)."""
    fields = (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1]).split()
    return fields[0], int(fields[16]), Path(f"/proc/{pid}/autogroup").read_text().split()[-1]


def test_the_class_warm_up_compiles_in_a_child_at_the_lowest_priority_paused_while_students_are_busy(
    tmp_path, monkeypatch
):
    """After what a class clicks first (here, in memory: the default layout and the MLP on two-axis meshes), the
    server's warm-up hands the rest (here three layouts on a three-axis mesh) to a child process: nice 19 in an
    autogroup of its own at 19 (this process keeps its priority: XLA's pools would inherit it), stopped
    (SIGSTOP) while every training slot is taken and going on once they are free; the cache marked at the end."""
    from sharding_lab.server import warm

    mesh = sl.MeshSpec((2, 2, 2), ("cw_a", "cw_b", "cw_c"))
    layouts = [sl.LabConfig(mesh=mesh, preset=p) for p in ("dp", "fsdp", "tp")]
    monkeypatch.setattr(warm, "class_configs", lambda devices=None: layouts)
    monkeypatch.setenv("SHARDING_LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SHARDING_LAB_WARM", "on")
    monkeypatch.setattr(priority, "IDLE_BEFORE_WARMING_S", 0.0)  # page runs of other tests in this process
    nice_before = os.getpriority(os.PRIO_PROCESS, 0)
    thread = warm._warm_thread(None)
    deadline = time.monotonic() + 120  # the default layout first, in this process
    while not (child := warm.progress().get("child")) and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child and child != os.getpid()
    # Paused only once it has said its first line (its imports done): at nice 19 on a loaded machine, many seconds.
    while "cw_a" not in (warm.progress().get("current") or "") and time.monotonic() < deadline + 120:
        time.sleep(0.05)
    with all_slots_held():  # students' runs in every slot
        state, nice, group = poll(lambda: process_state(child), ("T", 19, "19"), 10)
        assert (state, nice, group) == ("T", 19, "19") and warm.progress()["paused"]
        done = warm.progress()["done"]
        time.sleep(1.0)
        assert warm.progress()["done"] == done and process_state(child)[0] == "T"  # nothing compiled meanwhile
    assert os.getpriority(os.PRIO_PROCESS, 0) == nice_before
    thread.join(180)
    assert not thread.is_alive() and warm.progress()["done"] == 4 and not warm.progress()["skipped"]
    assert not warm.progress()["paused"] and not Path(f"/proc/{child}").exists()
    assert warm.already_warmed()


WARM_AND_WAIT = """
import sys, time
import sharding_lab as sl
from sharding_lab.server import warm
mesh = sl.MeshSpec((2, 2, 2), ("cw_x", "cw_y", "cw_z"))
warm.class_configs = lambda devices=None: [sl.LabConfig(mesh=mesh, preset=p) for p in ("dp", "tp")]
warm._warm_thread(None)
while "cw_x" not in (warm.progress().get("current") or ""):  # the child has said its first line
    time.sleep(0.05)
print(warm.progress()["child"], flush=True)
time.sleep(600)
"""


def test_the_warm_up_child_ends_with_the_warm_up_and_with_a_server_killed_outright(tmp_path, monkeypatch):
    """Stop warming (the teacher's button, the server's exit): the child is gone at once. A server killed with
    SIGKILL runs no exit handler: its child ends too, even one stopped at that moment (no orphan compiling, or
    holding its memory stopped, on a machine whose server is gone)."""
    import signal
    import subprocess
    import sys

    from sharding_lab.server import warm

    mesh = sl.MeshSpec((2, 2, 2), ("cs_a", "cs_b", "cs_c"))
    monkeypatch.setattr(warm, "class_configs", lambda devices=None: [sl.LabConfig(mesh=mesh, preset="dp")])
    monkeypatch.setenv("SHARDING_LAB_CACHE_DIR", str(tmp_path / "stopped"))
    monkeypatch.setenv("SHARDING_LAB_WARM", "on")
    thread = warm._warm_thread(None)
    deadline = time.monotonic() + 120
    while not (child := warm.progress().get("child")) and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child
    try:
        warm.stop_warming()
        thread.join(10)
        assert not thread.is_alive() and not Path(f"/proc/{child}").exists() and warm.progress()["stopped"]
    finally:
        warm.SERVER.stop.clear()

    env = {**os.environ, "SHARDING_LAB_CACHE_DIR": str(tmp_path / "killed"), "SHARDING_LAB_WARM": "on"}
    server = subprocess.Popen(
        [sys.executable, "-c", WARM_AND_WAIT], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        orphan = int(server.stdout.readline())
        os.kill(orphan, signal.SIGSTOP)  # as the server pauses it while students are busy
        assert poll(lambda: process_state(orphan)[0], "T", 10) == "T"
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        gone = lambda: not Path(f"/proc/{orphan}").exists() or process_state(orphan)[0] in "ZX"  # noqa: E731
        assert poll(gone, True, 10)  # ended (a zombie until whoever inherited it reaps it)
    finally:
        server.kill()
        server.wait()


def test_the_warm_command_lets_go_of_the_programs_jax_keeps_in_memory():
    """Every ``release_every`` layouts the warm command drops JAX's in-memory programs (it fills the disk
    cache; holding them grew a process ~15 MB per layout); the layouts after a release, and a run of one
    warmed before it, still compile and train."""
    import jax

    from sharding_lab.server import warm

    before = jax.jit(lambda x: x * 3)
    before(1.0)
    configs = [
        sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("rel_a", "rel_b")), preset=p, steps=100) for p in ("dp", "tp", "fsdp")
    ]
    warm._warm(configs[:1], wait_for_students=False, release_every=2)
    assert before._cache_size() == 1  # not yet: one layout of two
    warm._warm(configs, wait_for_students=False, release_every=2)
    assert before._cache_size() == 0
    assert warm.progress()["done"] == 3 and warm.progress()["skipped"] == 0  # the third, after the release
    assert len(sl.Trainer(sl.Lab(configs[0])).run().losses) == 100


def test_the_warm_up_s_child_is_ended_over_its_memory_bound_or_paused_too_long():
    """Issue 50: the warm-up's child grew to 5.9-8.2 GB and held 7.4 GB paused for ten minutes."""
    from sharding_lab.server import idle_process

    states = []
    status = idle_process.run(
        "tests.app.children.memory_hog",
        {},
        lambda: False,
        lambda: False,
        lambda line: None,
        lambda **state: states.append(state),
        memory_bound=200_000_000,
    )
    assert status == idle_process.RELEASED and states[-1]["released"] == "over its 0.2 GB"
    states.clear()
    status = idle_process.run(  # a busy server pauses it; paused longer than the limit, it is ended
        "tests.app.children.memory_hog",
        {},
        lambda: True,
        lambda: False,
        lambda line: None,
        lambda **state: states.append(state),
        release_idle_s=1.0,
    )
    assert status == idle_process.RELEASED and states[-1]["released"] == "paused over 1 s"
    assert {"paused": True} in states
