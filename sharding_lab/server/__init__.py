"""The class server: what runs behind the pages while a class uses the app, with no Streamlit in it.

:mod:`.slots` (how many runs train at once, and the queue for the rest), :mod:`.jobs` (a training run in a
background thread), :mod:`.precompile` (the layout a learner is reading, compiled before Train is pressed),
:mod:`.warm` with :mod:`.warm_child` and :mod:`.idle_process` (the class warm-up, in a child process at the
lowest priority), :mod:`.activity` (whether a learner's page is busy), :mod:`.background` (the threads stopped
before the interpreter exits), :mod:`.record` (the class record in SQL), :mod:`.incidents` (errors
that reached a page, their tracebacks kept in the log) and :mod:`.classroom` (the teacher's view of all of it).
The pages in ``app_pages/`` and the helpers in :mod:`sharding_lab.app` call it; it calls nothing of theirs.
"""
