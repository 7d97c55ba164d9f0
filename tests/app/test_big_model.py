"""Issue 50: Llama 3 70B in a class's server. Train refused it only after compiling the whole step to show XLA's
memory (162 s, 1.56 → 3.38 GB); the refusal now comes from the plan's own arithmetic, in seconds."""

import time

import psutil

from tests.support import app_test

# Every parameter on every device: its share of memory is plain to check against the model card.
LLAMA_70B = {"model": "transformer", "size": "llama3-70b", "preset": "replicated"}


def test_train_refuses_llama3_70b_in_seconds_from_the_plan_s_arithmetic():
    warm = app_test(120)  # a server that serves a class has its pages imported: so does this process
    warm.switch_page("app_pages/train.py")
    warm.run()
    at = app_test(60)
    at.query_params.update(LLAMA_70B)
    at.switch_page("app_pages/train.py")
    rss = psutil.Process().memory_info().rss
    started = time.monotonic()
    at.run()
    seconds = time.monotonic() - started
    grown = psutil.Process().memory_info().rss - rss
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert any("Too big to train here" in e and "TB across 8 devices" in e for e in errors), errors
    assert seconds < 10, f"{seconds:.1f} s"
    assert grown < 500 * 2**20, f"{grown / 2**20:.0f} MB"
    caption = next(c.value for c in at.caption if "The plan's own arithmetic" in c.value)
    # the card's 70.6 billion parameters × 4 bytes (f32) × 8 devices = 2.26 TB
    assert "parameters 2.26 TB" in caption and "gradients 2.26 TB" in caption
    assert at.button(key="train_ask_xla")  # XLA's answer only when asked: minutes for this size
