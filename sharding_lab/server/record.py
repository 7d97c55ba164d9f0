"""The class's record in a database: what the teacher view shows, kept where a restart finds it and
where every replica of the app writes.

Three tables (SQLAlchemy Core, one schema for SQLite and PostgreSQL) and a version row:

- ``lab_sessions``: an opaque session id, the replica that served it, when it last drew a page;
- ``lab_solved``: a challenge id and an opaque session id (each session counts once), and when;
- ``lab_replicas``: each server process, when it was last heard from, and its load and warm-up (JSON).

Counts and opaque ids only: no names, nothing a student typed. The database is a SQLite file by default
(next to the compilation cache: the data volume of a container) and whatever
``SHARDING_LAB_DATABASE_URL`` names otherwise (PostgreSQL, shared by replicas).

Off the hot path: a page view only puts an id and a time into a dict under a lock. One writer thread
per process writes what changed every :data:`FLUSH_S` seconds in one transaction, a solved challenge at
once (it wakes the writer), and the replica's heartbeat every :data:`BEAT_S`. One writer per process also
means no two threads of this process ever fight over SQLite's write lock (WAL mode lets readers on).
Reads write what is pending first, so a process reads what it recorded. If the database cannot be
reached, the record keeps this process's own counts in memory, says why (:meth:`Record.problem`),
and tries again every :data:`RETRY_S` — a class goes on whatever the database does.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time

import sqlalchemy as sa

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
FLUSH_S = 1.0  # pending page views are written at least this often
SEEN_WRITE_EVERY_S = 15.0  # a session's "last seen" is rewritten at most this often (the window is minutes)
BEAT_S = 5.0  # a replica writes its heartbeat this often
REPLICA_GONE_S = 20.0  # a replica not heard from for this long is down: its sessions stop counting
RETRY_S = 10.0  # after the database failed, try again this much later
PRUNE_EVERY_S = 60.0
MAX_PENDING = 10_000  # a bound on what waits for a database that is down

metadata = sa.MetaData()
version_table = sa.Table("lab_schema", metadata, sa.Column("version", sa.Integer, nullable=False))
sessions_table = sa.Table(
    "lab_sessions",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("replica", sa.String(128), nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False, index=True),
)
solved_table = sa.Table(
    "lab_solved",
    metadata,
    sa.Column("challenge_id", sa.String(64), primary_key=True),
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("solved_at", sa.Float, nullable=False),
)
replicas_table = sa.Table(
    "lab_replicas",
    metadata,
    sa.Column("replica", sa.String(128), primary_key=True),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("last_beat", sa.Float, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
)


def _create_v1(connection) -> None:
    metadata.create_all(connection, tables=[sessions_table, solved_table, replicas_table])


# version → the step that brings a database from the version before it there. A change of schema adds a step
# (never edits one): every replica runs the missing steps at start, one at a time (see Record._migrate).
MIGRATIONS = {1: _create_v1}


def engine_url(url: str) -> sa.URL:
    """The SQLAlchemy URL for ``url``; ``postgres://`` and ``postgresql://`` (as hosting services write them)
    mean PostgreSQL through psycopg 3, the driver this project installs."""
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def shown_url(url: str) -> str:
    """``url`` as it may be shown: the password hidden."""
    try:
        return engine_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown by its scheme only
        return url.split(":", 1)[0] + ":…"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL: readers never wait for the writer; busy_timeout: a second process (a restart overlapping the old one)
    # waits for the write lock instead of failing; NORMAL: safe with WAL, and no fsync per page view.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str) -> sa.Engine:
    """An engine for ``url`` (``sqlite://``: in memory, this process only — one connection shared)."""
    parsed = engine_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            return sa.create_engine(parsed, poolclass=sa.pool.StaticPool, connect_args={"check_same_thread": False})
        engine = sa.create_engine(parsed, connect_args={"timeout": 5})
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(
        parsed, pool_pre_ping=True, pool_size=2, max_overflow=2, connect_args={"connect_timeout": 5}
    )


def _upsert(connection, table: sa.Table, rows: list[dict], keys: list[str], update: list[str] | None) -> None:
    """Insert ``rows``; on a key already there, update the ``update`` columns (None: keep the old row)."""
    if not rows:
        return
    dialect = connection.dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise RuntimeError(f"the class record supports SQLite and PostgreSQL, not {dialect}")
    statement = insert(table)
    if update:
        statement = statement.on_conflict_do_update(
            index_elements=keys, set_={c: statement.excluded[c] for c in update}
        )
    else:
        statement = statement.on_conflict_do_nothing(index_elements=keys)
    connection.execute(statement, rows)


class Record:
    """The class's record in the database at ``url``, written by this process as ``replica``."""

    def __init__(self, url: str, replica: str, status=None, start: bool = True):
        self.url = url
        self.replica = replica
        self.started_at = time.time()
        self._status = status or (lambda: {})
        self._lock = threading.Lock()  # guards the pending writes and the local counts
        self._db_lock = threading.Lock()  # one user of the database connection at a time in this process
        self._pending_seen: dict[str, float] = {}
        self._pending_solved: dict[tuple[str, str], float] = {}
        self._written_seen: dict[str, float] = {}  # when each session's "last seen" was last written
        self._local_seen: dict[str, float] = {}  # this process's own view: used while the database is down
        self._local_solved: dict[str, set[str]] = {}
        self._problem: str | None = None
        self._next_try = 0.0
        self._last_beat = 0.0
        self._last_prune = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.engine: sa.Engine | None = None
        self._ready = False
        self._thread = None
        if start:
            self._connect()
            self._thread = threading.Thread(target=self._run, name="class-record-writer", daemon=True)
            self._thread.start()
            atexit.register(self.close)

    # --- what the app calls (cheap: memory only) ---------------------------------------------------

    def seen(self, session_id: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            self._local_seen[session_id] = now
            if now - self._written_seen.get(session_id, -1e18) >= SEEN_WRITE_EVERY_S:
                self._pending_seen[session_id] = now
            if len(self._local_seen) > MAX_PENDING:
                self._forget_local(now)

    def solved(self, session_id: str, challenge_id: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            self._local_solved.setdefault(challenge_id, set()).add(session_id)
            if len(self._pending_solved) < MAX_PENDING:
                self._pending_solved.setdefault((challenge_id, session_id), now)
        self._wake.set()  # a solve is rare and what the teacher watches: written now, not in a second

    # --- what the teacher view reads ------------------------------------------------------------

    def open_sessions(self, recent_s: float, now: float | None = None) -> int:
        """Sessions seen within ``recent_s`` on a replica that is up (this one, or heard from lately)."""
        now = time.time() if now is None else now
        rows = self._read(
            lambda c: c.execute(
                sa.select(sa.func.count())
                .select_from(
                    sessions_table.join(
                        replicas_table, sessions_table.c.replica == replicas_table.c.replica, isouter=True
                    )
                )
                .where(sessions_table.c.last_seen >= now - recent_s)
                .where(
                    sa.or_(sessions_table.c.replica == self.replica, replicas_table.c.last_beat >= now - REPLICA_GONE_S)
                )
            ).scalar_one()
        )
        if rows is None:
            with self._lock:
                return sum(t >= now - recent_s for t in self._local_seen.values())
        return rows

    def solved_counts(self) -> dict[str, int]:
        counts = self._read(
            lambda c: dict(
                c.execute(
                    sa.select(solved_table.c.challenge_id, sa.func.count())
                    .group_by(solved_table.c.challenge_id)
                    .order_by(solved_table.c.challenge_id)
                ).all()
            )
        )
        if counts is None:
            with self._lock:
                return {challenge: len(s) for challenge, s in sorted(self._local_solved.items())}
        return counts

    def replicas(self, now: float | None = None, within_s: float = 3600.0) -> list[dict]:
        """Every replica heard from within ``within_s``: id, up, seconds since heard from, its status."""
        now = time.time() if now is None else now
        rows = self._read(
            lambda c: c.execute(
                sa.select(replicas_table)
                .where(replicas_table.c.last_beat >= now - within_s)
                .order_by(replicas_table.c.started_at)
            ).all()
        )
        if rows is None:
            return [{"replica": self.replica, "up": True, "stopped": False, "heard_s": 0.0, "status": self._status()}]
        found = []
        for row in rows:
            try:
                status = json.loads(row.status)
            except ValueError:
                status = {}
            stopped = status.get("stopped_at") if isinstance(status, dict) else None
            heard = max(0.0, now - (stopped or row.last_beat))
            found.append(
                {
                    "replica": row.replica,
                    "up": row.replica == self.replica or (not stopped and heard < REPLICA_GONE_S),
                    "stopped": bool(stopped),
                    "heard_s": heard,
                    "status": status if isinstance(status, dict) else {},
                }
            )
        return found

    def problem(self) -> str | None:
        """Why the record is not being saved right now (None: it is)."""
        return self._problem

    def where(self) -> str:
        """Where the record is kept, the password hidden."""
        return shown_url(self.url)

    def in_memory(self) -> bool:
        """Whether the record lives in this process only (SQLite without a file): a restart starts it afresh."""
        try:
            parsed = engine_url(self.url)
        except Exception:  # noqa: BLE001 - an unparsable URL is refused when the record opens, not here
            return False
        return parsed.drivername.startswith("sqlite") and parsed.database in (None, "", ":memory:")

    def reset(self) -> None:
        """Forget every session and every solve (a new class); replicas keep their heartbeat."""
        with self._lock:
            self._pending_seen.clear()
            self._pending_solved.clear()
            self._written_seen.clear()
            self._local_seen.clear()
            self._local_solved.clear()
        self._read(lambda c: (c.execute(sa.delete(sessions_table)), c.execute(sa.delete(solved_table))))

    def close(self) -> None:
        """Write what is pending and say this replica is gone (called at exit)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        if self._ready:
            try:
                self._flush(final=True)
            except Exception as error:  # noqa: BLE001 - at exit, a failed last write is only logged
                log.warning("class record: the last write failed: %s", error)

    # --- the database side ------------------------------------------------------------------------

    def _connect(self) -> bool:
        """Open the database and bring its schema up to :data:`SCHEMA_VERSION`; False (and a problem) if not."""
        try:
            if self.engine is None:
                self.engine = make_engine(self.url)
            with self._db_lock:
                self._migrate()
            self._ready, self._problem = True, None
            return True
        except Exception as error:  # noqa: BLE001 - any failure is reported on the teacher view, not raised
            self._ready = False
            self._problem = f"the class record cannot be saved in {self.where()}: {_short(error)}"
            self._next_try = time.monotonic() + RETRY_S
            log.warning("%s (kept in this server's memory meanwhile)", self._problem)
            return False

    def _migrate(self, attempts: int = 3) -> None:
        """Run the missing migration steps, one process at a time: PostgreSQL's advisory lock, SQLite's write
        lock (its busy timeout makes the others wait). Replicas starting together may still race to create a
        table on SQLite: the loser tries again and finds it there."""
        for attempt in range(attempts):
            try:
                with self.engine.begin() as connection:
                    if connection.dialect.name == "postgresql":
                        connection.execute(sa.text("SELECT pg_advisory_xact_lock(73551)"))
                    version_table.create(connection, checkfirst=True)
                    found = connection.execute(sa.select(sa.func.max(version_table.c.version))).scalar()
                    found = found or 0
                    if found > SCHEMA_VERSION:
                        raise RuntimeError(
                            f"its schema is version {found}, newer than this server's "
                            f"{SCHEMA_VERSION}: update this server"
                        )
                    for version in range(found + 1, SCHEMA_VERSION + 1):
                        MIGRATIONS[version](connection)
                    if found < SCHEMA_VERSION:
                        connection.execute(sa.delete(version_table))
                        connection.execute(sa.insert(version_table), {"version": SCHEMA_VERSION})
                return
            except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError):
                if attempt == attempts - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(FLUSH_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self._ready and (time.monotonic() < self._next_try or not self._connect()):
                continue
            try:
                self._flush()
            except Exception as error:  # noqa: BLE001 - the database went away: keep counting, say so, retry
                self._ready = False
                self._problem = f"the class record cannot be saved in {self.where()}: {_short(error)}"
                self._next_try = time.monotonic() + RETRY_S
                log.warning("%s (kept in this server's memory meanwhile)", self._problem)

    def _flush(self, final: bool = False) -> None:
        """Write the pending page views and solves, the heartbeat when due, and prune old sessions."""
        now = time.time()
        with self._lock:
            seen, self._pending_seen = self._pending_seen, {}
            solved, self._pending_solved = self._pending_solved, {}
        beat = final or now - self._last_beat >= BEAT_S
        status = None
        if beat:
            try:
                status = self._status()
            except Exception as error:  # noqa: BLE001 - a status that fails is a status that says so
                status = {"error": _short(error)}
            # A clean stop says so: the teacher view shows the server as stopped, its sessions stop counting at once.
            status = json.dumps({**status, "stopped_at": now} if final else status)
        try:
            with self._db_lock, self.engine.begin() as connection:
                _upsert(
                    connection,
                    sessions_table,
                    [{"session_id": s, "replica": self.replica, "last_seen": t} for s, t in seen.items()],
                    ["session_id"],
                    ["replica", "last_seen"],
                )
                _upsert(
                    connection,
                    solved_table,
                    [{"challenge_id": c, "session_id": s, "solved_at": t} for (c, s), t in solved.items()],
                    ["challenge_id", "session_id"],
                    None,
                )
                if beat:
                    _upsert(
                        connection,
                        replicas_table,
                        [
                            {
                                "replica": self.replica,
                                "started_at": self.started_at,
                                "last_beat": now - REPLICA_GONE_S - 1 if final else now,
                                "status": status,
                            }
                        ],
                        ["replica"],
                        ["last_beat", "status"],
                    )
                if now - self._last_prune >= PRUNE_EVERY_S:
                    connection.execute(sa.delete(sessions_table).where(sessions_table.c.last_seen < now - 3600))
                    connection.execute(sa.delete(replicas_table).where(replicas_table.c.last_beat < now - 86400))
        except Exception:
            with self._lock:  # nothing is lost: what failed waits for the next try
                for s, t in seen.items():
                    self._pending_seen.setdefault(s, t)
                for key, t in solved.items():
                    if len(self._pending_solved) < MAX_PENDING:
                        self._pending_solved.setdefault(key, t)
            raise
        with self._lock:
            self._written_seen.update(seen)
            if len(self._written_seen) > MAX_PENDING:
                self._written_seen = {s: t for s, t in self._written_seen.items() if t >= now - 3600}
        if beat:
            self._last_beat = now
        if now - self._last_prune >= PRUNE_EVERY_S:
            self._last_prune = now

    def _read(self, query):
        """``query(connection)`` after writing what is pending; None when the database cannot answer."""
        if not self._ready and (time.monotonic() < self._next_try or not self._connect()):
            return None
        try:
            self._flush()
            with self._db_lock, self.engine.begin() as connection:
                return query(connection)
        except Exception as error:  # noqa: BLE001 - the teacher view shows this process's own counts instead
            self._ready = False
            self._problem = f"the class record cannot be read from {self.where()}: {_short(error)}"
            self._next_try = time.monotonic() + RETRY_S
            return None

    def _forget_local(self, now: float) -> None:
        for session_id in [s for s, t in self._local_seen.items() if t < now - 3600]:
            del self._local_seen[session_id]


def _short(error: BaseException) -> str:
    """An error's first line, without SQLAlchemy's link to its FAQ."""
    text = str(getattr(error, "orig", None) or error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]
