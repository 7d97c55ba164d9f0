"""The class server: what runs behind the pages while a class uses the app, with no Streamlit in it.

:mod:`.slots` (how many runs train at once, and the queue for the rest), :mod:`.priority` (who compiles first: a
learner's run, the layout being read, the class warm-up), :mod:`.jobs` (a training run in a background thread),
:mod:`.precompile` (the layout a learner is reading, compiled before Train is pressed), :mod:`.compile_cache`
(JAX's persistent compilation cache), :mod:`.warm` with :mod:`.warm_child` and :mod:`.idle_process` (the class
warm-up, in a child process at the lowest priority), :mod:`.activity` (when learners last asked for a page),
:mod:`.background` (the threads stopped before the interpreter exits), :mod:`.admission` (a run's share of the
server's memory), :mod:`.searches` (the Plan page's shared searches), :mod:`.page_compiles` (one queue for the big
compiles pages start), :mod:`.incidents` (errors that reached a page), :mod:`.record` (the class record in SQL)
and :mod:`.classroom` (the teacher's view of all of it).

The pages in ``app_pages/`` and the helpers in :mod:`sharding_lab.app` call the modules' functions; nothing here
calls theirs. A module that keeps state keeps it in one object, its ``SERVER`` (slots, precompile, page runs,
background threads, the warm-up): the functions use it, and a test may put a fresh one in its place
(``monkeypatch.setattr(slots, "SERVER", slots.Slots(max_jobs=1))``) instead of reloading the module.
"""

# What the pages (app.py, app_pages/, sharding_lab/app/) may use of the server, module by module: its face towards
# the pages, declared here and checked against their imports and attribute reads (tests/core/test_boundary.py). A
# page that needs something new adds it here, where a reader of the server sees what its callers rely on.
FOR_PAGES = {
    "activity": ("page_run",),
    "admission": ("admit", "plan_refusal", "server_bound_bytes", "server_rss_bytes", "session_share_bytes"),
    "classroom": (
        "RECENT_S", "open_sessions", "problem", "record", "record_solved", "replica_id", "reset", "seen", "servers",
        "solved_counts", "teacher_token_ok",
    ),
    "compile_cache": ("enable_compilation_cache",),
    "idle_process": ("MEMORY_BOUND_BYTES", "RELEASE_IDLE_S"),
    "incidents": ("INCIDENTS",),
    "jobs": ("DistributedJob", "TrainingJob"),
    "page_compiles": ("big_bytes", "limit", "load", "queued", "waiting_sentence"),
    "precompile": ("forget", "request"),
    "priority": ("IDLE_BEFORE_WARMING_S",),
    "record": ("RETRY_S",),
    "searches": ("SEARCHES", "SharedSearch", "max_searches"),
    "slots": ("Busy", "MAX_JOBS", "load", "poll_interval", "slot"),
    "warm": ("progress", "stop_warming", "warm_in_background"),
}  # fmt: skip
