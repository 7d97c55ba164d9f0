"""Benchmark the app's responsiveness through Streamlit's AppTest (the real script, no browser).

    python -m tools.app_bench

Prints: the Layout page's rerun time after a preset change (median of 20, alternating two
presets) against a rerun with nothing changed, both measured in this run; and the time from
pressing Train to the first loss point, cold (first compile) and warm (cached program).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _rerun_times(at, change, n: int = 20) -> list[float]:
    times = []
    for i in range(n):
        change(at, i)
        start = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - start)
    return times


def _first_loss_s() -> float:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page("app_pages/train.py")
    at.run()
    start = time.perf_counter()
    at.button(key="train").click().run()
    elapsed = float("nan")
    while time.perf_counter() - start < 60:
        if any(m.label == "Last loss" and m.value != "—" for m in at.metric):
            elapsed = time.perf_counter() - start
            break
        time.sleep(0.05)
        at.run()
    at.button(key="stop").click().run()
    while at.button(key="train").disabled:  # wait for the job to end before the next session
        time.sleep(0.1)
        at.run()
    return elapsed


def main() -> int:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120).run()
    presets = ["fsdp", "tp"]
    idle = _rerun_times(at, lambda at, i: None)
    changed = _rerun_times(at, lambda at, i: at.selectbox(key="preset").select(presets[i % 2]))
    idle_s, changed_s = statistics.median(idle), statistics.median(changed)
    print(f"layout rerun, nothing changed:   median {idle_s * 1000:6.0f} ms (n=20)")
    print(f"layout rerun after preset change: median {changed_s * 1000:6.0f} ms (n=20)")
    print(f"preset change / idle rerun = {changed_s / idle_s:.2f}")
    cold = _first_loss_s()
    warm = _first_loss_s()
    print(f"Train → first loss point: cold {cold:.2f} s, warm {warm:.2f} s (warm/cold {warm / cold:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
