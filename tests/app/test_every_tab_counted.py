"""Every tab counted (issue 56.3): a tab is seen by the class record on every run of every page, whatever the page
does — draws to its end, stops early with ``st.stop()`` (a configuration it cannot run, a Plan page with no result
yet, a Compare waiting for its button), or raises. Before, the count sat at the end of app.py's run and every page
that stopped early was missing from the Teacher page. The whole app through AppTest, the record in a SQLite file
read back here with a connection of the test's own."""

import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

from sharding_lab.server import classroom, record
from tests.support import app_test

TOKEN = "counted-token-2c9e"


def open_tab(page: str | None, query: dict | None = None):
    """A new browser tab opened straight on ``page`` (None: the default page) with a link's ``query``."""
    at = app_test(120)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    if page is not None:
        at.switch_page(f"app_pages/{page}.py")
    return at.run()


def test_a_tab_is_counted_on_every_page_whatever_the_page_does(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDING_LAB_TEACHER_TOKEN", TOKEN)
    database = tmp_path / "class.sqlite3"
    own = record.Record(f"sqlite:///{database}", "replica-a")
    before = classroom.use_record(own)
    try:
        stopped_early = {
            # A link whose mesh needs 16 devices: each of these pages says why and ends its run there.
            "layout": open_tab(None, {"mesh": "4x4"}),
            "train": open_tab("train", {"mesh": "4x4"}),
            "lesson": open_tab("lesson", {"preset": "pp"}),
            "plan": open_tab("plan"),  # no search asked yet: the page ends after its form
            "compare": open_tab("compare"),  # nothing compared yet: ends after the button
        }
        assert all(
            any("cannot" in e.value or "Fix" in e.value for e in stopped_early[p].error) for p in ("layout", "train")
        )
        assert "plan_result" not in stopped_early["plan"].session_state
        drawn = {page: open_tab(page) for page in ("communication", "challenges")}
        tabs = {**stopped_early, **drawn}
        assert not any(at.exception for at in tabs.values()), {p: at.exception for p, at in tabs.items()}
        teacher = open_tab(None, {"teacher": TOKEN})
        teacher.switch_page("app_pages/teacher.py").run()
        # Seven students' tabs and the teacher's own.
        assert {m.label: m.value for m in teacher.metric}["Sessions open"] == str(len(tabs) + 1)
        # Each tab once, under its own opaque id, in the database itself (the Teacher page's read wrote it there).
        ids = {at.session_state["classroom_id"] for at in [*tabs.values(), teacher]}
        assert len(ids) == len(tabs) + 1
        with sa.create_engine(f"sqlite:///{database}").connect() as connection:
            rows = connection.execute(sa.select(record.sessions_table.c.session_id, record.sessions_table.c.replica))
            assert dict(rows.all()) == dict.fromkeys(ids, "replica-a")
    finally:
        classroom.use_record(before)
        own.close()


def poller():
    """A page's polling fragment alone: its reruns do not go through app.py (the Plan page following a search)."""
    import streamlit as st

    from sharding_lab.app.runtime import page_errors

    @st.fragment(run_every=60)
    @page_errors.guarded("Poll")
    def poll():
        st.write("still searching")

    poll()


def test_a_polling_fragment_counts_its_tab():
    """A tab that follows a search for minutes draws nothing but its fragment's polls: each poll counts it."""
    own = record.Record("sqlite://", "replica-a")
    before = classroom.use_record(own)
    try:
        at = AppTest.from_function(poller, default_timeout=60).run()
        assert not at.exception and [m.value for m in at.markdown] == ["still searching"]
        assert own.open_sessions(classroom.RECENT_S) == 1
        assert "classroom_id" in at.session_state
    finally:
        classroom.use_record(before)
        own.close()
