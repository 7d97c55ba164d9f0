"""Shareable links: the whole configuration as a URL query string, and back.

Pure functions over the session's settings, so they are tested without a browser. Every run setting is read
and written by its row of :data:`sharding_lab.training.run_settings.RUN_SETTINGS`; this module adds what a
page keeps in a link besides the run (the focused device, the challenges solved). Reading a link never
evaluates anything: every value is parsed with an explicit pattern and checked against what the widgets
allow, and what does not fit is reported and left at its default.
"""

from __future__ import annotations

import re

from sharding_lab.lessons.challenges import CHALLENGES
from sharding_lab.training.run_settings import link_keys, read_link, write_link
from sharding_lab.training.setting_kinds import shown

# Query keys that are not settings and are never reported: ``teacher`` carries the teacher view's
# token (app.py reads it; a student's copied link must not mention it, nor its absence).
NOT_SETTINGS = frozenset({"teacher"})
PAGE_KEYS = ("focus", "solved")  # what pages keep in a link besides the run's settings
DEVICE = re.compile(r"[0-9]{1,6}\Z")


def to_query(state) -> dict[str, str]:
    """The settings in ``state`` as query parameters (short, readable, stable order)."""
    query = write_link(state)
    if state.get("focus") is not None:
        query["focus"] = str(int(state["focus"]))
    if state.get("solved"):  # the challenges this session solved travel with its link
        query["solved"] = ",".join(c for c in CHALLENGES if c in set(state["solved"]))
    return query


def from_query(query: dict[str, str]) -> tuple[dict, list[str]]:
    """(settings to apply, problems) for a link's query parameters; bad values are skipped."""
    known = link_keys() | set(PAGE_KEYS) | NOT_SETTINGS
    unknown = [f"unknown setting {shown(key)} ignored" for key in query if key not in known]
    link = read_link(query)
    link.problems[:0] = unknown
    if "focus" in query:
        text = query["focus"].strip(" ")
        if DEVICE.match(text):
            link.updates["focus"] = int(text)  # the Layout page checks it against the mesh ("has devices 0–7")
        else:
            link.bad("focus", "a device number: 0, 1, 2, … (the mesh picture shows them)")
    if "solved" in query:
        solved = [c.strip() for c in query["solved"].split(",") if c.strip()]
        unknown = [c for c in solved if c not in CHALLENGES]
        if unknown:  # named (a few of them) like any other part of a link that was not understood
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            link.problems.append(
                f"solved entries {', '.join(repr(c[:40]) for c in unknown[:3])}{more} ignored: not challenges here"
            )
        link.updates["solved"] = [c for c in CHALLENGES if c in set(solved)]
    return link.updates, link.problems
