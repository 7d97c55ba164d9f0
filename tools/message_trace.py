"""What a browser tab and the Streamlit server said to each other, kept for the moment something breaks.

The load test's rarest failure is Streamlit's own frontend giving up on a message ("Cannot set a node at a
delta path", "Bad delta path index 3 (should be between [0, 2])"): the tab goes blank and never shows its
verdict, one tab in 20–100, only under load. The browser's error says which path it could not set, not
which messages led there. So each tab keeps its last :data:`KEEP` websocket frames (raw bytes: nothing is
decoded while the class runs) and, when the page reports an error, :meth:`MessageTrace.write` decodes them
with Streamlit's own protobuf classes into one line each — which run (script run id, fragment), what it
asked for (a rerun, a fragment's poll), which element path it drew — beside the session's screenshot.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

KEEP = 600  # frames per tab: a Train page's full run is ~40 messages, a poll ~15
# The settings the load test types: their values are shown, as the browser sent them and as the server drew them
# (with ``set``: the server wrote the value, and the browser's box takes it).
WATCHED = ("size_0", "size_1", "name_0", "name_1", "preset", "steps", "lr")


class MessageTrace:
    """A bounded log of one tab's websocket frames; attach with ``page.on("websocket", trace.attach)``."""

    def __init__(self, keep: int = KEEP):
        self.frames: collections.deque = collections.deque(maxlen=keep)
        self.started = time.monotonic()

    def attach(self, websocket) -> None:
        websocket.on("framereceived", lambda payload: self.frames.append((time.monotonic(), "<", payload)))
        websocket.on("framesent", lambda payload: self.frames.append((time.monotonic(), ">", payload)))

    def lines(self) -> list[str]:
        return [f"{at - self.started:9.3f} {way} {describe(way, payload)}" for at, way, payload in list(self.frames)]

    def write(self, path: Path, header: str = "") -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((header + "\n" if header else "") + "\n".join(self.lines()) + "\n")


def describe(way: str, payload) -> str:
    """One frame in one line: ``<`` from the server (a ForwardMsg), ``>`` from the browser (a BackMsg)."""
    if isinstance(payload, str):
        return f"text {payload[:120]!r}"
    try:
        return forward(payload) if way == "<" else back(payload)
    except Exception as error:  # noqa: BLE001 - a frame the installed protobufs cannot read is itself a fact
        return f"undecodable ({type(error).__name__}: {error}) {len(payload)} bytes"


def forward(payload: bytes) -> str:
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = ForwardMsg.FromString(payload)
    kind = msg.WhichOneof("type")
    run = msg.metadata.run
    where = f"run={run.script_run_id[:8]}" + (
        f" frags={','.join(f[:8] for f in run.fragment_ids)}" if run.fragment_ids else ""
    )
    if kind == "delta":
        delta = msg.delta
        what = delta.WhichOneof("type")
        inner = getattr(delta, what).WhichOneof("type") if what in ("new_element", "add_block") else ""
        frag = f" frag={delta.fragment_id[:8]}" if delta.fragment_id else ""
        shown = ""
        if inner in ("number_input", "text_input"):
            box = getattr(delta.new_element, inner)
            key = widget_key(box.id)
            if key in WATCHED:
                value = box.value if inner == "text_input" or box.HasField("value") else "(default)"
                shown = f" {key}={value}" + (" set" if box.set_value else "")
        return f"delta {list(msg.metadata.delta_path)} {what}:{inner}{shown}{frag} {where}"
    if kind == "script_finished":
        return f"script_finished {ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)} {where}"
    if kind == "session_status_changed":
        return f"session_status script_is_running={msg.session_status_changed.script_is_running} {where}"
    if kind == "new_session":
        return f"new_session page={msg.new_session.page_script_hash[:8]} {where}"
    if kind == "auto_rerun":
        return f"auto_rerun every {msg.auto_rerun.interval:.2f} s frag={msg.auto_rerun.fragment_id[:8]} {where}"
    if kind == "stop_auto_rerun":
        return f"stop_auto_rerun frags={','.join(f[:8] for f in msg.stop_auto_rerun.fragment_ids)} {where}"
    path = f" {list(msg.metadata.delta_path)}" if msg.metadata.delta_path else ""  # a ref_hash stands for a delta
    return f"{kind}{path} {where}"


def back(payload: bytes) -> str:
    from streamlit.proto.BackMsg_pb2 import BackMsg

    msg = BackMsg.FromString(payload)
    kind = msg.WhichOneof("type")
    if kind == "rerun_script":
        rerun = msg.rerun_script
        frag = f" frag={rerun.fragment_id[:8]}" if rerun.fragment_id else ""
        auto = " auto" if rerun.is_auto_rerun else ""
        values = [
            f"{key}={getattr(w, w.WhichOneof('value'))}"
            for w in rerun.widget_states.widgets
            if (key := widget_key(w.id)) in WATCHED and w.WhichOneof("value")
        ]
        return (
            f"rerun_script{frag}{auto} widgets={len(rerun.widget_states.widgets)} page={rerun.page_script_hash[:8]}"
            + (" " + " ".join(values) if values else "")
        )
    return kind or "empty"


def widget_key(widget_id: str) -> str:
    """The key a widget was given (``$$ID-<hash>-<key>``, Streamlit 1.67's ids), or its whole id."""
    return widget_id.split("-", 2)[2] if widget_id.startswith("$$ID-") and widget_id.count("-") >= 2 else widget_id
