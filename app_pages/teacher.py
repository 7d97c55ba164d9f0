"""Teacher: how the class and the server are doing — counts only, nothing that names a student.

app.py puts this page in the navigation only for a session whose link carried the server's
``SHARDING_LAB_TEACHER_TOKEN`` (``?teacher=TOKEN``); without it the page does not exist.
"""

import os

import pandas as pd
import psutil
import streamlit as st

from sharding_lab.app import classroom, scheduler, warm

st.title("Teacher view")
st.caption("Counts only: no names, no session ids. This page refreshes itself every 5 seconds.")


@st.fragment(run_every=5.0)
def overview() -> None:
    training, queued = scheduler.load()
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "Sessions open",
        classroom.open_sessions(),
        help=f"Browser tabs that drew a page in the last {classroom.RECENT_S / 60:.0f} minutes.",
    )
    c2.metric(
        "Runs training",
        f"{training} / {scheduler.MAX_JOBS}",
        help="SHARDING_LAB_MAX_JOBS runs train at once; the others wait in the queue.",
    )
    c3.metric("Runs queued", queued)
    server = psutil.Process()
    memory = psutil.virtual_memory()
    load_1min = os.getloadavg()[0]
    cores = psutil.cpu_count() or 1
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "CPU load (1 min)",
        f"{load_1min:.1f} on {cores} cores",
        help="Above the core count, runs and pages wait for each other.",
    )
    c2.metric("Server memory", f"{server.memory_info().rss / 2**20:,.0f} MB")
    c3.metric("Machine memory free", f"{memory.available / 2**30:.1f} of {memory.total / 2**30:.1f} GB")
    warming = warm.progress()
    if warming:
        st.subheader("Compilation cache")
        state = "stopped" if warming.get("stopped") else "warming" if warming.get("running") else "warm"
        st.progress(
            min(1.0, warming["done"] / max(1, warming["total"])),
            text=f"{state}: {warming['done']} of {warming['total']} layouts a class clicks compiled "
            f"ahead of time ({warming['skipped']} could not run) in {warming['seconds']:.0f} s"
            + (f" — now {warming['current']}" if warming.get("current") else ""),
        )
        if warming.get("note"):
            st.caption(warming["note"].capitalize() + ": this server warmed the default layout only.")
        st.caption(
            "Compiled at the lowest priority, and paused whenever a student's run trains or waits. "
            "SHARDING_LAB_WARM=default keeps only the default layout; the cache lives in "
            "SHARDING_LAB_CACHE_DIR."
        )
        if warming.get("running") and st.button("Stop warming", key="stop_warming"):
            warm.stop_warming()
    st.subheader("Challenges")
    counts = classroom.solved_counts()
    if not counts:
        st.info("No challenges yet: once students solve challenges, how many solved each shows here.")
    else:
        st.dataframe(
            pd.DataFrame({"challenge": list(counts), "sessions that solved it": list(counts.values())}),
            hide_index=True,
            key="teacher_challenges",
        )


overview()
