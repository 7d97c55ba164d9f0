"""Teacher: how the class and the server are doing — counts only, nothing that names a student.

app.py puts this page in the navigation only for a session whose link carried the server's
``SHARDING_LAB_TEACHER_TOKEN`` (``?teacher=TOKEN``); without it the page does not exist.
"""

import os
import time

import pandas as pd
import psutil
import streamlit as st

from sharding_lab.app.runtime import page_errors
from sharding_lab.server import admission, classroom, idle_process, page_compiles, priority, record, slots, warm
from sharding_lab.server.incidents import INCIDENTS
from sharding_lab.server.searches import SEARCHES, max_searches
from sharding_lab.units import format_bytes

st.title("Teacher view")
st.caption("Counts only: no names, no session ids. This page refreshes itself every 5 seconds.")


@st.fragment(run_every=5.0)
@page_errors.guarded("Teacher")
def overview() -> None:
    class_metrics()
    warming_view()
    challenges_view()
    servers_view()
    incidents_view()


def class_metrics() -> None:
    """Sessions, runs, the server's CPU and memory, searches and big compiles: three rows of figures."""
    training, queued = slots.load()
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "Sessions open",
        classroom.open_sessions(),
        help=f"Browser tabs that drew a page in the last {classroom.RECENT_S / 60:.0f} minutes, on every server "
        "of the class that is up.",
    )
    c2.metric(
        "Runs training",
        f"{training} / {slots.MAX_JOBS}",
        help="SHARDING_LAB_MAX_JOBS runs train at once; the others wait in the queue.",
    )
    c3.metric("Runs queued", queued)
    memory = psutil.virtual_memory()
    load_1min = os.getloadavg()[0]
    cores = psutil.cpu_count() or 1
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "CPU load (1 min)",
        f"{load_1min:.1f} on {cores} cores",
        help="Above the core count, runs and pages wait for each other.",
    )
    c2.metric(
        "Server memory",
        f"{format_bytes(admission.server_rss_bytes())} of {format_bytes(admission.server_bound_bytes())}",
        help="The server and its worker processes (resident memory), against the bound it should stay under "
        f"(SHARDING_LAB_SERVER_MEMORY_MB, set in MiB). A run that needs more than one session's share, "
        f"{format_bytes(admission.session_share_bytes())} (SHARDING_LAB_SESSION_MEMORY_MB), is refused before "
        "anything is allocated. Bytes in SI units here as everywhere in the lab: 1 MB = 10⁶ bytes, 1 GB = 10⁹.",
    )
    c3.metric("Machine memory free", f"{format_bytes(memory.available)} of {format_bytes(memory.total)}")
    searching, waiting = SEARCHES.counts()
    c1, c2, _ = st.columns(3)
    c1.metric(
        "Plan searches",
        f"{searching} running, {waiting} queued",
        help=f"SHARDING_LAB_MAX_SEARCHES ({max_searches()}) run at once; the same question from several tabs is "
        "one search.",
    )
    compiling, queued_compiles = page_compiles.load()
    c2.metric(
        "Big compiles",
        f"{compiling} running, {queued_compiles} queued",
        help=f"Pages' compiles of big programs (inputs of {format_bytes(page_compiles.big_bytes())} or more): "
        f"SHARDING_LAB_MAX_PAGE_COMPILES ({page_compiles.limit()}) at once, the rest wait in one queue, each page "
        "shown its place; a large model's Plan search waits in it too before it starts.",
    )


def warming_view() -> None:
    """How far the compilation cache is warmed, and the button that stops it."""
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
            "What a class clicks first (the default layout, the MLP on two-axis meshes) is compiled by the server "
            "itself, the rest by a separate process"
            + (child_process(warming) if warming.get("running") else "")
            + " at the lowest CPU priority, and only while the server is idle: paused whenever a student's run "
            f"trains or waits, a layout a student reads waits to be compiled, or a page ran in the last "
            f"{priority.IDLE_BEFORE_WARMING_S:.0f} s. SHARDING_LAB_WARM=default keeps only the default layout; the "
            "cache lives in SHARDING_LAB_CACHE_DIR."
        )
        if warming.get("running") and st.button("Stop warming", key="stop_warming"):
            warm.stop_warming()


def challenges_view() -> None:
    """How many sessions solved each challenge."""
    st.subheader("Challenges")
    counts = classroom.solved_counts()
    if not counts:
        st.info("No challenges yet: once students solve challenges, how many solved each shows here.")
    else:
        st.table(
            pd.DataFrame({"challenge": list(counts), "sessions that solved it": list(counts.values())}).set_index(
                "challenge"
            )
        )


def incidents_view() -> None:
    """The recent errors students met on this server: each one's id, which their page showed them."""
    recent = INCIDENTS.recent()
    if not recent:
        return
    st.subheader("Errors")
    st.table(
        pd.DataFrame(
            [
                {
                    "incident": incident.id,
                    "when": time.strftime("%H:%M:%S", time.localtime(incident.when)),
                    "page": incident.where,
                    "error": f"{incident.kind}: {incident.message}",
                }
                for incident in reversed(recent)
            ]
        ).set_index("incident")
    )
    st.caption(
        f"{INCIDENTS.total} on this server since it started, the last {len(recent)} above, newest first. A student "
        "saw a sentence with the incident's id; the server's log has its traceback under the same id."
    )


def child_process(warming: dict) -> str:
    """The warm-up's child process as the caption names it: its id, its memory, whether it is paused now."""
    if not warming.get("child"):  # not started yet (psutil.Process(None) would be this server)
        return ""
    try:
        memory = psutil.Process(warming["child"]).memory_info().rss
    except psutil.Error:  # just ended
        return ""
    paused = ", paused now" if warming.get("paused") else ""
    released = (
        f"; ended {warming['releases']} time(s) to give its memory back, last {warming['released']}"
        if warming.get("releases")
        else ""
    )
    bound = format_bytes(idle_process.MEMORY_BOUND_BYTES)
    return (
        f" (process {warming['child']}, {format_bytes(memory)} of at most {bound}{paused}; ended when over it or "
        f"paused over {idle_process.RELEASE_IDLE_S:.0f} s, and a fresh one goes on{released})"
    )


def warm_state(status: dict) -> str:
    """A server's warm-up in a few words, from its heartbeat."""
    warming = status.get("warm") or {}
    if not warming:
        return "-"
    state = "stopped" if warming.get("stopped") else "warming" if warming.get("running") else "warm"
    return f"{state}: {warming.get('done', 0)} of {warming.get('total', 0)}"


def servers_view() -> None:
    """Every server of the class (one, or the replicas behind a load balancer) and where the record is kept."""
    problem = classroom.problem()
    if problem:
        st.warning(
            f"The counts above are this server's own: {problem}. It tries again every {record.RETRY_S:.0f} s; "
            "the class goes on meanwhile.",
            icon=":material/database:",
        )
    found = classroom.servers()
    if len(found) > 1 or any(not s["up"] for s in found):
        st.subheader("Servers")
        this = classroom.replica_id()
        rows = [
            {
                "server": s["replica"] + (" (this page)" if s["replica"] == this else ""),
                "state": "up"
                if s["up"]
                else f"stopped {s['heard_s']:.0f} s ago"
                if s["stopped"]
                else f"not heard from for {s['heard_s']:.0f} s",
                "runs training": f"{s['status'].get('training', '?')} / {s['status'].get('max_jobs', '?')}",
                "runs queued": s["status"].get("queued", "?"),
                "memory": server_memory(s["status"]),
                "compilation cache": warm_state(s["status"]),
            }
            for s in found
        ]
        st.table(pd.DataFrame(rows).set_index("server"))
        st.caption(
            "Each server's own figures, from its last heartbeat (every few seconds; a server that has drawn no page "
            "since it started has not sent one yet). When a server stops, the load balancer sends its students to "
            "the others, where their pages restore their settings."
        )
    kept = classroom.record()
    st.caption(
        "The class record is kept in this server's memory (SHARDING_LAB_DATABASE_URL is sqlite://): a restart "
        "starts it afresh."
        if kept.in_memory()
        else f"The class record is kept in {kept.where()}: a restart keeps it."
    )


def server_memory(status: dict) -> str:
    """A server's resident memory from its heartbeat (in bytes; a server of older code sent MiB)."""
    if "rss_bytes" in status:
        return format_bytes(status["rss_bytes"])
    return format_bytes(status["rss_mb"] * 2**20) if "rss_mb" in status else "?"


@st.dialog("Start a new class")
def new_class() -> None:
    st.write(
        "Forget which sessions were here and what they solved, on every server of this class. This cannot be undone."
    )
    if st.button("Forget the counts", type="primary", key="new_class_confirm"):
        classroom.reset()
        st.rerun()


overview()
if st.button("Start a new class…", icon=":material/restart_alt:", key="new_class"):
    new_class()
