"""How a layout uses its mesh's axes, in sentences the Layout page's sidebar and ``sharding-lab layout`` both say:
an axis that splits no array (and a preset of the model's that would use every axis), and which axes play the
roles a preset names when the mesh's axes are named otherwise."""

from __future__ import annotations

import dataclasses
import math

from ..errors import ConfigError
from ..sharding.rules import axis_names, bind_preset, renamed_roles
from .config import Plan
from .config import plan as make_plan


def preset_using_every_axis(plan: Plan) -> str | None:
    """The first of the model's presets (in its own order) under which every mesh axis splits some array, planned
    to be sure; None when none does or the plan uses every axis already."""
    config = plan.config
    if not plan.unused_axes():
        return None
    wanted = {a for a, n in config.mesh.axis_sizes.items() if n > 1}
    for name in config.family.presets:
        if name == config.preset:
            continue
        try:
            rules = bind_preset(name, config.mesh, config.family.name)
        except ConfigError:
            continue
        targets = [*rules.logical().values(), *(t for _, dims in rules.overrides for t in dims)]
        if not wanted <= {name for t in targets for name in axis_names(t)}:  # cheap: no plan for a preset that
            continue  # names not every axis
        try:
            candidate = make_plan(dataclasses.replace(config, preset=name, rules=None))
        except ConfigError:
            continue
        if not candidate.unused_axes():
            return name
    return None


def unused_sentence(plan: Plan) -> str | None:
    """What an axis that splits no array means, and what would use it; None when every axis splits something."""
    unused = plan.unused_axes()
    if not unused:
        return None
    sizes = plan.config.mesh.axis_sizes
    one = len(unused) == 1
    it = "it" if one else "them"
    preset = plan.config.preset if plan.config.rules is None else None
    why = (
        f"preset {preset} puts nothing on {it}"
        if preset in plan.config.family.presets
        else f"every array is replicated along {it}"
    )
    text = (
        ("Mesh axis " if one else "Mesh axes ")
        + " and ".join(f"`{a}` ({sizes[a]})" for a in unused)
        + (" splits" if one else " split")
        + f" no array: {why}, so the devices along {it} repeat each other's work (the step's work done "
        + f"{math.prod(sizes[a] for a in unused)} times)."
    )
    better = preset_using_every_axis(plan)
    if better is not None:
        title = plan.config.family.presets[better].title
        text += f" To use every axis: preset {better} ({title}), or a mesh without {'that axis' if one else 'those'}."
    else:
        text += f" Map a logical axis to {it} with a rule, or use a mesh without {it}."
    return text


def roles_sentence(plan: Plan) -> str | None:
    """Which axes play the roles the plan's preset names, when the mesh's axes are named otherwise."""
    config = plan.config
    if config.preset is None or config.rules is not None:
        return None
    return renamed_roles(config.preset, config.mesh, config.family.name)


def notes(plan: Plan) -> list[str]:
    """Every sentence about how ``plan`` uses its mesh's axes (the renamed roles first)."""
    return [note for note in (roles_sentence(plan), unused_sentence(plan)) if note]
