"""Load test: N students at once against ONE `streamlit run app.py` on 127.0.0.1 — or, with ``--url``, a
server already running, such as the load balancer in front of several replicas (deploy/compose.yaml).

Each session is its own browser context (own cookies, own Streamlit session) in one headless
Chromium. Session i picks its own configuration in the sidebar — a preset and a mesh shape no other
session has (a class's default axis names ``data``/``model``; ``--own-axes``: names ``d<i>``/``m<i>``
that no other session uses) — opens the Train page, sets its own step count,
waits for every session to be ready (the teacher says "now press Train"), clicks **Train** and
watches until "layout verified on N devices". More clicks than ``SHARDING_LAB_MAX_JOBS`` wait in
the server's queue (the time there is recorded); a "The server is busy" answer (the queue is full)
is retried after a short wait, a bounded number of times, and counts as success once a run is
accepted. Half the sessions edit while their run trains, as students do (``--no-edits``: none):
session i with i mod 4 = 1 changes the learning rate, i mod 4 = 3 the preset, once the first loss shows
(or, when the run was over before its page showed a loss — 1-2 s on a warm cache — right after its verdict);
the run must go on with what it started with, the page must say so, and the final check expects the
edited settings in the sidebar and the run's own steps and devices in the progress and the verdict.

Recorded per session: time from the first Train click to the first loss point ("Last loss" no
longer "—"), the same from the accepted click, the same as the tab's own page changed (a MutationObserver's
clock: the test's look at twenty busy tabs comes 0.2-2 s later), time to finish, busy retries, errors (an exception
box, "Traceback", an error alert such as "Training failed") and cross-talk (the page must show this
session's own mesh, preset, step count and device count — on the Train page caption, the progress
bar, the verdict, and the sidebar widgets at the end). The server's peak RSS (itself and its
children, sampled every 0.2 s) is reported with the table. Also, from the app's hidden tab mark, the server
that drew each of the session's pages: a session seen on two servers (its load balancer was not sticky) fails
the run. ``--solve``: after its run, three sessions in four solve a challenge; ``--teacher-token``: the
teacher view is read before and after, and its counts must have grown by exactly what the sessions solved.

    .venv/bin/python -m tools.loadtest --sessions 20 --steps 300
    .venv/bin/python -m tools.loadtest --sessions 8 --max-jobs 2 --json artifacts/load.json
    .venv/bin/python -m tools.loadtest --url http://127.0.0.1:8501/ --sessions 5   # a server already running
    .venv/bin/python -m tools.loadtest --url http://127.0.0.1:8080/ --sessions 40 --steps 100 --solve \
        --teacher-token "$SHARDING_LAB_TEACHER_TOKEN"                            # replicas behind nginx

Exit status 0 when every session finished with no error, no cross-talk and no change of server, and the
teacher's counts (when read) were exact; 1 otherwise. A session that does not finish is photographed, and one
whose page reported an error also leaves its tab's last websocket messages, decoded
(:mod:`tools.message_trace`), beside the picture in ``artifacts/load/``.
"""
