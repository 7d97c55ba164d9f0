"""Shareable links: the whole configuration as a URL query string, and back.

Pure functions over the app's settings (the ``st.session_state`` keys of :data:`ui.DEFAULTS`,
plus ``rule_*`` and ``ovr_*``), so they are tested without a browser. Reading a link never
evaluates anything: every value is parsed and checked against what the widgets allow, and what
does not fit is reported and left at its default.
"""

from __future__ import annotations

import math
import re

from sharding_lab.mesh import default_axes
from sharding_lab.optimizer import OPTIMIZERS
from sharding_lab.rules import LOGICAL_AXES, PRESETS

CUSTOM = "custom"
MAX_AXIS_SIZE = 64
NUMBER_RANGES = {"din": (1, 4096), "dmid": (1, 16384), "dout": (1, 4096), "hidden": (0, 8),
                 "batch": (1, 4096), "steps": (1, 20_000), "lr": (0.0, 1000.0), "decay": (0.0, 0.999)}
FLOATS = ("lr", "decay")
# Query keys that are not settings and are never reported: ``teacher`` carries the teacher view's
# token (app.py reads it; a student's copied link must not mention it, nor its absence).
NOT_SETTINGS = frozenset({"teacher"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_TARGET = re.compile(r"^(replicated|[A-Za-z_][A-Za-z0-9_]{0,31}(\+[A-Za-z_][A-Za-z0-9_]{0,31})*)$")


def to_query(state) -> dict[str, str]:
    """The settings in ``state`` as query parameters (short, readable, stable order)."""
    n = int(state["n_axes"])
    query = {"mesh": "x".join(str(state[f"size_{i}"]) for i in range(n)),
             "axes": ",".join(str(state[f"name_{i}"]) for i in range(n)),
             "type": str(state["axis_type"]).lower(), "preset": str(state["preset"])}
    if state["preset"] == CUSTOM:
        query["rules"] = ",".join(f"{a}:{state.get(f'rule_{a}', 'replicated')}" for a in LOGICAL_AXES)
        overrides = [f"{key[4:].rsplit('_', 1)[0]}.{key.rsplit('_', 1)[1]}:{value}"
                     for key, value in sorted(state.items()) if str(key).startswith("ovr_") and value != "(rule)"]
        if overrides:
            query["ovr"] = ",".join(overrides)
    query["opt"] = str(state["optimizer"])
    for key in NUMBER_RANGES:
        query[key] = f"{state[key]:g}" if key in FLOATS else str(int(state[key]))
    return query


def from_query(query: dict[str, str]) -> tuple[dict, list[str]]:
    """(settings to apply, problems) for a link's query parameters; bad values are skipped."""
    updates, problems = {}, []

    def bad(key, why):
        problems.append(f"{key}={query[key]!r} ignored: {why}")

    known = {"mesh", "axes", "type", "preset", "rules", "ovr", "opt", *NUMBER_RANGES}
    for key in query:
        if key not in known and key not in NOT_SETTINGS:
            problems.append(f"unknown setting {key!r} ignored")
    if "mesh" in query:
        sizes = [p for p in re.split(r"[x×,]", query["mesh"]) if p]
        if not (1 <= len(sizes) <= 3 and all(p.isdigit() and 1 <= int(p) <= MAX_AXIS_SIZE for p in sizes)):
            bad("mesh", f"expected 1–3 sizes from 1 to {MAX_AXIS_SIZE}, like 2x4")
        else:
            updates["n_axes"] = len(sizes)
            updates.update({f"size_{i}": int(p) for i, p in enumerate(sizes)})
            updates.update({f"name_{i}": name for i, name in enumerate(default_axes(len(sizes)))})
    if "axes" in query:
        names = query["axes"].split(",")
        n = updates.get("n_axes")
        if n is None or len(names) != n or not all(_NAME.match(name) for name in names):
            bad("axes", "give one name per mesh axis: letters, digits, '_'")
        else:
            updates.update({f"name_{i}": name for i, name in enumerate(names)})
    if "type" in query:
        if query["type"] in ("auto", "explicit"):
            updates["axis_type"] = query["type"].capitalize()
        else:
            bad("type", "auto or explicit")
    if "preset" in query:
        if query["preset"] in PRESETS or query["preset"] == CUSTOM:
            updates["preset"] = query["preset"]
        else:
            bad("preset", f"one of {', '.join(PRESETS)} or custom")
    if updates.get("preset") == CUSTOM:
        for key, prefix, pattern in (("rules", "rule_", r"^(embed|mlp|data)$"),
                                     ("ovr", "ovr_", r"^[a-z]+[0-9]*\.[0-9]$")):
            for item in filter(None, query.get(key, "").split(",")):
                name, _, target = item.partition(":")
                if re.match(pattern, name) and _TARGET.match(target):
                    updates[prefix + name.replace(".", "_")] = target
                else:
                    problems.append(f"{key} entry {item!r} ignored: expected NAME:AXIS")
    if "opt" in query:
        if query["opt"] in OPTIMIZERS:
            updates["optimizer"] = query["opt"]
        else:
            bad("opt", f"one of {', '.join(OPTIMIZERS)}")
    for key, (low, high) in NUMBER_RANGES.items():
        if key not in query:
            continue
        try:
            value = float(query[key]) if key in FLOATS else int(query[key])
        except ValueError:
            bad(key, "not a number")
            continue
        if not (math.isfinite(value) and low <= value <= high):
            bad(key, f"must be between {low} and {high}")
        else:
            updates[key] = value
    return updates, problems
