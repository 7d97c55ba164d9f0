"""Shareable links: the whole configuration as a URL query string, and back.

Pure functions over the app's settings (the ``st.session_state`` keys of :mod:`.settings`, plus
``rule_*`` and ``ovr_*``), so they are tested without a browser. Reading a link never
evaluates anything: every value is parsed and checked against what the widgets allow, and what
does not fit is reported and left at its default.
"""

from __future__ import annotations

import math
import re

import sharding_lab as sl
from sharding_lab.app.settings import (
    CUSTOM,
    FLOATS,
    GENERAL_RANGES,
    MICROBATCHES,
    TRAIN_DEFAULTS,
    max_axis_size,
    model_spec,
    named_size_values,
    number_ranges,
    pipelined,
    size_choices,
    size_key,
)
from sharding_lab.hardware import targets
from sharding_lab.lessons.challenges import CHALLENGES
from sharding_lab.pipeline import SCHEDULES
from sharding_lab.sharding.mesh import AXIS_NAME as _NAME
from sharding_lab.sharding.mesh import default_axes
from sharding_lab.training.optimizer import OPTIMIZERS

# Query keys that are not settings and are never reported: ``teacher`` carries the teacher view's
# token (app.py reads it; a student's copied link must not mention it, nor its absence).
NOT_SETTINGS = frozenset({"teacher"})
_TARGET = re.compile(r"^(replicated|[A-Za-z_][A-Za-z0-9_]{0,31}(\+[A-Za-z_][A-Za-z0-9_]{0,31})*)$")


def to_query(state) -> dict[str, str]:
    """The settings in ``state`` as query parameters (short, readable, stable order)."""
    n = int(state["n_axes"])
    family = sl.family(state.get("model", "mlp"))
    query = {} if state.get("target", "cpu") == "cpu" else {"target": str(state["target"])}
    query |= {
        "mesh": "x".join(str(state[f"size_{i}"]) for i in range(n)),
        "axes": ",".join(str(state[f"name_{i}"]) for i in range(n)),
        "type": str(state["axis_type"]).lower(),
    }
    if family.name != "mlp":  # links made before there were other models stay as they were
        query["model"] = family.name
    query["preset"] = str(state["preset"])
    if state["preset"] == CUSTOM:
        query["rules"] = ",".join(f"{a}:{state.get(f'rule_{a}', 'replicated')}" for a in family.logical_axes)
        overrides = [
            f"{key[4:].rsplit('_', 1)[0]}.{key.rsplit('_', 1)[1]}:{value}"
            for key, value in sorted(state.items())
            if str(key).startswith("ovr_") and value != "(rule)"
        ]
        if overrides:
            query["ovr"] = ",".join(overrides)
    if state.get("focus") is not None:
        query["focus"] = str(int(state["focus"]))
    query["opt"] = str(state["optimizer"])
    if family.named_sizes:  # the name says what the sizes below are (they are written all the same)
        try:
            name = family.size_name(model_spec(state))
        except (sl.ConfigError, TypeError, ValueError):
            name = None
        if name is not None:
            query["size"] = name
    choices = size_choices()
    for key in [size_key(f) for f in family.size_fields] + list(GENERAL_RANGES):
        query[key] = str(state[key]) if key in choices else f"{state[key]:g}" if key in FLOATS else str(int(state[key]))
    if pipelined(state):  # only a pipelined layout has microbatches and a schedule
        query["mb"], query["schedule"] = str(int(state["microbatches"])), str(state["schedule"])
    if state.get("solved"):  # the challenges this session solved travel with its link
        query["solved"] = ",".join(c for c in CHALLENGES if c in set(state["solved"]))
    return query


def from_query(query: dict[str, str]) -> tuple[dict, list[str]]:
    """(settings to apply, problems) for a link's query parameters; bad values are skipped."""
    updates, problems = {}, []

    def bad(key, why):
        problems.append(f"{key}={query[key]!r} ignored: {why}")

    ranges = number_ranges()
    choices = size_choices()
    known = {
        "target",
        "mesh",
        "axes",
        "type",
        "model",
        "preset",
        "rules",
        "ovr",
        "opt",
        "focus",
        "solved",
        "size",
        "mb",
        "schedule",
        *ranges,
        *choices,
    }
    for key in query:
        if key not in known and key not in NOT_SETTINGS:
            problems.append(f"unknown setting {key!r} ignored")
    if "target" in query:  # a name checked against the known targets, never imported or evaluated
        try:
            updates["target"] = targets.parse(query["target"]).name
        except sl.ConfigError as error:
            bad("target", str(error).split(": ", 1)[-1])
    if "mesh" in query:
        sizes = [p for p in re.split(r"[x×,]", query["mesh"]) if p]
        largest = max_axis_size({"target": updates.get("target", targets.CPU)})  # what the widgets allow
        if not (1 <= len(sizes) <= 3 and all(p.isdigit() and 1 <= int(p) <= largest for p in sizes)):
            bad("mesh", f"expected 1–3 sizes from 1 to {largest}, like 2x4")
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
    family = sl.FAMILIES["mlp"]
    if "model" in query:
        if query["model"] in sl.FAMILIES:
            updates["model"] = query["model"]
            family = sl.FAMILIES[query["model"]]
            # As choosing the model in the sidebar does: its training defaults, unless the link says.
            updates.update({**TRAIN_DEFAULTS, **family.train_defaults})
        else:
            bad("model", f"one of {', '.join(sl.FAMILIES)}")
    if "preset" in query:
        if query["preset"] in family.presets or query["preset"] == CUSTOM:
            updates["preset"] = query["preset"]
        else:
            bad("preset", f"one of {', '.join(family.presets)} or custom")
    elif "model" in updates:
        updates["preset"] = family.default_preset
    if updates.get("preset") == CUSTOM:
        axes = "|".join(family.logical_axes)
        for key, prefix, pattern in (("rules", "rule_", rf"^({axes})$"), ("ovr", "ovr_", r"^[a-z_]+[0-9]*\.[0-9]$")):
            for item in filter(None, query.get(key, "").split(",")):
                name, _, target = item.partition(":")
                if re.match(pattern, name) and _TARGET.match(target):
                    updates[prefix + name.replace(".", "_")] = target
                else:
                    problems.append(f"{key} entry {item!r} ignored: expected NAME:AXIS")
    if "focus" in query:
        text = query["focus"].strip()
        if text.isascii() and text.isdigit() and len(text) <= 6:
            updates["focus"] = int(text)  # the Layout page checks it against the mesh ("has devices 0–7")
        else:
            bad("focus", "a device number: 0, 1, 2, … (the mesh picture shows them)")
    if "solved" in query:
        solved = [c.strip() for c in query["solved"].split(",") if c.strip()]
        unknown = [c for c in solved if c not in CHALLENGES]
        if unknown:  # named (a few of them) like any other part of a link that was not understood
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            problems.append(
                f"solved entries {', '.join(repr(c[:40]) for c in unknown[:3])}{more} ignored: not challenges here"
            )
        updates["solved"] = [c for c in CHALLENGES if c in set(solved)]
    if "size" in query:  # a named size sets the sizes; the link's own size values (below) then win
        if query["size"] in family.named_sizes:
            updates.update(named_size_values(family, query["size"]))
        else:
            bad(
                "size",
                f"one of {', '.join(family.named_sizes)}"
                if family.named_sizes
                else f"the {family.name} model has no named sizes",
            )
    for key, allowed in choices.items():
        if key in query:
            if query[key] in allowed:
                updates[key] = query[key]
            else:
                bad(key, f"one of {', '.join(allowed)}")
    if "opt" in query:
        if query["opt"] in OPTIMIZERS:
            updates["optimizer"] = query["opt"]
        else:
            bad("opt", f"one of {', '.join(OPTIMIZERS)}")
    if "mb" in query:
        text = query["mb"].strip()
        if text.isascii() and text.isdigit() and MICROBATCHES[0] <= int(text) <= MICROBATCHES[1]:
            updates["microbatches"] = int(text)
        else:
            bad("mb", f"microbatches: a whole number from {MICROBATCHES[0]} to {MICROBATCHES[1]}")
    if "schedule" in query:
        if query["schedule"] in SCHEDULES:
            updates["schedule"] = query["schedule"]
        else:
            bad("schedule", f"one of {', '.join(SCHEDULES)}")
    for key, (low, high) in ranges.items():
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
