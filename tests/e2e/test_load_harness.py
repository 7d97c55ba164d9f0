"""The load test's own instruments: the browsers' share of the cores, and the decoded message trace a tab
leaves when its page reports an error. A load test that mis-measures itself sent a whole day's numbers
astray (docs/classroom-timing.md, "What the day's earlier measurements missed")."""

import asyncio
from pathlib import Path

import psutil
import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from tests.browser import CHROMIUM, CHROMIUM_FLAGS
from tests.support import needs_chromium
from tools.loadtest.machine import nice_browser_session
from tools.message_trace import MessageTrace, describe

AUTOGROUPS = Path("/proc/self/autogroup").exists()


@needs_chromium
@pytest.mark.skipif(not AUTOGROUPS, reason="this kernel has no autogroup scheduling: niceness alone counts")
def test_the_browsers_session_gets_the_niceness_asked_for():
    """Playwright starts Chromium in a session of its own: its autogroup, not its processes' niceness, sets its
    share of the cores against a server in another session."""

    async def launch_and_read() -> tuple[list[str], set[str]]:
        from playwright.async_api import async_playwright

        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            notes = nice_browser_session(7)
            groups = set()
            for child in psutil.Process().children(recursive=True):  # this test's browser, not another test's
                try:
                    if child.name() == "chromium":
                        groups.add(open(f"/proc/{child.pid}/autogroup").read().strip())
                except (psutil.Error, OSError):
                    continue
            await browser.close()
            return notes, groups

    notes, groups = asyncio.run(launch_and_read())
    assert notes == []
    assert groups and all(group.endswith("nice 7") for group in groups), groups
    assert not open("/proc/self/autogroup").read().strip().endswith("nice 7")  # this process's own session: untouched


def test_a_trace_line_names_the_run_the_fragment_and_the_path():
    msg = ForwardMsg()
    msg.metadata.delta_path[:] = [0, 3, 2]
    msg.delta.new_element.markdown.body = "x"
    msg.delta.fragment_id = "1a76b3f2ffff"
    assert describe("<", msg.SerializeToString()) == "delta [0, 3, 2] new_element:markdown frag=1a76b3f2 run="
    done = ForwardMsg()
    done.script_finished = ForwardMsg.FINISHED_SUCCESSFULLY
    done.metadata.run.script_run_id = "69ec9e9e-run"
    assert describe("<", done.SerializeToString()) == "script_finished FINISHED_SUCCESSFULLY run=69ec9e9e"
    assert describe("<", b"\xff\xff").startswith("undecodable")


def test_a_trace_line_shows_the_typed_settings_as_sent_and_as_drawn():
    """A lost edit is read from the trace: what value the browser sent, and what the server drew (``set``: a
    value the server wrote, which the browser's box takes over its own)."""
    drawn = ForwardMsg()
    drawn.metadata.delta_path[:] = [1, 0, 3]
    drawn.delta.new_element.number_input.id = "$$ID-b304c82b-size_0"
    drawn.delta.new_element.number_input.value = 2
    drawn.delta.new_element.number_input.set_value = True
    assert describe("<", drawn.SerializeToString()) == "delta [1, 0, 3] new_element:number_input size_0=2.0 set run="
    sent = BackMsg()
    for key, value in (("size_0", 1.0), ("rule_batch", 0.0)):  # a setting the load test does not type: left out
        sent.rerun_script.widget_states.widgets.add(id=f"$$ID-0f3a-{key}", double_value=value)
    assert describe(">", sent.SerializeToString()) == "rerun_script widgets=2 page= size_0=1.0"


def test_a_trace_keeps_the_last_frames_and_writes_them(tmp_path):
    trace = MessageTrace(keep=2)
    msg = ForwardMsg()
    msg.script_finished = ForwardMsg.FINISHED_EARLY_FOR_RERUN
    for _ in range(3):
        trace.frames.append((trace.started, "<", msg.SerializeToString()))
    trace.write(tmp_path / "t.txt", header="page error: Bad delta path index 3")
    lines = (tmp_path / "t.txt").read_text().splitlines()
    assert lines[0] == "page error: Bad delta path index 3" and len(lines) == 3
    assert all("FINISHED_EARLY_FOR_RERUN" in line for line in lines[1:])
