"""Explore by clicking: focus a device, follow a block to its copies, see what a change moved.

State lives in ``st.session_state``: ``focus`` (a device id or None, also a link parameter),
``follow`` (the clicked block: array path, the devices holding it, its index ranges) and the last
layout seen (to say what the next change moved, and to go back to it). Clicks arrive through
Plotly selection events (``on_select``): the mesh picture's click targets carry a device id, each
shard-map block's carry ``[path, devices, ranges]`` (see :mod:`.figures`).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab.app.state import config_state
from sharding_lab.sharding.layout import describe_change, holdings, memory_per_device


def _clicked(key: str) -> list:
    """The customdata of the points a selection event on chart ``key`` picked."""
    event = st.session_state.get(key) or {}
    points = (event.get("selection") or {}).get("points") or []
    return [p["customdata"] for p in points if p.get("customdata") is not None]


def on_mesh_click() -> None:
    """A click on the mesh picture focuses that device (a second click on it unfocuses)."""
    picked = [d for d in _clicked("mesh_picture") if isinstance(d, int)]
    if picked:
        st.session_state.focus = None if st.session_state.get("focus") == picked[0] else picked[0]
        st.session_state.follow = None


def on_map_click(path: str):
    """A callback for the shard map of ``path``: a click on a block follows that block's copies."""

    def callback() -> None:
        picked = [c for c in _clicked(f"map_{path}") if isinstance(c, list) and len(c) == 3]
        if picked:
            block_path, devices, where = picked[0]
            st.session_state.follow = (block_path, tuple(int(d) for d in str(devices).split(",")), where)
            st.session_state.focus = None

    return callback


def check_focus(on_mesh: list[int], mesh_label: str) -> str | None:
    """A focus that is not on this mesh (from a link, or the mesh shrank) is dropped, and said."""
    focus = st.session_state.get("focus")
    if focus is None or focus in on_mesh:
        return None
    st.session_state.focus = None
    return (
        f"focus={focus} ignored: the {mesh_label} mesh has devices {on_mesh[0]}–{on_mesh[-1]}. "
        "Pick one in the box above or click it on the mesh."
    )


def followed_block(layouts) -> tuple[str, tuple[int, ...], str] | None:
    """The followed block, while its array still exists and the devices still hold it."""
    follow = st.session_state.get("follow")
    if not follow:
        return None
    path, devices, where = follow
    layout = layouts.get(path)
    if layout is None or any(d not in layout.devices for d in devices):
        st.session_state.follow = None
        return None
    return path, devices, where


def holdings_panel(layouts, device: int) -> None:
    st.subheader(f"What device {device} holds")
    rows = holdings(layouts, device)
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    per_device = {d: sum(row.values()) for d, row in memory_per_device(layouts).items()}
    mine, mean = per_device.get(device, 0), sum(per_device.values()) / max(1, len(per_device))
    st.caption(
        f"Device {device} holds {mine:,} bytes between steps (parameters, optimizer state, its batch "
        f"slice); the mesh average is {mean:,.0f} bytes. Every other device is dimmed on the pictures."
    )


def followed_panel(path: str, devices: tuple[int, ...], where: str) -> None:
    copies = len(devices)
    st.info(
        f"Block [{where}] of `{path}`: **{copies} {'copy' if copies == 1 else 'copies'}**, on device"
        f"{'s' if copies > 1 else ''} {', '.join(map(str, devices))} — lit on the mesh and on every map. "
        "Click another block, or a device, to move on.",
        icon=":material/content_copy:",
    )


def what_changed(plan: sl.Plan, layouts) -> dict:
    """Compare this layout with the last one this session saw; remember it for the next time.

    Returns ``{"arrays": {path: one line}, "back": settings to go back to}`` for the last change
    (kept until the next one), or ``{}``."""
    config = plan.config
    signature = (config.mesh, plan.rules, config.model, config.optimizer, config.batch_size)
    state = st.session_state
    last = state.get("last_layout")
    if last is not None and last["signature"] != signature:
        lines = {}
        for path, layout in layouts.items():
            if path in last["layouts"]:
                line = describe_change(last["layouts"][path], layout, last["sizes"], config.mesh.axis_sizes)
                if line:
                    lines[path] = line
        state.changes = {
            "arrays": lines,
            "back": last["settings"],
            "added": [p for p in layouts if p not in last["layouts"]],
        }
    if last is None or last["signature"] != signature:
        state.last_layout = {
            "signature": signature,
            "layouts": layouts,
            "sizes": config.mesh.axis_sizes,
            "settings": config_state.snapshot(state),
        }
    return state.get("changes") or {}


def _go_back() -> None:
    back = st.session_state.changes["back"]
    st.session_state.update(back)
    st.session_state.changes = None
    st.session_state.rules_shown_for = (back.get("preset"), None, None)  # rewrite the preset's rules


def show_changes(changes: dict) -> None:
    """The last change: which arrays moved, one line each, and a button to undo it."""
    if not changes:
        return
    lines = changes["arrays"]
    with st.container(border=True):
        if lines:
            st.markdown(
                f"**What the last change moved** — {len(lines)} array{'s' if len(lines) > 1 else ''} "
                "(marked *changed* on their maps):  \n" + "  \n".join(f"- {line}" for line in lines.values())
            )
        else:
            st.markdown("**The last change moved no array**: every device holds what it held before.")
        if changes.get("added"):
            st.caption("New arrays: " + ", ".join(changes["added"]))
        st.button(
            "Go back",
            key="go_back",
            on_click=_go_back,
            icon=":material/undo:",
            help="Restore the settings from before the last change.",
        )
