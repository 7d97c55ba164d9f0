"""What a page says besides its figures: an error as a sentence with the fix it knows as a button, a compiled
step against its textbook, the code behind what is on screen — every user-typed text shown literally."""

from __future__ import annotations

import re

import streamlit as st

import sharding_lab as sl
from sharding_lab.app.state import config_state
from sharding_lab.errors import in_app
from sharding_lab.export.source import source_of


def plain(text) -> str:
    """``text`` shown literally inside Markdown: user-typed names cannot format, link or inject. A
    command-line option (``--layers``) is set as code with non-breaking hyphens (U+2011): a narrow column broke
    it after its first "-", code span or not."""
    parts = re.split(r"(?<![\w-])(--[a-z][a-z0-9_]*(?:-[a-z0-9_]+)*)", str(text))  # odd items: the options
    return "".join(
        f"`{part.replace('-', chr(0x2011))}`" if i % 2 else re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~$&])", r"\\\1", part)
        for i, part in enumerate(parts)
    )


def _apply_fix(config: sl.LabConfig) -> None:
    try:
        st.session_state.update(config_state.state_from_config(config))
    except sl.ConfigError as error:  # the widgets cannot hold it: say so rather than half-apply it
        st.session_state.fix_failed = str(error)


def offer_fix(error: sl.ConfigError, where=st) -> None:
    """The one change known to make the configuration work (``error.fix``), as a button: the error
    is the lesson, and a click gets the learner back to a page that works."""
    if st.session_state.pop("fix_failed", None):
        where.caption("That fix cannot be shown in the sidebar's widgets: change the setting by hand.")
    if getattr(error, "fix", None) is not None:
        where.button(
            error.fix_label,
            key="apply_fix",
            on_click=_apply_fix,
            args=(error.fix,),
            type="primary",
            icon=":material/build:",
            help=error.fix_help,
        )


def show_comparison(agrees: list[str], differences: list[str], lead: str) -> None:
    """A compiled step against its textbook strategy, one line each: ✓ agrees, ≠ departs. The sentences
    are built from the compiled program; the only user text in them is axis names ([A-Za-z_]\\w*)."""
    lines = [f"✓ {line}" for line in agrees] + [f"≠ {line}" for line in differences]
    if lines:
        st.markdown(f"{lead}  \n" + "  \n".join(lines))


def show_error(error, lead: str = "Fix the configuration first.", where=st, fix: bool = True) -> None:
    """A ConfigError (or any message) as an error box, with its text shown literally, and the fix
    it knows as a button (``fix``: the page's main error; the sidebar's copy has none)."""
    text = in_app(error)
    first = text.split(" ", 1)[0]
    if lead.endswith(".") and first.isalpha() and first.islower():
        text = text[:1].upper() + text[1:]  # a sentence after a full stop ("cannot run. the mesh…")
    where.error(f"**{lead}** {plain(text)}" if lead else plain(text), icon=":material/error:")
    if fix:
        offer_fix(error, where)


def show_code(*objects) -> None:
    """The backend code behind what is on screen: the app teaches with its own source."""
    with st.expander("The code behind this", expanded=False):
        for obj in objects:
            st.code(source_of(obj), language="python")
