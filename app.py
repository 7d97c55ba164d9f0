"""Sharding Lab: see how JAX shards a Flax NNX model across devices, by clicking."""

import streamlit as st

from sharding_lab import settings
from sharding_lab.app.runtime import closed_tabs, compile_queue, fragment_race, page_errors
from sharding_lab.app.state import session, tabs
from sharding_lab.server import activity, classroom, compile_cache, warm


def main() -> None:
    """One run of the app for one browser tab."""
    # Counted for the teacher view on every run, whatever the page does: a page that ends early (st.stop() on a
    # configuration it cannot run, the Plan page while it has no result), raises or moves to another page still
    # drew for an open tab. An opaque id per browser tab, nothing else about it.
    with tabs.counted():
        draw()
    # Once per server process, after its first page run: what a class clicks, compiled in the server's idle time
    # (SHARDING_LAB_WARM; started before the page, its first compile ran beside the first pages as an equal).
    if settings.WARM.on():
        warm.warm_in_background()


def draw() -> None:
    """The page this run draws, with the sidebar and the navigation around it."""
    st.set_page_config(page_title="Sharding Lab", page_icon=":material/grid_view:", layout="wide")
    fragment_race.install()  # the Train page's polls must not cut a full run's end off (see the module)
    closed_tabs.install()  # a tab closed while a message was on its way is not a traceback in the server's log
    # Once per server process: compiled programs from disk (SHARDING_LAB_CACHE_DIR).
    compile_cache.enable_compilation_cache()
    session.init_state()
    tabs.tab_id()  # this tab's opaque id, from its first run on (the challenges page counts solves by it)
    # The teacher view exists for this session only if its link carried the server's token, once. The token is
    # read on the first run and taken out of the address bar at once (a teacher projects the page; a link copied
    # from it is a student's): the session keeps the answer, not the token.
    if "teacher" in st.query_params:
        given = st.query_params.get_all("teacher")
        del st.query_params["teacher"]
        if not st.session_state.get("teacher_view"):
            st.session_state.teacher_view = len(given) == 1 and classroom.teacher_token_ok(
                given[0], settings.TEACHER_TOKEN.raw() or None
            )
    st.session_state.setdefault("teacher_view", False)
    with page_errors.caught("the link"):  # what a link or a tab's mark brings is parsed here, before any page
        session.restore_link()
        tabs.restore_moved()  # a tab whose server stopped (a replica, a restart): its settings, from its mark
    pages = [
        st.Page("app_pages/layout.py", title="Layout", icon=":material/grid_view:", default=True),
        st.Page("app_pages/train.py", title="Train", icon=":material/show_chart:"),
        st.Page("app_pages/communication.py", title="Communication", icon=":material/swap_horiz:"),
        st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page("app_pages/plan.py", title="Plan", icon=":material/travel_explore:"),
        st.Page("app_pages/lesson.py", title="Lesson", icon=":material/school:"),
        st.Page("app_pages/challenges.py", title="Challenges", icon=":material/emoji_events:"),
    ]
    if st.session_state.teacher_view:
        pages.append(st.Page("app_pages/teacher.py", title="Teacher", icon=":material/groups:", url_path="teacher"))
    page = st.navigation(pages)
    session.carry_settings(page)
    tabs.moved_notice(classroom.replica_id())
    # The class warm-up waits for the server's idle time; a page's exception becomes a sentence with an incident id;
    # a page's compile of a big program waits for its turn in the server's compile queue, its place shown.
    with activity.page_run(), page_errors.caught(page.title), compile_queue.shown():
        page.run()
    session.page_drawn(page)  # not after st.stop() or a rerun: the page's next run copies the settings again
    # After the page, with this run's settings: the mark the tab keeps, in case this server stops.
    tabs.keep_mark(classroom.replica_id())


# Streamlit runs this script as ``__main__``. A process that multiprocessing spawns from a page's thread (the Plan
# search's compile workers) re-runs it as ``__mp_main__`` before its own work: it must not serve a page, count a
# session, register with the class record or warm the cache.
if __name__ == "__main__":
    main()
