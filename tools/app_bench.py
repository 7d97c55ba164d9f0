"""Benchmark the app's responsiveness through Streamlit's AppTest (the real script, no browser).

    python -m tools.app_bench
    python -m tools.app_bench --baseline ../old-checkout   # also time another checkout's Layout page
    python -m tools.app_bench --scale                      # also 64 devices and a 13-parameter model

Prints: the Layout page's rerun time after a preset change (median of 20, alternating two
presets) against a rerun with nothing changed, both measured in this run; and the time from
pressing Train to the first loss point, cold (first compile) and warm (cached program). With
``--baseline DIR``, the Layout timings of DIR's ``app.py`` (an older checkout, say) are measured in
the same run, alternating with this checkout's in fresh processes, and the ratio is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def layout_times(app: str = APP, query: dict | None = None) -> tuple[float, float]:
    """(median idle rerun, median rerun after a preset change) of the Layout page, in seconds;
    ``query``: a share link's parameters to open it with (a mesh, a model size)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(app, default_timeout=120)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    presets = ["fsdp", "tp"]
    _rerun_times(at, lambda at, i: at.selectbox(key="preset").select(presets[i % 2]), n=4)  # warm caches
    idle = _rerun_times(at, lambda at, i: None)
    changed = _rerun_times(at, lambda at, i: at.selectbox(key="preset").select(presets[i % 2]))
    return statistics.median(idle), statistics.median(changed)


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import sharding_lab  # forces the host devices first
sys.path.insert(0, {here!r})
from tools.app_bench import layout_times
print(json.dumps(layout_times({app!r}, {query!r})))
"""


def _layout_times_in(root: Path, query: dict | None = None, devices: int = 8) -> tuple[float, float]:
    """Layout timings of the checkout at ``root``, in a fresh process started there."""
    code = _CHILD.format(root=str(root), here=str(Path(APP).parent), app=str(root / "app.py"), query=query)
    env = dict(os.environ, SHARDING_LAB_DEVICES=str(devices))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600, env=env)
    if done.returncode:
        raise SystemExit(f"baseline run failed in {root}:\n{done.stderr[-2000:]}")
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.app_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout whose Layout page to time too")
    parser.add_argument(
        "--scale", action="store_true", help="also time the Layout page with 64 devices (8×8) and a 13-parameter model"
    )
    args = parser.parse_args(argv)
    if args.scale:
        idle, changed = _layout_times_in(Path(APP).parent, {"mesh": "8x8", "hidden": "5", "dmid": "64"}, devices=64)
        print(
            f"64 devices (8×8), 13 parameters: layout rerun idle {idle * 1000:.0f} ms, "
            f"after a preset change {changed * 1000:.0f} ms"
        )
    if args.baseline:
        rounds = {"this": [], "baseline": []}
        for _ in range(2):  # alternate, so both see the same machine load
            rounds["baseline"].append(_layout_times_in(args.baseline.resolve()))
            rounds["this"].append(_layout_times_in(Path(APP).parent))
        medians = {k: statistics.median(c for _, c in v) for k, v in rounds.items()}
        for name, times in rounds.items():
            print(
                f"{name:>8}: layout rerun after preset change "
                + ", ".join(f"{c * 1000:.0f} ms" for _, c in times)
                + "; idle "
                + ", ".join(f"{i * 1000:.0f} ms" for i, _ in times)
            )
        print(f"preset-change rerun, baseline / this = {medians['baseline'] / medians['this']:.2f}")
    idle_s, changed_s = layout_times()
    print(f"layout rerun, nothing changed:   median {idle_s * 1000:6.0f} ms (n=20)")
    print(f"layout rerun after preset change: median {changed_s * 1000:6.0f} ms (n=20)")
    print(f"preset change / idle rerun = {changed_s / idle_s:.2f}")
    cold = _first_loss_s()
    warm = _first_loss_s()
    print(f"Train → first loss point: cold {cold:.2f} s, warm {warm:.2f} s (warm/cold {warm / cold:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
