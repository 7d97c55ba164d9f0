"""The server's background work leaves XLA's thread pools — which compile every program and run every training
step, the students' included — at the server's priority. The pools start with the priority of the thread
that first needs them; the warm-up thread used to lower itself to nice 19 first, and every pool it started
stayed at nice 19 for the server's life (measured: the two ``llvm-worker`` threads, and the 8 ``tf_XLAEigen``
ones whenever the warm-up was the first to touch JAX)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import ROOT

# A fresh process (JAX not started yet) where the server's warm-up thread is the first to use JAX, as on a
# server whose warm-up starts before any page compiles: it compiles a layout's first run (the model's
# creation, the training chunk, the prediction, the layout check). Then every thread of the process is
# listed with its niceness (field 19 of /proc/<pid>/task/<tid>/stat).
SCRIPT = """
import json, os
server = os.nice(0)  # the server's own priority: 0, or more where it was started under `nice` (as tests are)
import sharding_lab as sl
from sharding_lab.server import warm

config = sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("data", "model")), preset="fsdp")
warm._warm_thread([config]).join(300)
assert warm.progress()["done"] == 1 and not warm.progress().get("skipped"), warm.progress()
threads = []
for tid in os.listdir(f"/proc/{os.getpid()}/task"):
    try:
        name = open(f"/proc/{os.getpid()}/task/{tid}/comm").read().strip()
        nice = int(open(f"/proc/{os.getpid()}/task/{tid}/stat").read().rsplit(")", 1)[1].split()[16])
    except FileNotFoundError:  # a thread that ended since the listing
        continue
    threads.append([name, nice])
print(json.dumps([server, threads]))
"""


def test_the_warm_up_leaves_the_xla_thread_pools_it_starts_at_the_servers_priority():
    env = {**os.environ, "SHARDING_LAB_DEVICES": "8", "SHARDING_LAB_CACHE_DIR": "off", "SHARDING_LAB_WARM": "on"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    server, threads = json.loads(done.stdout.strip().splitlines()[-1])
    names = {name.rstrip("0123456789") for name, _ in threads}
    assert {"tf_XLAEigen", "llvm-worker-"} <= names, f"XLA's pools were not started: {sorted(names)}"
    assert [t for t in threads if t[1] != server] == [], f"a thread runs below the server's priority (nice {server})"
