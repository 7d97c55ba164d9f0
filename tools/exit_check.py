"""Render every page of the app through Streamlit's AppTest, press Train, and end: the process must exit 0.

    SHARDING_LAB_WARM=on python -m tools.exit_check

What a server stopped mid-class, or a script that ran the app, does: it ends while the background warm-up may
still be compiling and a training run is still training. Before :mod:`sharding_lab.server.background` such a
process aborted at exit (SIGABRT 134 or SIGSEGV 139: daemon threads torn down inside XLA).
tests/app/test_exit.py runs it 3 times (on one compilation cache). Prints the pages it rendered and the
background threads alive at the end of the script (the ones interpreter exit has to stop and join).
"""

from __future__ import annotations

import os
import sys
import threading

PAGES = [
    "app_pages/layout.py",
    "app_pages/train.py",
    "app_pages/communication.py",
    "app_pages/compare.py",
    "app_pages/plan.py",
    "app_pages/lesson.py",
    "app_pages/challenges.py",
    "app_pages/teacher.py",
]
TOKEN = "exit-check"


def train(at) -> None:
    """Press Train on the Train page for the longest run the page allows."""
    at.number_input(key="steps").set_value(20_000).run()
    at.button(key="train").click().run()


def _job_alive() -> bool:
    return any(t.name == "sharding-lab-job" and t.is_alive() for t in threading.enumerate())


def main() -> int:
    from streamlit.testing.v1 import AppTest

    os.environ["SHARDING_LAB_TEACHER_TOKEN"] = TOKEN  # the Teacher page is one of the pages
    root = os.environ.get("ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    at = AppTest.from_file(os.path.join(root, "app.py"), default_timeout=300)
    at.query_params["teacher"] = TOKEN
    at.run()
    rendered = []
    for page in PAGES:
        at.switch_page(page).run()
        if at.exception:
            print(f"{page}: {at.exception[0].value}", file=sys.stderr)
            return 2
        rendered.append(page)
        if page.endswith("train.py"):  # a long run, training in the background while the other pages render
            train(at)
    if not _job_alive():  # that run ended meanwhile (the seed's 20,000 steps take seconds once compiled): one
        at.switch_page("app_pages/train.py").run()  # more, still training when the process ends
        train(at)
    names = sorted(t.name for t in threading.enumerate() if t.name.startswith("sharding-lab"))
    print(f"rendered {len(rendered)} pages; background at the end: {', '.join(names) or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
