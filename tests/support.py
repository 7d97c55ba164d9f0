"""What many tests share: where the checkout is, the app opened in Streamlit's AppTest, and Debian's Chromium
for the browser tests (with the marker that skips them where it is not installed)."""

import contextlib
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.browser import CHROMIUM, CHROMIUM_FLAGS

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
SHOTS = ROOT / "artifacts" / "screenshots"  # browser screenshots, for a person to look at

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")

__all__ = ["APP", "CHROMIUM", "CHROMIUM_FLAGS", "ROOT", "SHOTS", "all_slots_held", "app_test", "needs_chromium", "poll"]


def app_test(timeout: float = 120) -> AppTest:
    """The whole app (``app.py``: its sidebar, navigation and pages) in AppTest, not yet run."""
    return AppTest.from_file(str(APP), default_timeout=timeout)


def poll(read, expected, timeout_s: float = 30):
    """``read()`` once it returns ``expected``, or its last value after ``timeout_s``: under a loaded
    machine a chart can be redrawn a moment after the text the test waited for."""
    deadline = time.monotonic() + timeout_s
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.25)
    return value


@contextlib.contextmanager
def all_slots_held():
    """Every training slot of this process's scheduler held here, so new runs queue; yields the list of slots
    held (clear it when they are handed to runs) and gives back what it still holds."""
    from sharding_lab.server import slots

    held = []
    try:
        while True:
            slots.take_slot()
            held.append(1)
    except slots.Busy:
        pass
    try:
        yield held
    finally:
        for _ in held:
            slots.release_slot()


def made_prediction(chip: str = "h100", compute_s=0.0, memory_s=0.0, collectives=()):
    """A :class:`sharding_lab.cost.Prediction` with the given terms (seconds) on ``chip`` and ``collectives`` (rows
    of count, bytes, seconds, latency_s), for a sentence or a figure that reads one: the terms are the class's own
    properties, so the figures drawn are what a compiled step's would be."""
    from sharding_lab.cost import Prediction
    from sharding_lab.hardware.chips import chip as get_chip

    on = get_chip(chip)
    one = {"op": "all-reduce", "axes": ("data",), "group_size": 8, "link": "ICI", "bytes_per_s": 1e11}
    comm = [one | {"wire_bytes": row.get("bytes", 0.0), "seconds": 0.0, "latency_s": 0.0} | row for row in collectives]
    flops, hbm_bytes = compute_s * on.flops("bf16")[0], memory_s * on.hbm_bytes_per_s
    return Prediction(on, "bf16", (8,), ("data",), flops, hbm_bytes, 0.0, {}, comm, [(8,)], False, [])
