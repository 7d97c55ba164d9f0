"""The class record in a real SQLite file: what a restart keeps, what a page view costs while the database is
busy, a database that is down and comes back, a schema newer than the server, the URLs people paste."""

import sqlite3
import threading
import time

import pytest
import sqlalchemy as sa

from sharding_lab.server import classroom, record


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'classroom.sqlite3'}"


def test_a_restart_keeps_the_solves_and_forgets_the_stopped_servers_sessions(db_url):
    first = record.Record(db_url, "server-a")
    for i in range(5):
        first.seen(f"tab{i}")
    first.solved("tab0", "eighth")
    first.solved("tab1", "eighth")
    first.solved("tab1", "eighth")  # a session counts once
    first.solved("tab2", "explicit")
    assert first.open_sessions(300) == 5
    first.close()  # a clean stop: what was pending is written, and the server says it is gone

    second = record.Record(db_url, "server-a-restarted")
    try:
        assert second.solved_counts() == {"eighth": 2, "explicit": 1}
        # The first server's tabs are not open any more: they come back as sessions of the new one.
        assert second.open_sessions(300) == 0
        second.seen("tab0")
        assert second.open_sessions(300) == 1
        states = {s["replica"]: s["up"] for s in second.replicas()}
        assert states == {"server-a": False, "server-a-restarted": True}
    finally:
        second.close()


def test_two_servers_on_one_database_count_the_whole_class(db_url):
    a, b = record.Record(db_url, "a"), record.Record(db_url, "b")
    try:
        a.seen("t1")
        b.seen("t2")
        b.seen("t3")
        a.solved("t1", "eighth")
        b.solved("t2", "eighth")
        b.solved("t3", "no-fallback")
        b._flush()  # what b's writer does within a second: here at once, so that a's read below sees it
        assert a.solved_counts() == b.solved_counts() == {"eighth": 2, "no-fallback": 1}
        assert a.open_sessions(300) == b.open_sessions(300) == 3
    finally:
        a.close()
        b.close()


def test_a_page_view_never_waits_for_the_database(db_url):
    """Another process holds SQLite's write lock (a long transaction): page views and solves return at once,
    and reach the database once it is free."""
    rec = record.Record(db_url, "a")
    try:
        blocker = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=1)
        blocker.execute("BEGIN EXCLUSIVE")
        started = time.perf_counter()
        threads = [
            threading.Thread(
                target=lambda i=i: [rec.seen(f"t{i}-{j}") or rec.solved(f"t{i}", "eighth") for j in range(200)]
            )
            for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - started
        assert took < 0.5, f"1,600 page views took {took:.2f} s with the database locked"
        blocker.rollback()
        blocker.close()
        assert rec.solved_counts() == {"eighth": 8}
        assert rec.open_sessions(300) == 8 * 200
    finally:
        rec.close()


def test_a_database_that_is_down_is_said_and_nothing_is_lost_when_it_is_back(tmp_path):
    folder = tmp_path / "not-yet"
    rec = record.Record(f"sqlite:///{folder / 'classroom.sqlite3'}", "a")
    try:
        rec.seen("t1")
        rec.solved("t1", "eighth")
        assert rec.problem() and "cannot be saved" in rec.problem() and str(folder) in rec.problem()
        assert rec.solved_counts() == {"eighth": 1}  # this server's own count meanwhile
        assert rec.open_sessions(300) == 1
        folder.mkdir()
        rec._next_try = 0.0  # the writer would try again within RETRY_S
        assert rec.solved_counts() == {"eighth": 1}
        assert rec.problem() is None
        engine = sa.create_engine(f"sqlite:///{folder / 'classroom.sqlite3'}")
        with engine.connect() as c:
            assert c.execute(sa.text("SELECT challenge_id, session_id FROM lab_solved")).all() == [("eighth", "t1")]
        engine.dispose()
    finally:
        rec.close()


def test_a_schema_newer_than_the_server_is_refused_with_a_reason(db_url):
    rec = record.Record(db_url, "a")
    rec.close()
    engine = sa.create_engine(db_url)
    with engine.begin() as c:
        c.execute(sa.text("UPDATE lab_schema SET version = :v"), {"v": record.SCHEMA_VERSION + 1})
    engine.dispose()
    old = record.Record(db_url, "old-server")
    try:
        assert "newer than this server's" in old.problem()
        old.solved("t1", "eighth")
        assert old.solved_counts() == {"eighth": 1}  # counted in memory, the database left as it is
    finally:
        old.close()


def test_database_urls_as_people_write_them():
    assert record.engine_url("postgres://u:p@db/lab").drivername == "postgresql+psycopg"
    assert record.engine_url("postgresql://u:p@db:5432/lab").drivername == "postgresql+psycopg"
    assert record.engine_url("sqlite:////data/x.db").drivername == "sqlite"
    shown = record.shown_url("postgresql://lab:s3cret@db:5432/lab")
    assert "s3cret" not in shown and "db:5432/lab" in shown
    assert "s3cret" not in record.shown_url("::not a url s3cret")


def test_the_default_record_is_a_file_next_to_the_compilation_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("SHARDING_LAB_DATABASE_URL", raising=False)
    monkeypatch.setenv("SHARDING_LAB_CACHE_DIR", str(tmp_path / "cache"))
    assert classroom.database_url() == f"sqlite:///{tmp_path / 'cache' / 'classroom.sqlite3'}"
    monkeypatch.setenv("SHARDING_LAB_CACHE_DIR", "off")
    assert classroom.database_url() == "sqlite://"  # in memory: nothing kept
    monkeypatch.setenv("SHARDING_LAB_DATABASE_URL", "postgresql://lab@db/lab")
    assert classroom.database_url() == "postgresql://lab@db/lab"
    monkeypatch.setenv("SHARDING_LAB_REPLICA_ID", "web-2")
    assert classroom.replica_id() == "web-2"


def test_a_record_in_memory_says_so_and_a_restart_starts_it_afresh(db_url):
    """The Teacher page once said "a restart keeps it" of sqlite:// (the tests' and a quick try's record): it lives in
    the process. Here a restart of each kind, and what each says of itself."""
    first = record.Record("sqlite://", "server-a")
    first.solved("tab0", "eighth")
    assert first.in_memory() and first.solved_counts() == {"eighth": 1}
    first.close()
    second = record.Record("sqlite://", "server-a-restarted")
    try:
        assert second.solved_counts() == {}
    finally:
        second.close()
    on_disk = record.Record(db_url, "server-b")
    try:
        assert not on_disk.in_memory()
    finally:
        on_disk.close()
    assert not record.Record("postgresql://u:p@db/lab", "x", start=False).in_memory()
