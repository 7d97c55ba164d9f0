"""Issue 50: the Plan search's compile workers are started with multiprocessing "spawn", which re-ran the app's
entry script in each: each worker registered with the class record as a server and a session and started the
class warm-up, so the Teacher page listed phantom servers and counted sessions nobody opened."""

import glob
import tempfile
import time

import pytest

from sharding_lab.hardware import targets
from sharding_lab.server import classroom, record
from tests.support import app_test

TPU = targets.availability(targets.parse("v5e-8"))


@pytest.mark.slow
@pytest.mark.skipif(not TPU[0], reason=TPU[1])
def test_while_a_search_compiles_in_workers_the_teacher_sees_one_server_and_one_session(monkeypatch, tmp_path):
    """A class record in a file (as a real server keeps it) that the workers could reach; a 124 M model, whose
    search compiles in worker processes; the Teacher page read while they compile."""
    monkeypatch.setenv("SHARDING_LAB_DATABASE_URL", f"sqlite:///{tmp_path / 'classroom.sqlite3'}")
    monkeypatch.setenv("SHARDING_LAB_TEACHER_TOKEN", "the-token")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the workers' compile folders, ours alone
    ours = record.Record(classroom.database_url(), classroom.replica_id(), status=classroom.server_status)
    before = classroom.use_record(ours)
    try:
        at = app_test(300)
        at.query_params.update({"teacher": "the-token"})
        at.run()
        at.switch_page("app_pages/plan.py").run()
        at.selectbox(key="plan_size").set_value("gpt2-small").run()
        at.selectbox(key="plan_target").set_value("v5e-8").run()
        at.number_input(key="plan_seq").set_value(128).run()
        at.number_input(key="plan_batch_tokens").set_value(1024).run()
        at.multiselect(key="plan_presets").set_value(["dp"]).run()
        at.button(key="plan_run").click().run()
        job = at.session_state["plan_job"]
        try:
            deadline = time.monotonic() + 240
            # A worker compiling (its buffer-assignment folder has files) has long finished starting up.
            while job.running and not glob.glob(str(tmp_path / "sharding-lab-compile-*" / "*")):
                assert time.monotonic() < deadline, "no worker compiled within 240 s"
                time.sleep(0.5)
            assert job.running, job.error
            time.sleep(record.BEAT_S + 2 * record.FLUSH_S)  # a worker's heartbeat would be written by now
            at.switch_page("app_pages/teacher.py").run()
            assert not at.exception, at.exception
            sessions = next(m for m in at.metric if m.label == "Sessions open")
            assert sessions.value == "1"
            assert not any(s.value == "Servers" for s in at.subheader), "more than one server listed"
            assert [s["replica"] for s in classroom.servers()] == [classroom.replica_id()]
        finally:
            job.cancel()  # this tab leaves the shared search: the only one waiting, so it stops
            job.wait(120)
    finally:
        classroom.use_record(before)
        ours.close()


def _worker_acts_as_a_server() -> tuple:
    """In a spawned child: whether it thinks it is a worker, the class record would connect, the warm-up start."""
    from sharding_lab import worker_process
    from sharding_lab.server import classroom, warm

    return worker_process.is_worker(), classroom.record().engine is not None, warm.warm_in_background() is not None


def test_a_worker_neither_registers_nor_warms(monkeypatch, tmp_path):
    """The guard the record and the warm-up respect, for any child process: this one serves, a spawned one not."""
    import multiprocessing

    from sharding_lab import worker_process

    assert not worker_process.is_worker()
    monkeypatch.setenv("SHARDING_LAB_DATABASE_URL", f"sqlite:///{tmp_path / 'classroom.sqlite3'}")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_worker_acts_as_a_server) == (True, False, False)
